"""Opening a generative PRM by model, template and backend: what ``--backend generative``
opens (:func:`open_generative`)."""

from __future__ import annotations

from typing import Any

from prmkit.errors import PrmkitError
from prmkit.verify import templates as T
from prmkit.verify.prm import GenConfig, GenerativePRM


def open_generative(model: str | None, fmt: str | None, config: GenConfig,
                    hf: Any = None, calculator: bool | None = None) -> GenerativePRM:
    """A generative PRM: ``model`` a default model name, folder or hub id; ``fmt`` a template
    name (default ``plain``); sampled on ``config.server`` when given (an OpenAI-compatible
    server), else with ``config.engine`` (transformers or vLLM); ``hf`` the run's
    :class:`prmkit.models.reading.HFConfig` (dtype, device, trust_remote_code); ``calculator``
    whether the steps are read with the calculator's notes (default: as the verifier folder
    was trained, else not)."""
    if not model or model == "default":
        raise PrmkitError("--backend generative needs --model: an instruct model (smollm2-135m, "
                          "gemma3-270m, a folder or a hub id), or a verifier trained by "
                          "`prmkit train verifier`")
    saved = saved_verifier(model)
    template = T.get_template(fmt or saved.get("template") or "plain")   # before the model loads
    config = config.resolved(saved.get("sampling"), template)
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
    if calculator is None:
        calculator = bool(saved.get("calculator", False))
    return GenerativePRM(backend, template, chat, backend.tokenizer.eos_token or "", config,
                         calculator)


def saved_verifier(model: str) -> dict[str, Any]:
    """What a verifier folder trained by ``prmkit train verifier`` saved beside its weights
    (its template and sampling settings); empty for any other model."""
    import json
    import os

    path = os.path.join(model, T.VERIFIER_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError) as e:
        raise PrmkitError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(saved, dict) or saved.get("template") not in T.TEMPLATES:
        raise PrmkitError(f"{path}: field 'template' must name a template "
                          f"({', '.join(T.TEMPLATES)})")
    if not isinstance(saved.get("calculator", False), bool):
        raise PrmkitError(f"{path}: field 'calculator' must be true or false, got "
                          f"{saved['calculator']!r}")
    return saved


def open_teacher(teacher: str, server_model: str, fmt: str, samples: int, max_new_tokens: int,
                 seed: int, calculator: bool = False) -> GenerativePRM:
    """The teacher of ``train verifier --chains teacher``: a model here, or an
    OpenAI-compatible server (a URL), that samples whole verifications with template ``fmt``,
    reading the steps as the verifier it teaches will (``calculator``)."""
    from prmkit.models.backends.remote import is_remote

    url = is_remote(teacher)
    config = GenConfig(samples=samples, max_new_tokens=max_new_tokens, temperature=0.7,
                       verifier_seed=seed, server=teacher if url else None,
                       server_model=server_model if url else None)
    return open_generative(server_model if url else teacher, fmt, config, calculator=calculator)


def generation_of(args: Any) -> tuple[GenConfig | None, dict[str, Any] | None]:
    """The generative PRM's sampling from a command's options, and the settings an evaluation
    records beside its figures (None, None for another backend, which refuses a generative
    option given to it; the generative backend refuses the options only a discriminative PRM
    reads)."""
    import dataclasses

    if getattr(args, "backend", "hf") != "generative":
        given = [("no-" if getattr(args, f.name) is False else "") + f.name.replace("_", "-")
                 for f in dataclasses.fields(GenConfig)
                 if getattr(args, f.name, f.default) != f.default]
        if given:
            raise PrmkitError(f"--{given[0]} is read only with --backend generative (it sets "
                              f"how a generative PRM samples)")
        return None, None
    from prmkit.models.reading import HFConfig

    # what reads a discriminative PRM's forward passes, with their defaults
    for name, default in (("per_prefix", False), ("token_budget", HFConfig.token_budget),
                          ("max_length", None)):
        if getattr(args, name, default) != default:
            raise PrmkitError(f"--{name.replace('_', '-')} is read only by a discriminative PRM "
                              f"(--backend hf or vllm); a generative PRM's cost is set by "
                              f"--samples and --max-new-tokens")
    config = GenConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(GenConfig)})
    from prmkit.resume import config_identity

    return config, config_identity(config)   # where it runs is not a setting


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
