"""Opening a generative PRM by model, template and backend: what ``--backend generative``
opens (:func:`open_generative`)."""

from __future__ import annotations

from typing import Any

from prmkit.errors import PrmkitError
from prmkit.verify import templates as T
from prmkit.verify.prm import GenConfig, GenerativePRM


def open_generative(model: str | None, fmt: str | None, config: GenConfig,
                    hf: Any = None) -> GenerativePRM:
    """A generative PRM: ``model`` a default model name, folder or hub id read with
    transformers; ``fmt`` a template name (default ``plain``); ``hf`` the run's
    :class:`prmkit.models.reading.HFConfig` (dtype, device, trust_remote_code)."""
    template = T.get_template(fmt or "plain")   # an unknown name before the model loads
    if not model or model == "default":
        raise PrmkitError("--backend generative needs --model: an instruct model (smollm2-135m, "
                          "gemma3-270m, a folder or a hub id)")
    from prmkit.verify.hf import load_hf_verifier

    backend = load_hf_verifier(model, getattr(hf, "dtype", "auto"), getattr(hf, "device", "cpu"),
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
    return config, dataclasses.asdict(config)
