"""The ``search`` job: run a search method over a file of problems, resumably.

Output: every problem's final candidates as records (see :func:`prmkit.search.base.finish`),
``id = "{problem id}-{rank}"``, ``group`` = the problem id, ``meta.selected`` on the chosen one,
``meta.candidates`` = how many the problem has, and ``meta.compute`` = the problem's compute
account (tokens generated, PRM tokens, seconds).

Resuming works as in ``prmkit generate``: problems are cut into fixed chunks by their position
in the input (``chunk`` problems searched in lockstep); records go to ``OUT.partial`` as each
chunk finishes. A rerun skips the chunks whose problems are complete and searches any other
chunk whole again, writing only the records it lacks, so it sees the same batches and (with
per-sample seeds) writes the same records as an uninterrupted run. A rerun with other settings
than the partial file's header names (:mod:`prmkit.resume`), or with other problems than its
rows', is refused.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import Generator
from prmkit.generate.prompts import Prompter
from prmkit.generate.run import Problem
from prmkit.records import check_output_path
from prmkit.resume import Header, Partial, check_resume, config_identity, read_checked
from prmkit.search.base import Compute, SearchConfig, budget_line
from prmkit.search.beam import BeamConfig, beam_search
from prmkit.search.best_of_n import best_of_n
from prmkit.search.dvts import dvts
from prmkit.search.mcts import MCTSConfig, mcts
from prmkit.models.base import PRM

# method name -> (the search function, its config class)
METHODS: dict[str, tuple[Callable[..., Any], type]] = {
    "best-of-n": (best_of_n, SearchConfig),
    "beam": (beam_search, BeamConfig),
    "dvts": (dvts, SearchConfig),
    "mcts": (mcts, MCTSConfig),
}


@dataclass
class Summary:
    problems: int = 0
    records: int = 0
    searched: int = 0                 # problems searched in this run (not resumed)
    accuracy: float | None = None     # of the selected candidates
    compute: Compute | None = None    # summed over all problems (resumed ones included)

    def line(self) -> str:
        out = f"{self.records} candidates for {self.problems} problems"
        if self.accuracy is not None:
            out += f"; selected accuracy {100 * self.accuracy:.1f}%"
        if self.compute is not None:
            out += "; " + budget_line(self.compute)
        return out


def run_search(method: str, problems: Sequence[Problem], generator: Generator, prompter: Prompter,
               prm: PRM, output: str, config: SearchConfig | None = None, chunk: int = 1,
               resume: bool = True, policy: str = "", prm_name: str = "",
               progress: bool = True, on_chunk: Callable[[int], None] | None = None,
               header: Header | None = None) -> Summary:
    """Search every problem with ``method`` and write the candidates to ``output``.
    ``on_chunk(problems searched in this run)`` is called after every chunk; ``header`` is the
    partial file's (:mod:`prmkit.resume`; the command's whole identity), by default
    :func:`search_header`'s."""
    if method not in METHODS:
        raise PrmkitError(f"unknown search method {method!r}; known: {', '.join(METHODS)}")
    search, config_class = METHODS[method]
    config = config or config_class()
    if not isinstance(config, config_class):
        raise PrmkitError(f"{method} takes a {config_class.__name__}")
    if chunk < 1:
        raise PrmkitError(f"chunk must be positive, got {chunk}")
    keyed = {"policy": policy, "prm": prm_name}   # what each record's meta carries
    writer = Partial(output, header or search_header(method, config, policy, prm_name, chunk),
                     resume=resume)
    done = writer.done_rows()
    check_rows(done, output, problems, keyed)
    finished = sum(_complete(p.id, done) for p in problems)
    if finished:
        print(f"resuming: {finished} of {len(problems)} problems already searched", file=sys.stderr)
    from prmkit.progress import progress as bar_of

    summary = Summary(problems=len(problems))
    chunks = [list(problems[s:s + chunk]) for s in range(0, len(problems), chunk)]
    with bar_of(total=len(problems), initial=finished, desc=f"search ({method})",
                unit="problem", disable=None if progress else True) as bar:
        for part in chunks:
            todo = [p for p in part if not _complete(p.id, done)]
            if not todo:
                continue
            result = search(part, generator, prompter, prm, config)
            for rec in result.records:
                if rec.group in {p.id for p in todo} and rec.id not in done:
                    rec.meta.update(keyed)
                    writer.write(rec)
            done = writer.done_rows()
            summary.searched += len(todo)
            bar.update(len(todo))
            if on_chunk is not None:
                on_chunk(summary.searched)
    rows = writer.done_rows()
    order = [f"{p.id}-{k}" for p in problems for k in range(_count(p.id, rows))]
    writer.close(order=order)
    _summarise(summary, [rows[i] for i in order])
    return summary


def search_header(method: str, config: SearchConfig, policy: str, prm_name: str,
                  chunk: int) -> Header:
    """The header of a library call's partial file: the method, policy, PRM, chunk (problems
    searched together share the PRM's passes, and so their compute accounts) and config."""
    return Header("search", {"method": method, "policy": policy, "prm": prm_name,
                             "chunk": chunk, **config_identity(config)})


def check_rows(done: dict[str, dict[str, Any]], output: str, problems: Sequence[Problem],
               keyed: dict[str, Any]) -> None:
    """Refuse the finished rows ``done`` of ``OUT.partial`` when another run wrote them: rows of
    other problems (or other problem texts or references), or another policy or PRM in their
    meta (``keyed``)."""
    given = {p.id: (p.problem, p.reference) for p in problems}
    check_resume(output, done, lambda row: given.get(row.get("group")) == (
        row.get("problem"), row.get("reference")), keyed)


def probe_partial(output: str, problems: Sequence[Problem], header: Header,
                  keyed: dict[str, Any]) -> None:
    """The output checks of :func:`run_search`, made before any model is loaded."""
    check_output_path(output)
    check_rows(read_checked(output, header), output, problems, keyed)


def _count(pid: str, rows: dict[str, dict[str, Any]]) -> int:
    first = rows.get(f"{pid}-0")
    return int((first or {}).get("meta", {}).get("candidates", 0))


def _complete(pid: str, rows: dict[str, dict[str, Any]]) -> bool:
    count = _count(pid, rows)
    return count > 0 and all(f"{pid}-{k}" in rows for k in range(count))


def _summarise(summary: Summary, rows: list[dict[str, Any]]) -> None:
    summary.records = len(rows)
    selected = [r for r in rows if (r.get("meta") or {}).get("selected")]
    if selected and all(r.get("is_correct") is not None for r in selected):
        summary.accuracy = sum(bool(r["is_correct"]) for r in selected) / len(selected)
    total = Compute()
    for r in selected:
        total = total.add(Compute.from_dict(r["meta"].get("compute") or {}))
    summary.compute = total
