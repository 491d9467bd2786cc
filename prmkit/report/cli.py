"""``prmkit report``: one self-contained HTML page about scored records
(:func:`prmkit.report.build`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.report import build


def add_report(sub: Any) -> None:
    """Add ``prmkit report`` to the top-level subparsers."""
    from prmkit import report
    from prmkit.cliutil import Formatter

    report_doc = report.__doc__

    p = sub.add_parser("report", help="a self-contained HTML page about scored records",
                       formatter_class=Formatter,
                       description="Write one HTML page (inline CSS, plots embedded as PNG, no "
                       "network needed) showing every solution's steps coloured by score, the "
                       "predicted and the gold first error, summary tables and plots.\n\n"
                       + (report_doc or "").split("\n\n", 1)[1])
    p.add_argument("--input", required=True,
                   help="records (prmkit JSONL), e.g. the output of `prmkit score`")
    p.add_argument("--output", required=True, help="the HTML file to write")
    p.add_argument("--threshold", type=float, default=0.5,
                   help="a step scored below this is the predicted first error")
    p.add_argument("--max-records", type=int, default=300,
                   help="show at most this many solutions (the tables use all records)")
    p.add_argument("--title", default=None, help="page title (default: the input's name)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from prmkit.formats.detect import read_records
    from prmkit.records import atomic_output

    if args.max_records < 0:
        raise PrmkitError(f"--max-records must not be negative, got {args.max_records}")
    records = read_records(args.input)
    page = build(records, title=args.title or f"prmkit report: {os.path.basename(args.input)}",
                 source=args.input, threshold=args.threshold, max_records=args.max_records)
    with atomic_output(args.output) as f:
        f.write(page)
    print(f"report: {len(records)} records -> {args.output} ({len(page) / 1e6:.1f} MB)",
          file=sys.stderr)
    return 0
