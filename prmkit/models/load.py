"""Opening a PRM from its spec (:func:`prmkit.models.spec.resolve_model`, where every name is
resolved once), by a table of openers: :data:`OPENERS` maps the spec's opener to the function
that opens it, and :func:`open_model` is that lookup.

* ``hf``: an HF PRM, ORM or public PRM (:func:`prmkit.models.backends.hf.open_hf`);
* ``implicit-prm``: a folder of ``prmkit train implicit-prm`` as a policy and reference pair
  (:mod:`prmkit.models.backends.implicit`);
* ``served``: a running ``prmkit serve`` (:class:`prmkit.models.backends.remote.RemotePRM`);
* ``vllm``: the same models through vLLM's pooling API
  (:class:`prmkit.models.backends.vllm.VLLMPRM`).

The generative verifiers sit a layer above (:mod:`prmkit.verify`);
:data:`prmkit.scoring.OPENERS` adds their opener to this table. :func:`open_prm` and
:func:`load_prm` resolve a name and open it, for library users.
"""

from __future__ import annotations

from typing import Any, Callable

from prmkit.models.folder import kind_of
from prmkit.models.pypi import is_default
from prmkit.models.reading import HFConfig
from prmkit.models.spec import ModelSpec, resolve_model
from prmkit.stepformat import StepFormat


def _open_hf(spec: ModelSpec, config: HFConfig) -> Any:
    from prmkit.models.backends.hf import open_hf

    return open_hf(spec, config)


def _open_implicit(spec: ModelSpec, config: HFConfig) -> Any:
    from prmkit.models.backends.implicit import load_implicit_prm  # a policy + reference pair

    return load_implicit_prm(spec.path, config, spec.step_format)


def _open_served(spec: ModelSpec, config: HFConfig) -> Any:
    from prmkit.models.backends.remote import RemotePRM

    return RemotePRM(spec.path, token=spec.token)


def _open_vllm(spec: ModelSpec, config: HFConfig) -> Any:
    """vLLM picks its GPU itself; it takes ``config``'s dtype, length cut and
    trust_remote_code."""
    from prmkit.models.backends.vllm import VLLMPRM

    return VLLMPRM(spec, dtype=config.dtype, max_model_len=config.max_length,
                   trust_remote_code=config.trust_remote_code)


OPENERS: dict[str, Callable[[ModelSpec, HFConfig], Any]] = {
    "hf": _open_hf, "implicit-prm": _open_implicit, "served": _open_served, "vllm": _open_vllm}


def open_model(spec: ModelSpec, config: HFConfig | None = None) -> Any:
    """The PRM of ``spec``, by its opener."""
    return OPENERS[spec.opener](spec, config or HFConfig())


def load_prm(path: str, step_format: str | StepFormat | None = None,
             config: HFConfig | None = None) -> Any:
    """A local PRM, by the kind of its folder (prm, orm or implicit-prm)."""
    config = config or HFConfig()
    return open_model(resolve_model(path, "hf", step_format,
                                    trust_remote_code=config.trust_remote_code), config)


def open_prm(name_or_url: str | None, token: str | None = None,
             step_format: str | StepFormat | None = None, config: HFConfig | None = None) -> Any:
    """The PRM a command scores with: the default PRM (``None``), a running ``prmkit serve``
    (a URL; ``token`` defaults to ``$PRMKIT_TOKEN``), or a local model."""
    config = config or HFConfig()
    return open_model(resolve_model(name_or_url, "hf", step_format, token,
                                    config.trust_remote_code), config)


def model_kind(name_or_url: str | None) -> str:
    """prm, orm or implicit-prm: what :func:`open_prm` opens for ``name_or_url`` (a server or
    a folder prmkit did not train is a prm)."""
    from prmkit.models.names import is_remote

    if is_default(name_or_url):
        return "prm"
    return "prm" if is_remote(str(name_or_url)) else kind_of(str(name_or_url))


def wrap_model(model: Any, tokenizer: Any, step_format: StepFormat,
               config: HFConfig | None = None) -> Any:
    """A scorer over a model in memory (a trainer's, validating as it trains)."""
    from prmkit.models.backends.hf import HFPRM

    return HFPRM(model, tokenizer, step_format, config)
