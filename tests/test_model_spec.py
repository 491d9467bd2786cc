"""One model spec (``prmkit.models.spec.resolve_model``): what ``--model`` means is decided once,
and every opener takes the spec without looking the model up again."""

from __future__ import annotations

import json

import pytest

import tiny
from prmkit import cli
from prmkit.errors import PrmkitError
from prmkit.models import folder
from prmkit.models.load import OPENERS
from prmkit.models.names import PUBLIC_PRMS, REMOTE_CODE, needs_remote_code
from prmkit.models.pypi import DEFAULT_PRM_DIR
from prmkit.models.spec import VERIFIER_FILE, resolve_model


@pytest.fixture
def model(tmp_path):
    tiny.token_classifier().save_pretrained(tmp_path / "m", safe_serialization=True)
    tiny.tokenizer().save_pretrained(tmp_path / "m")
    return str(tmp_path / "m")


def test_default_is_the_shipped_prm_beside_a_folder_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").mkdir()
    (tmp_path / "default" / "prmkit_train.json").write_text('{"kind": "orm"}')
    a, b = resolve_model(None), resolve_model("default")
    assert a.path == b.path == DEFAULT_PRM_DIR and a.kind == b.kind == "prm"
    assert a.step_format == b.step_format and a.step_format is not None
    assert a.threshold == b.threshold == folder.saved_threshold(None) is not None
    assert a.name == b.name == "default" and a.opener == "hf"
    assert a.delta_base is not None            # the shipped PRM is a delta on its base
    assert a.threshold_for(None) == folder.threshold_for("default", None)


def test_a_server_a_verifier_and_a_backend_each_go_to_their_own_opener(tmp_path):
    url = resolve_model("http://127.0.0.1:9", token="t")
    assert url.served and url.opener == "served" and url.token == "t" and url.step_format is None
    with pytest.raises(PrmkitError, match="not a server URL"):
        resolve_model("http://127.0.0.1:9", "vllm")
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / VERIFIER_FILE).write_text("{}")
    with pytest.raises(PrmkitError, match="--backend generative"):
        resolve_model(str(tmp_path / "v"))
    v = resolve_model(str(tmp_path / "v"), "generative")
    assert v.kind == "verifier" and v.opener == "generative"
    with pytest.raises(PrmkitError, match="is not one of"):
        resolve_model(None, "onnx")
    assert set(OPENERS) == {"hf", "implicit-prm", "served", "vllm"}


def test_a_public_prm_that_runs_its_own_code_is_refused_without_the_flag(tmp_path, monkeypatch,
                                                                          model):
    assert REMOTE_CODE <= set(PUBLIC_PRMS)
    assert needs_remote_code("qwen/qwen2.5-math-prm-7b/") and not needs_remote_code(
        "peiyi9979/math-shepherd-mistral-7b-prm")
    monkeypatch.setattr(folder, "resolve_model_path", lambda name: model)   # "downloaded"
    with pytest.raises(PrmkitError, match="--trust-remote-code"):
        resolve_model("Qwen/Qwen2.5-Math-PRM-7B", fmt="trl")
    assert resolve_model("Qwen/Qwen2.5-Math-PRM-7B", fmt="trl", trust_remote_code=True).path \
        == model


def test_score_resolves_the_model_once(model, tmp_path, monkeypatch):
    calls = {"resolve": 0, "own": 0}
    resolve, own = folder.resolve_model_path, folder.own_format

    def counted(fn, key):
        def wrapper(*a, **k):
            calls[key] += 1
            return fn(*a, **k)
        return wrapper

    monkeypatch.setattr(folder, "resolve_model_path", counted(resolve, "resolve"))
    monkeypatch.setattr(folder, "own_format", counted(own, "own"))
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "a", "problem": "2 + 3?", "steps": ["2 + 3 = 5.", "So 5."]})
                   + "\n")
    assert cli.main(["score", "--model", model, "--format", "trl", "--dtype", "float32",
                     "--input", str(src), "--output", str(tmp_path / "o.jsonl")]) == 0
    assert calls == {"resolve": 1, "own": 1}
    assert len(json.loads((tmp_path / "o.jsonl").read_text())["step_scores"]) == 2
