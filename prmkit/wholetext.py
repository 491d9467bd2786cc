"""The ``whole`` tokenisation rule of :mod:`prmkit.stepformat`: the token ids of a whole text
from one tokenizer call, and where each step is read in them (the public recipes of
Math-Shepherd, Qwen2.5-Math-PRM and RLHFlow tokenise this way).

It knows nothing of step formats: it gets the text, the character offset just past each step's
piece (its tag, or the point where an assistant reply starts) and the reading rule:

* a tag id: every position whose id is the tag's (Math-Shepherd's and Qwen's recipes), checked
  against the offset mapping, which decides where they differ (a step that holds the tag, a
  tag that the tokenizer merges with its neighbours);
* no tag id: the token that holds each piece's last character, by the offset mapping of the
  whole text (RLHFlow's position -3 of each prefix: the token before the reply's ``+``).

A tokenizer without offset mappings (a slow one) reads by tag ids alone, or by tokenising the
text up to each step's end on its own, which must give a prefix of the whole text's ids.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from prmkit.errors import PrmkitError

log = logging.getLogger("prmkit")


def whole_text_ids(tokenizer: Any, text: str, ends: Sequence[int], *, special_tokens: bool,
                   bos: Sequence[int], tag_id: int | None, name: str,
                   problem: str = "") -> tuple[list[int], list[int]]:
    """(ids, read positions) of ``text``. ``special_tokens``: the tokenizer adds its own (BOS);
    ``bos``: ids put first when the ids do not start with them (TRL's rule; empty: none)."""
    fast = bool(getattr(tokenizer, "is_fast", False))
    out = tokenizer(text, add_special_tokens=special_tokens, return_offsets_mapping=fast)
    ids = list(out["input_ids"])
    shift = 0
    if bos and ids[:len(bos)] != list(bos):
        ids, shift = list(bos) + ids, len(bos)
    by_offset: list[int] | None = None
    if fast:
        offsets = [tuple(o) for o in out["offset_mapping"]]
        by_offset = [token_at(offsets, e - 1, name) + shift for e in ends]
    if tag_id is None:
        if by_offset is None:
            by_offset = ends_without_offsets(tokenizer, text, ends, ids, special_tokens, bos, name)
        return ids, by_offset
    tagged = [i for i, t in enumerate(ids) if t == tag_id]
    if by_offset is None:
        if len(tagged) != len(ends):
            raise PrmkitError(f"step format {name!r}: {len(tagged)} tag ids for {len(ends)} "
                              f"steps (a step holds the tag, or the tag merges with its "
                              f"neighbours); use a fast tokenizer")
        return ids, tagged
    wrong = [k for k, p in enumerate(by_offset) if ids[p] != tag_id]
    if wrong:
        log.warning("step format %r: the tag after step %d is not the token %d (the tokenizer "
                    "merges it with the text around it); read at the token that ends the step "
                    "(problem %r)", name, wrong[0], tag_id, problem[:60])
    return ids, by_offset


def token_at(offsets: Sequence[tuple[int, int]], char: int, name: str) -> int:
    """The index of the token whose span holds character ``char`` (the last such token when
    several do, e.g. the bytes of one character split over tokens)."""
    best = before = None
    for i, (a, b) in enumerate(offsets):
        if a <= char < b:
            best = i
        elif best is not None and a > char:
            break
        if b > a and a <= char:
            before = i
    if best is None:   # offsets trimmed of whitespace: the last token starting at or before it
        best = before
    if best is None:
        raise PrmkitError(f"step format {name!r}: no token holds character {char} of the text")
    return best


def ends_without_offsets(tokenizer: Any, text: str, ends: Sequence[int], ids: Sequence[int],
                         special_tokens: bool, bos: Sequence[int], name: str) -> list[int]:
    """A tokenizer without offset mappings: the text up to each step's end tokenised on its
    own, which must give a prefix of the whole text's ids."""
    parts = tokenizer([text[:e] for e in ends], add_special_tokens=special_tokens)["input_ids"]
    out = []
    for part in parts:
        part = list(part)
        if bos and part[:len(bos)] != list(bos):
            part = list(bos) + part
        if not part or list(ids[:len(part)]) != part:
            raise PrmkitError(f"step format {name!r}: this tokenizer has no offset mappings and "
                              f"merges the text across a step's end; use its fast version")
        out.append(len(part) - 1)
    return out
