"""`prmkit export`: a trained PRM folder (last-k delta, LoRA, full; class and label-token heads;
the shipped default PRM) becomes a plain Hugging Face folder whose model card's snippet, run
with transformers alone, gives the step scores `prmkit score` gives on the original folder."""

from __future__ import annotations

import json
import os
import re

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.models.export import export_prm
from prmkit.models.surprisal import OUTPUTS
from prmkit.records import read_records, write_records
from prmkit.train.loop import LoopConfig
from prmkit.train.prm import PRMTrainConfig, train_prm
from test_train_prm import records
import tiny


def card_code(folder: str) -> str:
    text = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, text
    return blocks[0]


def run_card(folder: str, recs) -> list[list[float]]:
    """The card's snippet, executed as written; then its step_scores on every record."""
    namespace: dict = {"__name__": "card"}
    exec(compile(card_code(folder), os.path.join(folder, "README.md"), "exec"), namespace)
    return [namespace["step_scores"](r.problem, r.steps) for r in recs]


def prmkit_scores(model: str, recs, tmp_path, name: str) -> list[list[float]]:
    src, out = tmp_path / f"{name}.in.jsonl", tmp_path / f"{name}.out.jsonl"
    write_records(str(src), recs)
    assert main(["score", "--model", model, "--input", str(src), "--output", str(out),
                 "--dtype", "float32"]) == 0
    return [r.step_scores for r in read_records(str(out))]


def assert_close(a, b, tol=1e-5):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        assert max(abs(u - v) for u, v in zip(x, y)) <= tol, (x, y)


def check_export(model: str, tmp_path, recs, arch: str, name: str) -> None:
    out = tmp_path / f"{name}-export"
    assert main(["export", "--model", model, "--output", str(out)]) == 0
    assert os.path.isfile(out / "model.safetensors") and os.path.isfile(out / "config.json")
    assert os.path.isfile(out / "prmkit_format.json")
    assert not os.path.exists(out / "prmkit_base.json")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"][0].endswith(arch)
    if arch == "ForTokenClassification":
        from transformers import AutoConfig

        labels = AutoConfig.from_pretrained(str(out)).num_labels
        assert labels == (OUTPUTS if "surprisal" in name else 2)
    want = prmkit_scores(model, recs, tmp_path, name)
    assert_close(run_card(str(out), recs), want)
    # prmkit reads the exported folder as it read the original
    assert_close(prmkit_scores(str(out), recs, tmp_path, name + "-again"), want, 1e-6)


@pytest.mark.parametrize("train,head,arch", [("last-k", "class", "ForTokenClassification"),
                                             ("lora", "class", "ForTokenClassification"),
                                             ("full", "class", "ForTokenClassification"),
                                             ("last-k", "label-tokens", "ForCausalLM"),
                                             ("last-k", "hazard", "ForTokenClassification"),
                                             ("last-k", "surprisal", "ForTokenClassification")])
def test_exported_folder_scores_like_prmkit_with_transformers_alone(tiny_base, tmp_path, train,
                                                                    head, arch):
    if train == "lora":
        pytest.importorskip("peft")
    if head == "surprisal":   # reads the LM through tied embeddings
        tiny_base = str(tmp_path / "tied")
        tiny.causal_lm(tie_word_embeddings=True).save_pretrained(tiny_base, safe_serialization=True)
        tiny.tokenizer().save_pretrained(tiny_base)
    train_data, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_records(str(train_data), records(6))
    write_records(str(dev), records(3))
    loop = LoopConfig(train=train, lr=3e-2, batch_tokens=512, last_k=1, warmup=0.0,
                      max_steps=2)
    run = tmp_path / "run"
    train_prm(PRMTrainConfig(base=tiny_base, data=str(train_data), eval_data=str(dev),
                             output=str(run), max_length=256, head=head, loop=loop))
    check_export(str(run / "last"), tmp_path, records(5), arch, f"{train}-{head}")


def test_export_refuses_an_implicit_prm_and_a_full_output(tmp_path):
    folder = tmp_path / "implicit"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "prmkit_train.json").write_text(json.dumps({"kind": "implicit-prm"}))
    with pytest.raises(PrmkitError, match="implicit PRM"):
        export_prm(str(folder), str(tmp_path / "out"))
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    (folder / "prmkit_train.json").write_text(json.dumps({"kind": "prm"}))
    with pytest.raises(PrmkitError, match="not empty"):
        export_prm(str(folder), str(full))


def test_the_default_prm_exports(tmp_path):
    """The shipped default PRM (a delta on SmolLM2-135M) merged onto its base; about 15 s."""
    from prmkit.models.pypi import default_prm_path

    check_export(default_prm_path(), tmp_path, records(3), "ForTokenClassification", "default")


@pytest.mark.parametrize("fmt,arch", [("math-shepherd", "ForCausalLM"),
                                      ("qwen-prm", "ForTokenClassification"),
                                      ("trl", "ForTokenClassification")])
def test_public_formats_export_with_a_working_snippet(tmp_path, fmt, arch):
    """Whole-text formats read at tag ids (Math-Shepherd; Qwen's chat layout) and TRL's
    pieces with BOS: the card's snippet follows each format's own rule."""

    model = tmp_path / "model"
    net = tiny.causal_lm() if arch == "ForCausalLM" else tiny.token_classifier()
    net.save_pretrained(model, safe_serialization=True)
    tok = tiny.tokenizer()
    tok.save_pretrained(model)
    from prmkit.stepformat import get_format

    get_format(fmt).save(str(model))
    check_export(str(model), tmp_path, records(4), arch, fmt)


def test_a_calculator_prm_reads_the_notes_and_exports_without_a_snippet(tiny_base, tmp_path):
    """A PRM trained with --calculator stores the field; prmkit scores a step with a wrong
    equation exactly as the same weights score the step written out with its note under the
    plain format; the exported card says so and offers no transformers-only snippet (the notes
    are prmkit's code), and prmkit reads the exported folder as the original."""
    from prmkit.calculator import annotate
    from prmkit.models.backends.hf import load_hf_prm
    from prmkit.models.reading import HFConfig
    from prmkit.records import Record
    from prmkit.stepformat import StepFormat

    train_data = tmp_path / "train.jsonl"
    write_records(str(train_data), records(6))
    run = tmp_path / "run"
    train_prm(PRMTrainConfig(base=tiny_base, data=str(train_data), output=str(run),
                             max_length=256, calculator=True,
                             loop=LoopConfig(lr=3e-2, batch_tokens=512, last_k=1, warmup=0.0,
                                             max_steps=2)))
    fmt = StepFormat.from_dict(json.loads((run / "last" / "prmkit_format.json").read_text()))
    assert fmt.calculator
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({**fmt.to_dict(), "calculator": False}))
    steps = ["She has 11 - 3 = 9 shells.", "Then 9 + 1 = 10.", "The answer is 10."]
    noted = [annotate(s) for s in steps]
    assert noted[0] != steps[0]
    cfg = HFConfig(dtype="float32")
    got = load_hf_prm(str(run / "last"), config=cfg).score(["Q?"], [steps])[0]
    want = load_hf_prm(str(run / "last"), str(plain), cfg).score(["Q?"], [noted])[0]
    unnoted = load_hf_prm(str(run / "last"), str(plain), cfg).score(["Q?"], [steps])[0]
    assert_close([got], [want], 1e-6)
    assert got != unnoted
    out = tmp_path / "export"
    assert main(["export", "--model", str(run / "last"), "--output", str(out)]) == 0
    text = (out / "README.md").read_text()
    assert "calculator" in text and "```python" not in text
    recs = [Record(id="a", problem="Q?", steps=steps)]
    assert_close(prmkit_scores(str(out), recs, tmp_path, "exported"),
                 prmkit_scores(str(run / "last"), recs, tmp_path, "original"), 1e-6)
