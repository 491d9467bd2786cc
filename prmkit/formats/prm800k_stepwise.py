"""PRM800K in the one-row-per-step parquet layout ("stepwise critic").

Source: the PRM800K labels of Lightman et al. (2023) as laid out by
github.com/xhghhh/Enhancing-PRM800K (``phase1_{train_plus,test}.stepwise-critic.parquet``).
Read through :mod:`prmkit.formats.prm800k`; needs pyarrow (``pip install 'prmkit[data]'``).

One row per rated candidate step::

    instruction            the problem
    responses              list of the earlier steps of the solution being labelled
    next_response          the candidate step being rated
    answer                 the candidate's final answer (cut from next_response), if any
    is_human_response      written by the labeller (unrated)
    is_solution            the step that finished the solution
    is_preferred_response  the step the labeller continued with (at most one per position)
    rating                 1 good, 0 neutral, -1 bad, null unrated
    error_reason           (train file only) why a step is wrong

Rows come session after session, step by step: the rows of position k + 1 have ``responses`` =
those of position k plus the preferred ``next_response``. A session starts at a row with no
earlier steps once the previous one is done (a new problem, a restart, or a second preferred
row for one position). A row that continues no session is an error naming the file, row and
column.

One record per session, by the raw layout's rule (the preferred row at each position; where the
session stops without one, its first row rated -1 ends it). A session with no step to keep is
an error, or skipped under ``skip_empty``. With ``prm800k_alternatives``, also one record per
rated row off the path (id ``prm800k-rN-rowM``, ``meta.alternative = M``). Labels as in the raw
layout; answer = the last step's ``answer``; no reference. Id ``prm800k-rN`` (N = the labelling session's
first row), group ``prm800k-pK`` (K = the problem's order of appearance). ``meta``: rows,
n_alternatives, is_solution, error_reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from prmkit.errors import RecordError
from prmkit.formats.common import build, require_pyarrow, warn_skipped
from prmkit.tables import read_table

if TYPE_CHECKING:
    from prmkit.formats.options import ConvertOptions
    from prmkit.records import Record

REQUIRED = ("instruction", "responses", "next_response", "is_preferred_response", "rating")
OPTIONAL = ("answer", "is_human_response", "is_solution", "error_reason")


@dataclass
class _Group:
    """The candidate rows for one position of one session."""

    responses: list[str]
    rows: list[int] = field(default_factory=list)
    preferred: int | None = None


def read(path: str, options: ConvertOptions) -> Iterator[Record]:
    cols = _columns(path)
    problems: dict[str, int] = {}
    skipped: list[str] = []
    for session in _sessions(cols, path):
        first = session[0].rows[0]
        k = problems.setdefault(cols["instruction"][first], len(problems))
        chains = _chains(cols, session, path, options)
        if not chains or chains[0][0] != f"prm800k-r{first}":
            skipped.append(f"row {first}")  # the session has no path of its own
        for rec_id, chain, extra in chains:
            yield _record(cols, chain, path, rec_id, k, options.prm800k_neutral, extra)
    warn_skipped(path, "labelling sessions", skipped)


def _columns(path: str) -> dict[str, list[Any]]:
    require_pyarrow()
    table = read_table(path)
    for name in REQUIRED:
        if name not in table.column_names:
            raise RecordError(f"missing column (the file has: {', '.join(table.column_names)})",
                              path, None, name)
    n = table.num_rows
    return {name: table.column(name).to_pylist() if name in table.column_names else [None] * n
            for name in REQUIRED + OPTIONAL}


def _row_error(path: str, row: int, column: str, message: str) -> RecordError:
    return RecordError(message, f"{path}: row {row}", None, column)


def _check_row(cols: dict[str, list[Any]], path: str, i: int) -> list[str]:
    if not isinstance(cols["instruction"][i], str):
        raise _row_error(path, i, "instruction", "expected a string")
    if not isinstance(cols["next_response"][i], str):
        raise _row_error(path, i, "next_response", "expected a string")
    responses = cols["responses"][i]
    if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
        raise _row_error(path, i, "responses", "expected a list of strings")
    return responses


def _sessions(cols: dict[str, list[Any]], path: str) -> Iterator[list[_Group]]:
    """Split the rows into labelling sessions, each a list of groups (one per position)."""
    session: list[_Group] = []
    for i in range(len(cols["instruction"])):
        responses = _check_row(cols, path, i)
        preferred = bool(cols["is_preferred_response"][i])
        group = session[-1] if session else None
        same = group is not None and cols["instruction"][i] == cols["instruction"][group.rows[0]]
        second_preferred = preferred and group is not None and group.preferred is not None
        if same and responses == group.responses and not second_preferred:
            pass  # another candidate for the same position
        elif (same and group.preferred is not None
              and responses == group.responses + [cols["next_response"][group.preferred]]):
            group = _Group(responses)  # the next position of the same session
            session.append(group)
        elif not responses:
            if session:
                yield session
            group = _Group(responses)  # a new session
            session = [group]
        else:
            raise _row_error(path, i, "responses", f"has {len(responses)} earlier steps that "
                             f"continue no labelling session of the rows above")
        group.rows.append(i)
        if preferred:
            group.preferred = i
    if session:
        yield session


def _label(cols: dict[str, list[Any]], path: str, i: int, neutral: float | None) -> float | None:
    rating = cols["rating"][i]
    if rating is None or rating != rating:  # null or NaN
        return None
    if rating not in (-1, 0, 1):
        raise _row_error(path, i, "rating", f"{rating!r}, expected -1, 0, 1 or null")
    return {-1: 0.0, 1: 1.0}.get(int(rating), neutral)


def _rated(cols: dict[str, list[Any]], i: int) -> bool:
    rating = cols["rating"][i]
    return rating is not None and rating == rating  # not null, not NaN


def _chains(cols: dict[str, list[Any]], session: list[_Group], path: str,
            options: ConvertOptions) -> list[tuple[str, list[int], dict[str, Any]]]:
    """``(id, rows of the steps, extra meta)`` of the labelling session's path and, with
    ``prm800k_alternatives``, of each rated alternative (the path up to it, then it)."""
    first = session[0].rows[0]
    path_rows = [g.preferred for g in session if g.preferred is not None]
    last = session[-1]
    if last.preferred is None:  # stopped: keep the first step rated -1 as the final error
        path_rows += [i for i in last.rows if cols["rating"][i] == -1][:1]
    rows = [i for g in session for i in g.rows]
    alternatives = [(k, i) for k, g in enumerate(session) for i in g.rows
                    if i not in path_rows and _rated(cols, i)]
    if not path_rows and not options.skip_empty:
        raise RecordError("a labelling session with no preferred row and no row rated -1 (no "
                          "step to keep); use the option skip_empty to leave such sessions out",
                          f"{path}: row {first}", None, "is_preferred_response")
    meta = {"rows": [first, rows[-1]], "n_alternatives": len(alternatives)}
    chains = [(f"prm800k-r{first}", path_rows, meta)] if path_rows else []
    if options.prm800k_alternatives:
        chains += [(f"prm800k-r{first}-row{i}", path_rows[:k] + [i],
                    {**meta, "alternative": i}) for k, i in alternatives]
    return chains


def _record(cols: dict[str, list[Any]], chain: list[int], path: str, rec_id: str,
            problem_index: int, neutral: float | None, meta: dict[str, Any]) -> Record:
    meta = {**meta, "is_solution": bool(cols["is_solution"][chain[-1]])}
    reasons = [cols["error_reason"][i] for i in chain]
    if any(r is not None for r in reasons):
        meta["error_reason"] = reasons
    answer = cols["answer"][chain[-1]]
    return build(f"{path}: row {chain[-1]}", None,
                 {"problem": "instruction", "steps": "next_response"},
                 id=rec_id, group=f"prm800k-p{problem_index}",
                 problem=cols["instruction"][chain[0]],
                 steps=[cols["next_response"][i] for i in chain],
                 labels=[_label(cols, path, i, neutral) for i in chain],
                 answer=answer if isinstance(answer, str) else None, meta=meta)
