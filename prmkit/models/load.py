"""Opening a PRM: by folder, dispatching on the folder's kind, and by name or URL.

* :func:`load_prm` loads a local model (a folder, a default model name or a hub id): an implicit
  PRM folder (``kind: implicit-prm`` in ``prmkit_train.json``) as a policy and reference pair
  (:mod:`prmkit.models.implicit`), any other (a PRM, an ORM, a public PRM) as an HF PRM
  (:mod:`prmkit.models.hf`).
* :func:`open_prm` is what every command that reads steps calls: no name means the trained
  default PRM shipped in the package, an ``http://`` URL a running ``prmkit serve``
  (:class:`prmkit.models.remote.RemotePRM`), anything else :func:`load_prm`.
"""

from __future__ import annotations

import os
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.models.folder import kind_of, resolve_model_path
from prmkit.models.reading import HFConfig
from prmkit.stepformat import StepFormat


def default_prm_path() -> str:
    """The folder of the trained default PRM shipped in the package."""
    from prmkit.models.pypi import DEFAULT_PRM_DIR

    if not os.path.isfile(os.path.join(DEFAULT_PRM_DIR, "prmkit_format.json")):
        raise PrmkitError("no default PRM is installed with this prmkit; pass --model")
    return DEFAULT_PRM_DIR


def load_prm(path: str, step_format: str | StepFormat | None = None,
             config: HFConfig | None = None) -> Any:
    """A local PRM, by the kind of its folder (prm, orm or implicit-prm)."""
    resolved = resolve_model_path(path)  # a missing model is reported before the heavy imports
    if kind_of(resolved) == "implicit-prm":
        from prmkit.models.implicit import load_implicit_prm  # a policy + reference pair

        return load_implicit_prm(resolved, config or HFConfig(), step_format)
    from prmkit.models.hf import load_hf_prm

    return load_hf_prm(path, step_format, config)


def open_prm(name_or_url: str | None, token: str | None = None,
             step_format: str | StepFormat | None = None, config: HFConfig | None = None) -> Any:
    """The PRM a command scores with: the default PRM (``None``), a running ``prmkit serve``
    (a URL; ``token`` defaults to ``$PRMKIT_TOKEN``), or :func:`load_prm`."""
    from prmkit.models.remote import RemotePRM, is_remote

    model = name_or_url or default_prm_path()
    if is_remote(model):
        return RemotePRM(model, token=token)
    return load_prm(model, step_format, config)


def model_kind(name_or_url: str | None) -> str:
    """prm, orm or implicit-prm: what :func:`open_prm` opens for ``name_or_url`` (a server or
    a folder prmkit did not train is a prm)."""
    from prmkit.models.remote import is_remote

    if name_or_url is None:  # the default PRM
        return "prm"
    return "prm" if is_remote(name_or_url) else kind_of(name_or_url)


def wrap_model(model: Any, tokenizer: Any, step_format: StepFormat,
               config: HFConfig | None = None) -> Any:
    """A scorer over a model in memory (a trainer's, validating as it trains)."""
    from prmkit.models.hf import HFPRM

    return HFPRM(model, tokenizer, step_format, config)
