"""A step format is checked against the model it is given to, at load time (issue: a
label-token format on a class-head model ended in an IndexError, a class format on a language
model read a head the folder does not hold). Every pair of format kind and model kind: the
pairs that fit score, the others are refused in one line with exit 2, and a ``--format`` that
is not the folder's own is said on stderr."""

from __future__ import annotations

import json

import pytest

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.models.load import load_prm
from prmkit.models.reading import HFConfig
from prmkit.records import read_records
from prmkit.stepformat import PRESETS, StepFormat
from tests import tiny

F32 = HFConfig(dtype="float32")
VALUE = StepFormat(name="value-fmt", prefix="{problem} ", step="{step} ки", between="\n",
                   reading="value")
LOG_RATIO = StepFormat(name="ratio-fmt", prefix="{problem}\n", step="{step}", between="\n",
                       reading="log-ratio")
# format kind -> formats of that kind (presets by name, others saved as prmkit_format.json)
FORMATS = {"label-tokens": ["math-shepherd", "rlhflow"], "classes": ["qwen-prm", "trl", "prmkit"],
           "value": [VALUE], "log-ratio": [LOG_RATIO]}
# model kind -> the format kinds that fit it (an implicit PRM reads only the text layout)
FITS = {"causal-lm": {"label-tokens"}, "class-head": {"classes"}, "value-head": {"value"},
        "delta-class-head": {"classes"}, "implicit-prm": set(FORMATS)}


def save(model, path, fmt: StepFormat | None = None) -> str:
    model.save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    if fmt is not None:
        fmt.save(str(path))
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Folders of every model kind, each saved with a format of its own kind."""
    from prmkit.models.folder import save_delta

    root = tmp_path_factory.mktemp("kinds")
    base = save(tiny.token_classifier(2), root / "base")
    delta = root / "delta"
    delta.mkdir()
    save_delta(str(delta), tiny.token_classifier(2, seed=1), ["score.weight"], "../base",
               "token-classification")
    tiny.tokenizer().save_pretrained(delta)
    PRESETS["prmkit"].save(str(delta))
    reference = save(tiny.causal_lm(seed=2), root / "reference")
    implicit = save(tiny.causal_lm(seed=3), root / "implicit", LOG_RATIO)
    (root / "implicit" / "prmkit_train.json").write_text(json.dumps(
        {"kind": "implicit-prm", "config": {"base": reference, "beta": 0.1}}))
    return {"causal-lm": save(tiny.causal_lm(), root / "lm", PRESETS["math-shepherd"]),
            "class-head": save(tiny.token_classifier(2), root / "cls", PRESETS["prmkit"]),
            "value-head": save(tiny.token_classifier(1), root / "value", VALUE),
            "delta-class-head": str(delta), "implicit-prm": implicit, "base": base}


def format_arg(fmt, tmp_path) -> str:
    if isinstance(fmt, str):
        return fmt
    folder = tmp_path / fmt.name
    folder.mkdir(exist_ok=True)
    return fmt.save(str(folder))


PAIRS = [(kind, fmt, model) for kind, fmts in FORMATS.items() for fmt in fmts for model in FITS]


@pytest.mark.parametrize("kind,fmt,model", PAIRS,
                         ids=[f"{getattr(f, 'name', f)}-on-{m}" for _, f, m in PAIRS])
def test_every_format_kind_on_every_model_kind(models, tmp_path, capsys, kind, fmt, model):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "What is 2 + 3?",
                                "steps": ["2 + 3 = 5.", "The answer is 5."]}) + "\n")
    out = tmp_path / "out.jsonl"
    capsys.readouterr()
    code = main(["score", "--model", models[model], "--format", format_arg(fmt, tmp_path),
                 "--input", str(data), "--output", str(out), "--dtype", "float32"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if kind in FITS[model]:
        assert code == 0, err
        scores = read_records(str(out))[0].step_scores
        assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)
    else:
        assert code == 2 and not out.exists()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("prmkit: model "), err
        assert models[model] in lines[0] and "format" in lines[0]


def test_a_format_other_than_the_folder_s_own_is_said(models, tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "1 + 1?", "steps": ["2."]}) + "\n")
    args = ["score", "--model", models["class-head"], "--input", str(data), "--dtype", "float32"]
    assert main(args + ["--format", "prmkit", "--output", str(tmp_path / "a.jsonl")]) == 0
    assert "note:" not in capsys.readouterr().err   # its own format, by name: nothing to say
    assert main(args + ["--format", "trl", "--output", str(tmp_path / "b.jsonl")]) == 0
    err = capsys.readouterr().err
    assert "note: --format trl is not the step format" in err and "(prmkit)" in err


def test_the_default_prm_refuses_label_token_and_foreign_tag_formats(capsys, tmp_path):
    """The shipped default PRM (a 2-class head on SmolLM2's tokenizer): math-shepherd and
    rlhflow read label tokens; qwen-prm reads '<extra_0>', five tokens in that tokenizer."""
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": "a", "problem": "What is 9 - 4?",
                                "steps": ["9 - 4 = 5.", "The answer is 5."]}) + "\n")
    for fmt, says in (("math-shepherd", "label tokens"), ("rlhflow", "label tokens"),
                      ("qwen-prm", "splits it into 5")):
        code = main(["score", "--model", "default", "--format", fmt, "--input", str(data),
                     "--output", str(tmp_path / f"{fmt}.jsonl")])
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and says in lines[0], lines
        assert "leave --format out to use its own (prmkit)" in lines[0]


def test_a_custom_head_prmkit_does_not_know_is_not_refused(tmp_path):
    """An architecture whose config does not say its head (a custom one) is left to load."""
    from prmkit.models.folder import check_head, head_of

    path = save(tiny.token_classifier(2), tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["architectures"] = ["SomethingNew"]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    assert head_of(path) is None
    check_head(path, path, PRESETS["math-shepherd"])  # no error: nothing to check against
    config["architectures"] = ["Qwen2ForProcessRewardModel"]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    assert head_of(path) == ("classes", 2)
    with pytest.raises(PrmkitError, match="classification head of 2 classes"):
        check_head(path, path, PRESETS["math-shepherd"])


def test_direct_load_refuses_before_loading_weights(models, monkeypatch):
    """The check runs on the folder's config, before any weights are read."""
    from prmkit.models import folder

    monkeypatch.setattr(folder, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(PrmkitError, match="reads label tokens"):
        load_prm(models["class-head"], "math-shepherd", F32)
    with pytest.raises(PrmkitError, match="reads a classification head"):
        load_prm(models["causal-lm"], "trl", F32)
