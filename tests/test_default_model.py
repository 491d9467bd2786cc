"""``default`` names the shipped PRM wherever a model is named, decided in one place
(``models/pypi.py``'s ``is_default``): a folder named ``default`` in the working directory changes
nothing (it is ``./default``)."""

from __future__ import annotations

import os

from prmkit.models import folder, load
from prmkit.models.pypi import DEFAULT_PRM_DIR, is_default
from prmkit.scoring import model_identity


def test_default_is_the_shipped_prm_even_beside_a_folder_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").mkdir()
    (tmp_path / "default" / "prmkit_train.json").write_text('{"kind": "orm"}')
    assert is_default("default") and is_default(None) and not is_default("./default")
    assert folder.resolve_model_path("default") == DEFAULT_PRM_DIR
    assert folder.saved_threshold("default") == folder.saved_threshold(None)
    assert folder.saved_threshold("default") is not None
    assert folder.threshold_for("default", None) == folder.threshold_for(None, None)
    assert folder.kind_of("default") == load.model_kind("default") == "prm"
    assert model_identity("default") == model_identity(None) == "default"
    assert model_identity("./default") == os.path.abspath("default")
