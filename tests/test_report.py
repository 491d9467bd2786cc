"""``prmkit report``: escaping, a self-contained page, the marks, and (when chromium is
installed) a headless screenshot that shows the solutions."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from prmkit import cli
from prmkit.report import build
from prmkit.records import Record

NASTY = "<script>alert('x')</script> $a<b$ & \\frac{1}{2} \"q\""


def sample():
    recs = []
    for i in range(6):
        recs.append(Record(
            id=f"gsm8k-{i}", group=f"g{i // 3}", problem=f"Problem {i}: {NASTY}",
            steps=[f"Step one of solution {i}", f"Step two {NASTY}", "The answer is 4."],
            first_error=[-1, 1, 0][i % 3], step_scores=[0.9, 0.3 if i % 3 else 0.8, 0.7],
            is_correct=i % 3 == 0))
    return recs


def test_escapes_everything_and_needs_no_network():
    page = build(sample(), title=f"t {NASTY}")
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; $a&lt;b$ &amp; \\frac{1}{2} &quot;q&quot;" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page
    assert page.count("data:image/png;base64,") >= 2  # histogram and best-of-N curve


def solution_block(page, rec_id):
    [block] = [b for b in page.split('<details class="sol"') if f"<summary>{rec_id}<" in b]
    return block.split("</details>")[0]


def test_marks_gold_and_predicted_first_error():
    page = build(sample(), threshold=0.5)
    # gsm8k-1: gold first error at step 2, predicted (0.3 < 0.5) at step 2 as well
    b1 = solution_block(page, "gsm8k-1")
    assert "gold first error: step 2" in b1 and "predicted first error: step 2" in b1
    assert 'class="step gold pred"' in b1
    # gsm8k-2: gold error at step 1, predicted at step 2 (scores 0.9, 0.3, 0.7)
    b2 = solution_block(page, "gsm8k-2")
    assert "gold first error: step 1" in b2 and "predicted first error: step 2" in b2
    assert 'class="step gold"' in b2 and 'class="step pred"' in b2
    # gsm8k-0: no error, none predicted (0.9, 0.8, 0.7)
    b0 = solution_block(page, "gsm8k-0")
    assert "gold: no error" in b0 and "predicted: no error" in b0
    assert "First-error identification" in page and "Best-of-N" in page


def test_command_and_errors(tmp_path, capsys):
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in sample()))
    out = tmp_path / "r.html"
    assert cli.main(["report", "--input", str(inp), "--output", str(out), "--max-records", "2"]) == 0
    page = out.read_text()
    assert "Showing 2 of 6 solutions" in page
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "problem": "p", "steps": ["x"], "step_scores": [0.1, 0.2]}\n')
    capsys.readouterr()
    assert cli.main(["report", "--input", str(bad), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{bad}:1: field 'step_scores'" in err


CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)


def chromium(*args, timeout=90):
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_opens_in_headless_chromium(tmp_path):
    Image = pytest.importorskip("PIL.Image")

    recs = sample()
    page = tmp_path / "report.html"
    page.write_text(build(recs, title="chromium check"), encoding="utf-8")
    url = "file://" + os.path.abspath(page)
    dom = chromium("--dump-dom", url).stdout
    for r in recs:  # every solution's text is in the rendered DOM
        assert f"Step one of solution {r.id.split('-')[1]}" in dom
    assert "gold first error" in dom and "predicted first error" in dom
    shot = tmp_path / "shot.png"
    chromium(f"--screenshot={shot}", "--window-size=1200,1600", url)
    img = Image.open(shot).convert("L")
    assert img.size == (1200, 1600)
    dark = sum(img.histogram()[:200])  # pixels darker than near-white
    assert dark > 0.01 * 1200 * 1600, "the screenshot is (almost) blank"
    # the bottom half, where the solutions are, is not blank either
    lower = img.crop((0, 800, 1200, 1600))
    assert sum(lower.histogram()[:200]) > 0.005 * 1200 * 800
