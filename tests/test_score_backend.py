"""``--backend vllm`` from the command line, against a stand-in for vLLM's pooling interface
(test_models_vllm's fake engine, built here from the model folder the command names): the same
records as the HF backend; the evaluations take the option too. No GPU, no vLLM needed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import tiny
from prmkit import cli
from prmkit.models.backends import vllm as vllm_backend
from test_models_vllm import FakeLLM, FakeParams
import test_eval_model


class FolderLLM(FakeLLM):
    """``vllm.LLM(**engine_args)``: the fake engine over the folder in ``model``."""

    made: list = []

    def __init__(self, **kwargs):
        from transformers import AutoModelForTokenClassification

        assert kwargs["runner"] == "pooling"
        super().__init__(AutoModelForTokenClassification.from_pretrained(kwargs["model"]).eval())
        FolderLLM.made.append(kwargs)
        config = SimpleNamespace(dtype="torch.float32", max_model_len=2048)  # as vLLM's engine
        self.llm_engine = SimpleNamespace(model_config=config)


@pytest.fixture
def fake_vllm(monkeypatch):
    FolderLLM.made = []
    fake = SimpleNamespace(LLM=FolderLLM, PoolingParams=FakeParams, __version__="0.11.1")
    monkeypatch.setattr(vllm_backend, "_import_vllm", lambda: fake)
    return FolderLLM


@pytest.fixture
def model(tmp_path):
    tiny.token_classifier().save_pretrained(tmp_path / "m", safe_serialization=True)
    tiny.tokenizer().save_pretrained(tmp_path / "m")
    return str(tmp_path / "m")


def test_score_backend_vllm_equals_hf(fake_vllm, model, tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "group": f"g{i % 2}", "problem": p,
                                       "steps": s}) + "\n"
                           for i, (p, s) in enumerate(zip(test_eval_model.PROBLEMS * 2,
                                                          [["2 + 3 = 5.", "So 5."], ["48 / 2 = 24."],
                                                           ["2 + 3 = 5.", "So 6."], ["48 + 24 = 72."]]))))
    base = ["score", "--model", model, "--format", "trl", "--dtype", "float32", "--input", str(src)]
    assert cli.main(base + ["--output", str(tmp_path / "hf.jsonl")]) == 0
    assert not fake_vllm.made
    assert cli.main(base + ["--output", str(tmp_path / "v.jsonl"), "--backend", "vllm"]) == 0
    assert len(fake_vllm.made) == 1 and fake_vllm.made[0]["dtype"] == "float32"
    hf, v = ([json.loads(x) for x in open(tmp_path / f)] for f in ("hf.jsonl", "v.jsonl"))
    assert [r["id"] for r in v] == [r["id"] for r in hf] == ["r0", "r1", "r2", "r3"]
    for a, b in zip(v, hf):
        assert a["step_scores"] == pytest.approx(b["step_scores"], abs=1e-5)
    assert "prefix sharing off: VLLMPRM" in capsys.readouterr().err
    # the backend is part of the settings: an HF partial is not resumed by vLLM
    part = tmp_path / "mixed.jsonl.partial"
    assert cli.main(base + ["--output", str(tmp_path / "mixed.jsonl"), "--chunk", "1"]) == 0
    lines = (tmp_path / "mixed.jsonl").read_text().splitlines(keepends=True)
    from partials import header_of

    head = header_of(base + ["--output", str(tmp_path / "mixed.jsonl"), "--chunk", "1"], part)
    part.write_text(head + lines[0])
    assert cli.main(base + ["--output", str(tmp_path / "mixed.jsonl"), "--backend", "vllm"]) == 2
    assert "backend" in capsys.readouterr().err


def test_processbench_backend_vllm(fake_vllm, model, tmp_path, capsys):
    data = test_eval_model.processbench_file(tmp_path / "gsm8k.json", 6)
    base = ["eval", "processbench", "--model", model, "--format", "trl", "--dtype", "float32",
            "--data", str(data)]
    assert cli.main(base + ["--output", str(tmp_path / "a.json")]) == 0
    table = capsys.readouterr().out
    assert cli.main(base + ["--output", str(tmp_path / "b.json"), "--backend", "vllm"]) == 0
    assert capsys.readouterr().out == table and len(fake_vllm.made) == 1
    res = json.loads((tmp_path / "b.json").read_text())
    assert res["scored_by"]["format"] == "trl" and res["scored_by"]["dtype"] == "float32"


def test_vllm_missing_is_a_clear_error(model, tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "problem": "p", "steps": ["s"]}\n')
    assert cli.main(["score", "--model", model, "--format", "trl", "--input", str(src),
                     "--output", str(tmp_path / "o.jsonl"), "--backend", "vllm"]) == 2
    assert "pip install 'prmkit[vllm]'" in capsys.readouterr().err
