"""Whole verifications whose step copies prmkit writes (``--copy-steps``).

A verifier trained on chains that begin each step's review with a copy of the step
(``prmkit train verifier --chains lab``, :mod:`prmkit.world.chains`) copies it itself when it
samples, and a small one miscopies: it puts a wrong result right as it copies it
(``2 + 4 = 16 [calculator: 6]`` written ``2 + 4 = 6``) or writes another step, then judges its
copy. Here the copy is written for it: the verification is built a line at a time, prmkit
writing ``Step i: <step i as the prompt shows it>`` (ThinkPRM's ``Step i:`` line,
:func:`prmkit.verify.templates.step_line`) and the verifier the rest of the line, its review and
verdict, up to the newline. Lines follow until the verifier judges a step incorrect (the steps
after it inherit that verdict, :func:`prmkit.verify.verdicts.step_values`), ends the
verification itself (``Is the solution correct?``, ``</think>`` or its end token), or every step
has its line. The verdicts are the verifier's own, read as for any whole verification.

Each line is a call to the backend on the prompt and the text so far: the lines of up to
:data:`prmkit.verify.prm.BATCH` solutions in one batch where the backend samples several
prompts at once. Chain k of a solution samples its lines with seed ``seed + 7919 k``, so its
lines, like any sample, depend only on (seed, prompt so far): a verification is the same in a
batch as alone. ``max_new_tokens`` caps each line and the tokens the verifier writes in all
(the copies are not its); a verification that goes past it scores nothing, as any that does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from prmkit.verify import templates as T
from prmkit.verify.backend import CHAIN_SEED, Sample, SamplesMany, Sampling, VerifierBackend
from prmkit.verify.verdicts import parse_whole

LINE_STOPS = ("\n", T.THINKPRM_END, "</think>")   # a line ends; the last two end the verification


@dataclass
class _Chain:
    """One verification being written: its text, the tokens the verifier wrote, and the token
    texts and top logprobs of a backend that reads verdicts from them (None for one that
    reads them teacher-forced)."""

    text: str = ""
    tokens: int = 0
    finish: str = "stop"
    open: bool = True
    pieces: list[str] | None = field(default_factory=list)
    tops: list[Any] = field(default_factory=list)

    def copy(self, line: str) -> None:
        self.text += line
        if self.pieces is not None:
            self.pieces.append(line)
            self.tops.append({})   # no alternatives: prmkit wrote it

    def extend(self, got: Sample) -> None:
        """The verifier's line ``got`` after the copy."""
        self.text += got.text
        self.tokens += got.n_tokens
        if self.pieces is None:
            return
        if got.data is None:
            self.pieces = None
            return
        texts, tops = spelled(got.text, *got.data)
        self.pieces.extend(texts)
        self.tops.extend(tops)

    def sample(self) -> Sample:
        data = None if self.pieces is None else (self.pieces, self.tops)
        return Sample(self.text, self.finish, self.tokens, data)


def spelled(text: str, texts: Sequence[str], tops: Sequence[Any]) -> tuple[list[str], list[Any]]:
    """A line's token texts and top logprobs cut to spell ``text``: the tokens while they do,
    the last one cut where the text ends inside it (a server that stops inside a token, such as
    at the newline of ``.\n\n``), and what the tokens do not spell (a stop string the server
    added, or text its tokens disagree with) as one piece with no alternatives."""
    pieces: list[str] = []
    kept: list[Any] = []
    at = 0
    for token, top in zip(texts, tops):
        if at >= len(text):
            break
        part = text[at:at + len(token)]
        if not token.startswith(part):
            break
        pieces.append(part)
        kept.append(top)
        at += len(part)
    if at < len(text):
        pieces.append(text[at:])
        kept.append({})
    return pieces, kept


def copied_verifications(backend: VerifierBackend, prompts: Sequence[str],
                         shown: Sequence[Sequence[str]], n: int, max_tokens: int,
                         sampling: Sampling, seed: int,
                         made: Callable[[int], None]) -> list[list[Sample]]:
    """``n`` verifications of each prompt, the steps ``shown[i]`` (as prompt i shows them)
    copied line by line as the module docstring says; ``made`` is told the tokens each round of
    lines wrote. Each :class:`Sample` counts the verifier's own tokens; its finish reason is
    ``length`` where a line reaches ``max_tokens`` or they all pass it."""
    chains = [[_Chain() for _ in range(n)] for _ in prompts]
    for j in range(max((len(s) for s in shown), default=0)):
        for k in range(n):
            todo = [(i, row[k]) for i, row in enumerate(chains)
                    if row[k].open and j < len(shown[i])]
            if not todo:
                continue
            for i, chain in todo:
                start = "" if chain.text.endswith("\n") else "\n"
                chain.copy(f"{start}Step {j + 1}: {T.step_line(shown[i][j])}")
            lines = _lines(backend, [prompts[i] + chain.text for i, chain in todo], max_tokens,
                           sampling, seed + CHAIN_SEED * k)
            made(sum(line.n_tokens for line in lines))
            for (i, chain), line in zip(todo, lines):
                chain.extend(line)
                _close(chain, line, j, len(shown[i]), max_tokens)
    return [[chain.sample() for chain in row] for row in chains]


def _lines(backend: VerifierBackend, prompts: list[str], max_tokens: int, sampling: Sampling,
           seed: int) -> list[Sample]:
    """One line after each prompt: in one batch where the backend samples several at once."""
    if len(prompts) > 1 and isinstance(backend, SamplesMany):
        rows = backend.sample_many(prompts, 1, LINE_STOPS, max_tokens, sampling, seed)
    else:
        rows = [backend.sample(p, 1, LINE_STOPS, max_tokens, sampling, seed) for p in prompts]
    return [row[0] for row in rows]


def _close(chain: _Chain, line: Sample, j: int, n_steps: int, max_tokens: int) -> None:
    """Whether the verification ends after its line for step ``j`` (0-based), and how."""
    if line.finish_reason == "length" or chain.tokens > max_tokens:
        chain.finish, chain.open = "length", False
    elif line.finish_reason == "eos" or not line.text.endswith(LINE_STOPS[0]):
        chain.finish, chain.open = line.finish_reason, False   # the verifier ended it
    else:
        verdicts = parse_whole(chain.text, n_steps)
        said = verdicts[j] if verdicts is not None else None
        chain.open = said is None or said.correct   # the first incorrect step ends it
