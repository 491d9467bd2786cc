"""Opening a generative PRM by model, template and backend: what ``--backend generative``
opens (:func:`open_generative`)."""

from __future__ import annotations

from typing import Any

from prmkit.errors import PrmkitError
from prmkit.verify import templates as T
from prmkit.verify.prm import GenConfig, GenerativePRM


def open_generative(model: str | None, fmt: str | None, config: GenConfig,
                    hf: Any = None) -> GenerativePRM:
    """A generative PRM: ``model`` a default model name, folder or hub id; ``fmt`` a template
    name (default ``plain``); sampled on ``config.server`` when given (an OpenAI-compatible
    server), else with ``config.engine`` (transformers or vLLM); ``hf`` the run's
    :class:`prmkit.models.reading.HFConfig` (dtype, device, trust_remote_code)."""
    template = T.get_template(fmt or "plain")   # an unknown name before the model loads
    if not model or model == "default":
        raise PrmkitError("--backend generative needs --model: an instruct model (smollm2-135m, "
                          "gemma3-270m, a folder or a hub id)")
    backend: Any
    if config.server:
        from prmkit.generate.openai import OpenAIConfig
        from prmkit.verify.openai import OpenAIVerifier

        server = OpenAIConfig(base_url=config.server, model=config.server_model or model)
        backend = OpenAIVerifier(server, load_tokenizer(model))
    elif config.engine == "vllm":
        from prmkit.verify.vllm import load_vllm_verifier

        backend = load_vllm_verifier(model, getattr(hf, "dtype", "auto"))
    else:
        from prmkit.verify.hf import load_hf_verifier

        backend = load_hf_verifier(model, getattr(hf, "dtype", "auto"),
                                   getattr(hf, "device", "cpu"),
                                   getattr(hf, "trust_remote_code", False))
    chat = T.chat_of(backend.tokenizer, template, model)
    return GenerativePRM(backend, template, chat, backend.tokenizer.eos_token or "", config)


def generation_of(args: Any) -> tuple[GenConfig | None, dict[str, Any] | None]:
    """The generative PRM's sampling from a command's options, and the settings it adds to a
    resumable run's (None, None for another backend)."""
    if getattr(args, "backend", "hf") != "generative":
        return None, None
    import dataclasses

    config = GenConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(GenConfig)})
    settings = dataclasses.asdict(config)
    settings.pop("server")   # where it runs is not a setting: the same model elsewhere resumes
    return config, settings


def load_tokenizer(model: str) -> Any:
    """The tokenizer of a default model name, folder or hub id (a server's prompts)."""
    from prmkit.models.folder import resolve_model_path

    path = resolve_model_path(model)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise PrmkitError(f"--model {model}: cannot load its tokenizer "
                          f"({str(e).splitlines()[0]})") from None
