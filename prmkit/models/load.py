"""Opening a PRM: by folder, dispatching on the folder's kind, and by name or URL.

* :func:`load_prm` loads a local model (a folder, a default model name or a hub id): an implicit
  PRM folder (``kind: implicit-prm`` in ``prmkit_train.json``) as a policy and reference pair
  (:mod:`prmkit.models.backends.implicit`), any other (a PRM, an ORM, a public PRM) as an HF PRM
  (:mod:`prmkit.models.backends.hf`).
* :func:`open_prm` is what every command that reads steps calls: no name, or ``default``,
  means the trained default PRM shipped in the package, an ``http://`` URL a running ``prmkit serve``
  (:class:`prmkit.models.backends.remote.RemotePRM`), anything else :func:`load_prm`.
"""

from __future__ import annotations

from typing import Any

from prmkit.models.folder import kind_of, resolve_model_path
from prmkit.models.pypi import default_prm_path, is_default
from prmkit.models.reading import HFConfig
from prmkit.stepformat import StepFormat


def load_prm(path: str, step_format: str | StepFormat | None = None,
             config: HFConfig | None = None) -> Any:
    """A local PRM, by the kind of its folder (prm, orm or implicit-prm)."""
    resolved = resolve_model_path(path)  # a missing model is reported before the heavy imports
    if kind_of(resolved) == "implicit-prm":
        from prmkit.models.backends.implicit import load_implicit_prm  # a policy + reference pair

        return load_implicit_prm(resolved, config or HFConfig(), step_format)
    from prmkit.models.backends.hf import load_hf_prm

    return load_hf_prm(path, step_format, config)


def open_prm(name_or_url: str | None, token: str | None = None,
             step_format: str | StepFormat | None = None, config: HFConfig | None = None) -> Any:
    """The PRM a command scores with: the default PRM (``None``), a running ``prmkit serve``
    (a URL; ``token`` defaults to ``$PRMKIT_TOKEN``), or :func:`load_prm`."""
    from prmkit.models.backends.remote import RemotePRM, is_remote

    model = default_prm_path() if is_default(name_or_url) else name_or_url
    if is_remote(model):
        return RemotePRM(model, token=token)
    return load_prm(model, step_format, config)


def model_kind(name_or_url: str | None) -> str:
    """prm, orm or implicit-prm: what :func:`open_prm` opens for ``name_or_url`` (a server or
    a folder prmkit did not train is a prm)."""
    from prmkit.models.backends.remote import is_remote

    if is_default(name_or_url):
        return "prm"
    return "prm" if is_remote(name_or_url) else kind_of(name_or_url)


def wrap_model(model: Any, tokenizer: Any, step_format: StepFormat,
               config: HFConfig | None = None) -> Any:
    """A scorer over a model in memory (a trainer's, validating as it trains)."""
    from prmkit.models.backends.hf import HFPRM

    return HFPRM(model, tokenizer, step_format, config)
