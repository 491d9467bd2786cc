"""One self-contained HTML page for scored records: solutions coloured step by step, summary
tables, and the plots embedded as base64 PNG. It opens without a network: the CSS is inline,
there is no script and no external resource.

Every piece of text from the records is escaped (``html.escape``): records hold LaTeX, ``<``,
``>`` and ``&``, and a record must never be able to inject markup into the page.

Step colours: a score s in [0, 1] is shown on a red (0) to green (1) scale; null scores are
grey; scores outside [0, 1] are clipped for the colour (the number shown is the real one).
"""

from __future__ import annotations

import base64
import html
from typing import Any, Sequence

from prmkit.records import Record

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;
  background:#f6f7f9;color:#1d2330}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 10px;border-bottom:1px solid #d8dce3;
  padding-bottom:4px}
.sub{color:#5b6475;font-size:13px}
table{border-collapse:collapse;margin:8px 0 14px;background:#fff;font-size:14px}
th,td{border:1px solid #d8dce3;padding:4px 10px;text-align:right}th{background:#eef0f4}
td:first-child,th:first-child{text-align:left}
.plots{display:flex;flex-wrap:wrap;gap:14px}.plots img{background:#fff;border:1px solid #d8dce3;
  max-width:100%}
.legend span{display:inline-block;padding:2px 8px;margin-right:4px;border-radius:3px;font-size:12px}
.sol{background:#fff;border:1px solid #d8dce3;border-radius:6px;margin:14px 0;padding:10px 14px}
.sol summary{cursor:pointer;font-weight:600}
.tag{display:inline-block;font-size:12px;font-weight:500;border-radius:10px;padding:1px 8px;
  margin-left:6px;background:#eef0f4}
.tag.ok{background:#d4f2dc}.tag.bad{background:#f8d7da}.tag.pred{background:#d6e4ff}
.problem{white-space:pre-wrap;background:#f3f4f7;padding:8px;border-radius:4px;margin:8px 0;
  font-size:14px}
ol.steps{list-style:none;padding:0;margin:0}
.step{display:flex;gap:10px;align-items:flex-start;padding:6px 8px;margin:3px 0;
  border-radius:4px;border:2px solid transparent}
.step .n{min-width:26px;color:#5b6475;font-size:12px;padding-top:2px}
.step .text{white-space:pre-wrap;flex:1;font-size:14px}
.step .score{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;min-width:52px;
  text-align:right}
.step.gold{border-color:#c0392b}.step.pred{box-shadow:inset 6px 0 0 #2d5be3}
.mark{font-size:11px;font-weight:700;border-radius:3px;padding:0 5px;margin-left:4px;color:#fff}
.mark.gold{background:#c0392b}.mark.pred{background:#2d5be3}
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def colour(score: float | None) -> str:
    """The background of a step: red (0) to green (1), grey for null."""
    if score is None:
        return "#e4e6eb"
    s = min(max(float(score), 0.0), 1.0)
    return f"hsl({120 * s:.0f},70%,84%)"


def png_img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def solution(rec: Record, predicted: int | None, open_: bool = False) -> str:
    """One record: problem, steps coloured by score, the predicted and gold first errors."""
    gold = rec.first_error
    labels = rec.labels_or_first_error()
    tags = []
    if rec.is_correct is not None:
        tags.append('<span class="tag ok">answer correct</span>' if rec.is_correct
                    else '<span class="tag bad">answer wrong</span>')
    if gold is not None:
        tags.append(f'<span class="tag bad">gold first error: step {gold + 1}</span>'
                    if gold >= 0 else '<span class="tag ok">gold: no error</span>')
    if predicted is not None:
        tags.append(f'<span class="tag pred">predicted first error: step {predicted + 1}</span>'
                    if predicted >= 0 else '<span class="tag pred">predicted: no error</span>')
    if rec.group is not None:
        tags.append(f'<span class="tag">group {esc(rec.group)}</span>')
    steps = []
    for i, text in enumerate(rec.steps):
        score = rec.step_scores[i] if rec.step_scores is not None else None
        classes, marks = ["step"], []
        if gold is not None and i == gold:
            classes.append("gold")
            marks.append('<span class="mark gold">gold first error</span>')
        if predicted is not None and i == predicted:
            classes.append("pred")
            marks.append('<span class="mark pred">predicted first error</span>')
        label = ""
        if labels is not None and labels[i] is not None:
            label = " &#10003;" if labels[i] >= 0.5 else " &#10007;"
        shown = "-" if score is None else f"{score:.3f}"
        steps.append(
            f'<li class="{" ".join(classes)}" style="background:{colour(score)}">'
            f'<span class="n">{i + 1}{label}</span><span class="text">{esc(text)}{"".join(marks)}'
            f'</span><span class="score" title="step score">{shown}</span></li>')
    return (f'<details class="sol"{" open" if open_ else ""}><summary>{esc(rec.id)}'
            f'{"".join(tags)}</summary><div class="problem">{esc(rec.problem)}</div>'
            f'<ol class="steps">{"".join(steps)}</ol></details>')


def page(title: str, subtitle: str, sections: Sequence[tuple[str, str]]) -> str:
    """The whole document. ``sections`` are (heading, already-built HTML) pairs."""
    body = "".join(f"<section><h2>{esc(h)}</h2>{content}</section>" for h, content in sections)
    legend = ('<div class="legend">step score: '
              + "".join(f'<span style="background:{colour(v)}">{v:.2f}</span>'
                        for v in (0.0, 0.25, 0.5, 0.75, 1.0))
              + f'<span style="background:{colour(None)}">not scored</span>'
              + '<span class="mark gold">gold first error</span> '
              + '<span class="mark pred">predicted first error</span></div>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>{esc(title)}</h1><div class=\"sub\">{esc(subtitle)}</div>{legend}{body}"
            "</main></body></html>\n")
