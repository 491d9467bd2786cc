"""``prmkit report``: escaping, a self-contained page, the marks, and the page as headless
Chromium renders it (summary tables, every plot loaded, step colours, a screenshot that shows
them). Chromium is skipped where it is not installed, except in CI (``PRMKIT_CI=1``, set by
``.ci/run``, which installs Debian's chromium), where its absence fails the test."""

from __future__ import annotations

import colorsys
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from html.parser import HTMLParser

import pytest

from prmkit import cli
from prmkit.report import build
from prmkit.report.html import colour
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
IN_CI = os.environ.get("PRMKIT_CI") == "1"


def chromium(*args, timeout=90):
    # --no-sandbox: Chromium's sandbox refuses to start as root (CI runs as root) and needs user
    # namespaces that containers often lack; the pages opened are the test's own local files.
    with tempfile.TemporaryDirectory() as profile:
        run = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-quic", "--no-first-run", "--hide-scrollbars",
             "--force-device-scale-factor=1", f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"chromium exited {run.returncode}: {run.stderr[-2000:]}"
    return run


# Loaded beside the report (same origin, over loopback HTTP), it waits for the report's own load
# event in a 1200 px wide frame (every image decoded or failed by then), reads what the browser
# rendered, and writes it as JSON into <pre id="probe">, which --dump-dom prints.
PROBE = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="report.html" style="border:0;width:1200px;height:20000px"></iframe>
<script>
document.getElementById("f").addEventListener("load", function () {
  var d = this.contentDocument, out = {};
  function box(e) { var r = e.getBoundingClientRect();
    return {x: r.left, y: r.top, w: r.width, h: r.height}; }
  out.height = Math.ceil(d.body.getBoundingClientRect().bottom);
  out.tables = Array.from(d.querySelectorAll("table")).map(function (t) {
    return {box: box(t), rows: Array.from(t.rows).map(function (r) {
      return Array.from(r.cells).map(function (c) { return c.innerText.trim(); }); })}; });
  out.images = Array.from(d.images).map(function (i) {
    return {alt: i.alt, complete: i.complete, natural: [i.naturalWidth, i.naturalHeight],
            box: box(i)}; });
  out.steps = Array.from(d.querySelectorAll("li.step")).map(function (s) {
    var cs = getComputedStyle(s);
    return {cls: s.className, score: s.querySelector(".score").innerText, box: box(s),
            background: cs.backgroundColor, border: cs.borderTopColor}; });
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script></body></html>
"""


class TableCells(HTMLParser):
    """The cell texts of each <table> in the page's source."""

    def __init__(self):
        super().__init__()
        self.tables, self.cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = ""

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append(self.cell.strip())
            self.cell = None


def rgb(css):
    """'rgb(r, g, b)' (what getComputedStyle gives) or 'hsl(h,s%,l%)' (what the page writes)."""
    nums = [float(v) for v in re.findall(r"[\d.]+", css)]
    if css.startswith("hsl"):
        r, g, b = colorsys.hls_to_rgb(nums[0] / 360, nums[2] / 100, nums[1] / 100)
        return tuple(round(255 * c) for c in (r, g, b))
    return tuple(round(c) for c in nums[:3])


def near(a, b, tol=3):
    return all(abs(x - y) <= tol for x, y in zip(a, b))


@pytest.fixture
def served(tmp_path):
    """tmp_path served on 127.0.0.1; yields its base URL."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def rendered(base):
    """What the probe page read off the rendered report."""
    dom = chromium("--dump-dom", "--virtual-time-budget=10000", f"{base}/probe.html").stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, f"the probe wrote no result; the DOM was: {dom[:2000]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<")
                      .replace("&gt;", ">").replace("&amp;", "&"))


@pytest.mark.skipif(CHROMIUM is None and not IN_CI, reason="chromium is not installed")
def test_opens_in_headless_chromium(tmp_path, served):
    assert CHROMIUM, "PRMKIT_CI=1 but no chromium on PATH (.ci/run installs Debian's chromium)"
    from PIL import Image

    recs = sample()
    source = build(recs, title="chromium check")
    (tmp_path / "report.html").write_text(source, encoding="utf-8")
    (tmp_path / "probe.html").write_text(PROBE, encoding="utf-8")
    got = rendered(served)

    # the summary tables, as rendered: every cell of the source, each table on screen
    cells = TableCells()
    cells.feed(source)
    assert len(cells.tables) == 3  # first-error, step-level, best-of-N
    assert [t["rows"] for t in got["tables"]] == cells.tables
    assert got["tables"][0]["rows"][0][:3] == ["split", "n", "with error"]
    assert got["tables"][0]["rows"][-1][0] == "average F1"
    assert all(t["box"]["w"] > 100 and t["box"]["h"] > 20 for t in got["tables"])
    # every plot image decoded, with its real size, and laid out
    assert len(got["images"]) == source.count("data:image/png;base64,") == 3
    for im in got["images"]:
        assert im["complete"] and im["natural"][0] > 0 and im["natural"][1] > 0, im
        assert im["box"]["w"] > 100 and im["box"]["h"] > 100, im
    # step colours: each step's computed background is colour(score) of its score
    assert len(got["steps"]) == sum(len(r.steps) for r in recs)
    for step, want in zip(got["steps"], [s for r in recs for s in r.step_scores]):
        assert float(step["score"]) == pytest.approx(want, abs=5e-4)
        assert near(rgb(step["background"]), rgb(colour(want)), tol=1), step
        if "gold" in step["cls"].split():
            assert rgb(step["border"]) == (192, 57, 43), step
    assert {rgb(s["background"]) for s in got["steps"]} >= {rgb(colour(0.3)), rgb(colour(0.9))}

    # the screenshot of the whole page shows what the DOM says
    height = min(int(got["height"]), 8000)
    shot = tmp_path / "shot.png"
    chromium(f"--screenshot={shot}", f"--window-size=1200,{height}", f"{served}/report.html")
    img = Image.open(shot).convert("RGB")
    assert img.size == (1200, height)
    grey = img.convert("L")
    assert sum(grey.histogram()[:128]) > 0.003 * 1200 * height, "no text: the shot is blank"
    assert len(img.getcolors(1 << 24)) > 50, "the screenshot has (almost) one colour"
    for step in got["steps"]:  # a point in the step's padding, above its text
        b = step["box"]
        pixel = img.getpixel((int(b["x"] + b["w"] / 2), int(b["y"] + 4)))
        assert near(pixel, rgb(step["background"])), (step, pixel)
    for im in got["images"]:  # each plot is painted: dark lines and text on white
        b = im["box"]
        region = grey.crop((int(b["x"]), int(b["y"]), int(b["x"] + b["w"]), int(b["y"] + b["h"])))
        assert sum(region.histogram()[:100]) > 0.005 * b["w"] * b["h"], im["alt"]
