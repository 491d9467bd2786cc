"""TRL's stepwise-supervision rows as training examples, built as TRL's ``PRMTrainer`` builds them.

A row is ``{"prompt": str, "completions": [str, ...], "labels": [bool, ...]}`` (TRL's
"stepwise supervision" dataset type), or already tokenised: ``{"input_ids": [...], "labels":
[...]}`` with -100 wherever no step is read. The ids are those of TRL 1.13's
``PRMTrainer.tokenize_row``: prmkit's ``trl`` step format with the separator as its tag
(``bos_token_id`` first whenever the tokenizer has one; each completion and the separator
tokenised apart; the label on the separator's last token), then TRL's cuts: the completion to
``max_completion_length`` tokens, the whole to ``max_length``; a step whose separator is cut is
not trained. ``max_prompt_length`` (not in TRL 1.13; older TRL had it) keeps the prompt's last
tokens, the BOS counted. ``train_on_last_step_only`` keeps the last label alone (training only).

Every row is checked before anything trains: a missing column, a wrong type or labels of the
wrong length is one :class:`prmkit.errors.PrmkitError` naming the dataset, the row and the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from prmkit.errors import PrmkitError
from prmkit.stepformat import BoundFormat, StepFormat, get_format
from prmkit.train.loop import Example

COLUMNS = ("prompt", "completions", "labels")


@dataclass(frozen=True)
class Cuts:
    """TRL's truncation settings (``PRMConfig``'s fields of the same names)."""

    max_length: int | None = 1024
    max_completion_length: int | None = None
    max_prompt_length: int | None = None
    train_on_last_step_only: bool = False


def trl_format(step_separator: str = "\n") -> StepFormat:
    """prmkit's ``trl`` preset with ``step_separator`` after each step."""
    if not step_separator:
        raise PrmkitError("PRMConfig(step_separator=''): the separator is where each step is "
                          "read, so it cannot be empty")
    return dataclasses.replace(get_format("trl"), tag=step_separator)


def column_names(dataset: Any) -> list[str]:
    """The columns of a ``datasets.Dataset``, or the keys of a list of dicts' first row."""
    names = getattr(dataset, "column_names", None)
    if isinstance(names, dict):   # a DatasetDict
        raise PrmkitError("a DatasetDict was passed; pass one split, e.g. dataset['train']")
    if names is not None:
        return list(names)
    rows = list(dataset[:1]) if isinstance(dataset, Sequence) else []
    return list(rows[0]) if rows and isinstance(rows[0], dict) else []


def check_columns(dataset: Any, what: str) -> bool:
    """Whether ``dataset`` is pre-tokenised (``input_ids`` and ``labels``); else it must have
    TRL's stepwise columns, and a missing one is named."""
    names = column_names(dataset)
    if "input_ids" in names:
        if "labels" not in names:
            raise PrmkitError(f"{what}: has 'input_ids' but no 'labels' column")
        return True
    for col in COLUMNS:
        if col not in names:
            raise PrmkitError(f"{what}: no '{col}' column (TRL's stepwise supervision needs "
                              f"{', '.join(COLUMNS)}; it has {', '.join(names) or 'none'})")
    return False


def _row_error(what: str, i: int, field: str, msg: str) -> PrmkitError:
    return PrmkitError(f"{what}: row {i}: field '{field}': {msg}")


def check_row(row: dict[str, Any], i: int, what: str) -> tuple[str, list[str], list[int]]:
    """(prompt, completions, labels as 0/1) of one stepwise row, or an error naming it."""
    prompt, completions, labels = row.get("prompt"), row.get("completions"), row.get("labels")
    if not isinstance(prompt, str):
        raise _row_error(what, i, "prompt", f"expected a string, got {type(prompt).__name__}")
    if not isinstance(completions, list) or not all(isinstance(c, str) for c in completions):
        raise _row_error(what, i, "completions", "expected a list of strings")
    if not isinstance(labels, list):
        raise _row_error(what, i, "labels", f"expected a list, got {type(labels).__name__}")
    if len(labels) != len(completions):
        raise _row_error(what, i, "labels", f"{len(labels)} labels for {len(completions)} "
                                            f"completions (one label per step)")
    if not completions:
        raise _row_error(what, i, "completions", "no steps")
    out = []
    for k, y in enumerate(labels):
        if isinstance(y, bool) or y in (0, 1):
            out.append(int(y))
        else:
            raise _row_error(what, i, "labels", f"label {k} is {y!r}; expected true/false (or 0/1)")
    return prompt, completions, out


def encode_row(bound: BoundFormat, prompt: str, completions: Sequence[str], labels: Sequence[int],
               cuts: Cuts, is_eval: bool) -> tuple[list[int], list[int], list[int]]:
    """(input_ids, read positions, labels at them) of one row, as TRL's ``tokenize_row``."""
    if cuts.train_on_last_step_only and not is_eval:
        labels = [-100] * (len(labels) - 1) + [labels[-1]]
    head = len(bound.encode(prompt, []).input_ids)   # BOS and the prompt
    enc = bound.encode(prompt, completions)
    ids, reads = list(enc.input_ids), list(enc.read_positions)
    if cuts.max_prompt_length is not None and head > cuts.max_prompt_length:
        drop = head - cuts.max_prompt_length
        ids, reads, head = ids[drop:], [p - drop for p in reads], cuts.max_prompt_length
    limits = [len(ids)]
    if cuts.max_completion_length is not None:
        limits.append(head + cuts.max_completion_length)
    if cuts.max_length is not None:
        limits.append(cuts.max_length)
    end = min(limits)
    kept = [(p, y) for p, y in zip(reads, labels) if p < end and y != -100]
    return ids[:end], [p for p, _ in kept], [y for _, y in kept]


def tokenized_row(row: dict[str, Any], i: int, what: str) -> tuple[list[int], list[int], list[int]]:
    """(input_ids, read positions, labels) of a pre-tokenised row (labels -100 where unread)."""
    ids, labels = row.get("input_ids"), row.get("labels")
    if not isinstance(ids, list) or not isinstance(labels, list):
        raise _row_error(what, i, "input_ids", "expected lists of ints in input_ids and labels")
    if len(ids) != len(labels):
        raise _row_error(what, i, "labels", f"{len(labels)} labels for {len(ids)} input_ids")
    reads = [p for p, y in enumerate(labels) if y != -100]
    if any(labels[p] not in (0, 1) for p in reads):
        raise _row_error(what, i, "labels", "a label other than 0, 1 or -100")
    return list(ids), reads, [int(labels[p]) for p in reads]


def _encode_part(dataset: Iterable[dict[str, Any]], start: int, bound: BoundFormat, cuts: Cuts,
                 is_eval: bool, what: str, tokenized: bool) -> tuple[list[Example], int]:
    """The examples of rows ``start, start + 1, ...`` and how many had no trained step."""
    out, empty = [], 0
    for i, row in enumerate(dataset, start):
        if tokenized:
            ids, reads, ys = tokenized_row(row, i, what)
        else:
            prompt, completions, labels = check_row(row, i, what)
            ids, reads, ys = encode_row(bound, prompt, completions, labels, cuts, is_eval)
        if not reads:
            empty += 1
            continue
        # nothing after the last read position changes a read (causal models)
        out.append(Example(ids[:reads[-1] + 1], reads, [float(y) for y in ys]))
    return out, empty


def examples_of(dataset: Iterable[dict[str, Any]] | Any, bound: BoundFormat, cuts: Cuts,
                is_eval: bool, what: str, num_proc: int | None = None) -> tuple[list[Example], int]:
    """Every row of ``dataset`` as an :class:`Example`; returns (examples, rows left with no
    trained step after the cuts, which are dropped as TRL's loss ignores them). With
    ``num_proc`` above 1 (``PRMConfig.dataset_num_proc``), the rows are tokenised in that many
    processes, in contiguous parts, and joined in order."""
    tokenized = check_columns(dataset, what)
    if num_proc is not None and num_proc > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        rows = list(dataset)
        size = -(-len(rows) // num_proc) or 1
        starts = list(range(0, len(rows), size))
        with ProcessPoolExecutor(len(starts) or 1,
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            parts = list(pool.map(_encode_part, [rows[s:s + size] for s in starts], starts,
                                  *[[x] * len(starts) for x in (bound, cuts, is_eval, what,
                                                                tokenized)]))
    else:
        parts = [_encode_part(dataset, 0, bound, cuts, is_eval, what, tokenized)]
    out = [e for part, _ in parts for e in part]
    if not out:
        raise PrmkitError(f"{what}: no row has a labelled step that fits in max_length")
    return out, sum(empty for _, empty in parts)
