"""TRL stepwise supervision: the dataset layout of TRL's ``PRMTrainer``.

Source: Hugging Face TRL, "Dataset formats: stepwise supervision"
(https://huggingface.co/docs/trl/dataset_formats), e.g. ``trl-lib/math_shepherd``.

JSONL, one solution per line::

    {"prompt": "Which number is larger, 9.8 or 9.11?",
     "completions": ["The fractional part of 9.8 is 0.8.", "0.8 > 0.11, so 9.8 is larger."],
     "labels": [true, true]}

Reading: ``prompt`` -> problem, ``completions`` -> steps, ``labels`` -> labels (true 1.0,
false 0.0; numbers in [0, 1] and null are kept as they are). ``id`` is kept when present,
else the id is ``trl-N`` (N = line number - 1). Any other field goes to ``meta``.

Writing: ``id``, ``prompt``, ``completions``, ``labels`` with ``label >= soft_threshold`` ->
true. TRL cannot hold an unlabelled step, so a null label is an error that names the record
(never dropped). A record without labels but with ``first_error`` uses the ProcessBench rule,
which leaves the steps after the first error unlabelled: such a record converts only when
nothing follows its first error (first_error -1 or the last step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

from prmkit.errors import RecordError
from prmkit.formats.common import build, extras, get, hard_label
from prmkit.records import Record, iter_jsonl, write_jsonl

if TYPE_CHECKING:
    from prmkit.formats.options import ConvertOptions

HELP = ("TRL stepwise supervision, JSONL: prompt, completions (the steps), labels (one true/false "
        "per step); id kept if present, else trl-N (N = line - 1); other fields go to meta. "
        "Read: true 1, false 0. Write: label >= --soft-threshold is true; a record with an "
        "unlabelled step is an error (TRL cannot hold it).")

_RENAME = {"problem": "prompt", "steps": "completions"}


def read(path: str, options: ConvertOptions) -> Iterator[Record]:
    for lineno, obj in iter_jsonl(path):
        try:
            prompt = get(obj, "prompt", str)
            completions = get(obj, "completions", list)
            labels = get(obj, "labels", list, required=False)
            rec_id = get(obj, "id", (str, int), required=False)
        except RecordError as e:
            raise e.at(path, lineno) from None
        if labels is not None:
            labels = [float(v) if isinstance(v, (bool, int)) else v for v in labels]
        yield build(path, lineno, _RENAME,
                    id=str(rec_id) if rec_id is not None else f"trl-{lineno - 1}",
                    problem=prompt, steps=completions, labels=labels,
                    meta=extras(obj, {"id", "prompt", "completions", "labels"}))


def write(path: str, records: Iterable[Record], options: ConvertOptions) -> int:
    def rows() -> Iterator[dict]:
        for rec in records:
            labels = rec.labels_or_first_error()
            if labels is None:
                raise RecordError("the record has no labels and no first_error; TRL needs a "
                                  "label per step", f"{path}: record {rec.id!r}", None, "labels")
            yield {"id": rec.id, "prompt": rec.problem, "completions": rec.steps,
                   "labels": [hard_label(v, options.soft_threshold, path, rec.id, "TRL", i)
                              for i, v in enumerate(labels)]}
    return write_jsonl(path, rows())
