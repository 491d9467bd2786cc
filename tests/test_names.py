"""Public PRMs by name: the step format comes from the hub id, --format overrides it, and without
a hub the command stops with a clear error about the download (no traceback)."""

import json

import pytest

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.models.folder import folder_format
from prmkit.models.names import PUBLIC_PRMS, format_for
from prmkit.stepformat import PRESETS


def test_every_public_prm_names_a_preset():
    assert PUBLIC_PRMS and all(fmt in PRESETS for fmt, _ in PUBLIC_PRMS.values())
    assert format_for("peiyi9979/math-shepherd-mistral-7b-prm") == "math-shepherd"
    assert format_for("qwen/qwen2.5-math-prm-7b") == "qwen-prm"        # any letter case
    assert format_for("RLHFlow/Llama3.1-8B-PRM-Deepseek-Data") == "rlhflow"
    assert format_for("someone/some-model") is None


def test_the_format_comes_from_the_name_and_a_given_one_wins(tmp_path):
    name = "peiyi9979/math-shepherd-mistral-7b-prm"
    assert folder_format(name, str(tmp_path), None).name == "math-shepherd"
    assert folder_format(name, str(tmp_path), "trl").name == "trl"
    with pytest.raises(PrmkitError, match="say which step format"):
        folder_format("someone/some-model", str(tmp_path), None)


@pytest.mark.parametrize("name", sorted(PUBLIC_PRMS))
def test_scoring_a_public_prm_by_name_stops_at_the_download_not_the_format(name, tmp_path,
                                                                            monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "a", "problem": "1 + 1?", "steps": ["1 + 1 = 2."]}) + "\n")
    rc = main(["score", "--model", name, "--input", str(src), "--output", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot be downloaded" in err and name in err
    assert "prmkit_format.json" not in err and "Traceback" not in err
    # the whole path: a download tool that the pinned huggingface_hub installs, then the command
    # that scores the folder with the model's own format (and its own code where it needs it)
    assert f"`hf download {name} --local-dir DIR`" in err and "huggingface-cli" not in err
    remote = " --trust-remote-code" if name.startswith("Qwen/") else ""
    assert f"`prmkit score --model DIR --format {format_for(name)}{remote}`" in err
