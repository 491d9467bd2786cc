"""The dynamic batcher (prmkit/serve/batcher.py) with a scripted scorer: exact groups, no model."""

from __future__ import annotations

import threading
import time

import pytest

from prmkit.errors import PrmkitError
from prmkit.serve.batcher import Batcher, BatcherConfig, Closed, Overloaded


class Recorder:
    """A PRM that scores step k of problem p as len(p) + k / 10, records every call, and can be
    held (blocked) until released, to line jobs up deterministically."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[list[str]] = []
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.fail_on = fail_on

    def score(self, problems, steps):
        self.entered.set()
        self.hold.wait(10)
        self.calls.append(list(problems))
        if self.fail_on in problems:
            raise ValueError(f"cannot score {self.fail_on!r}")
        return [[len(p) + k / 10 for k in range(len(s))] for p, s in zip(problems, steps)]


def expected(problem, steps):
    return [len(problem) + k / 10 for k in range(len(steps))]


def held_batcher(rec, **cfg):
    """A batcher whose worker is busy with a first job ("x") until rec.hold is set."""
    rec.hold.clear()
    b = Batcher(rec.score, BatcherConfig(**cfg))
    first = b.submit(["x"], [["s"]], [1])
    assert rec.entered.wait(5)
    return b, first


def test_jobs_queued_while_busy_share_one_call_within_the_token_budget():
    rec = Recorder()
    b, first = held_batcher(rec, token_budget=12, max_wait_ms=0)
    # padded size = longest x solutions: 3x1, 3x3 = 9, then 4x4 = 16 > 12 -> a second group
    f1 = b.submit(["aa"], [["s1", "s2"]], [3])
    f2 = b.submit(["bbb", "c"], [["s"], ["s", "t", "u"]], [3, 2])
    f3 = b.submit(["dddd"], [["s"]], [4])
    rec.hold.set()
    assert first.result(5) == [expected("x", ["s"])]
    assert f1.result(5) == [expected("aa", ["s1", "s2"])]
    assert f2.result(5) == [expected("bbb", ["s"]), expected("c", ["s", "t", "u"])]
    assert f3.result(5) == [expected("dddd", ["s"])]
    b.close(5)
    assert rec.calls == [["x"], ["aa", "bbb", "c"], ["dddd"]]
    assert b.stats.groups == 3 and b.stats.jobs == 4 and b.stats.solutions == 5
    assert b.stats.max_group_jobs == 2


def test_a_job_larger_than_the_budget_is_scored_in_pieces():
    rec = Recorder()
    b, first = held_batcher(rec, token_budget=5, max_wait_ms=0)
    big = b.submit(["p", "q"], [["s"], ["s"]], [10, 10])
    small = b.submit(["r"], [["s"]], [1])
    rec.hold.set()
    assert big.result(5) == [expected("p", ["s"]), expected("q", ["s"])]
    assert small.result(5) == [expected("r", ["s"])]
    b.close(5)
    assert rec.calls == [["x"], ["p"], ["q"], ["r"]]


def test_a_small_job_is_not_held_back_by_a_long_one():
    """Pieces alternate between oldest first and least served first: a small job that comes
    while a long job is being scored waits for at most two pieces."""
    calls, at_third, go_on = [], threading.Event(), threading.Event()

    def score(problems, steps):
        calls.append(list(problems))
        if problems == ["long2"]:  # hold the third piece until the small job is queued
            at_third.set()
            go_on.wait(5)
        return [[0.5] * len(s) for s in steps]

    b = Batcher(score, BatcherConfig(token_budget=1, max_wait_ms=0))
    long_job = b.submit([f"long{i}" for i in range(10)], [["s"]] * 10, [1] * 10)
    assert at_third.wait(5)
    small = b.submit(["small"], [["s"]], [1])
    go_on.set()
    assert small.result(5) and long_job.result(5)
    b.close(5)
    assert calls.index(["small"]) <= 5 and len(calls) == 11


def test_a_caller_who_leaves_stops_costing_compute_after_the_piece_in_progress():
    from prmkit.serve.batcher import Abandoned

    calls, at_third, go_on = [], threading.Event(), threading.Event()

    def score(problems, steps):
        calls.append(list(problems))
        if problems == ["g2"]:
            at_third.set()
            go_on.wait(5)
        return [[0.5] * len(s) for s in steps]

    b = Batcher(score, BatcherConfig(token_budget=1, max_wait_ms=0))
    gone = b.submit([f"g{i}" for i in range(50)], [["s"]] * 50, [1] * 50)
    assert at_third.wait(5)
    queued_gone = b.submit(["q1", "q2"], [["s"], ["s"]], [1, 1])
    b.cancel(gone)
    b.cancel(queued_gone)
    after = b.submit(["after"], [["s"]], [1])
    go_on.set()
    assert after.result(5) == [[0.5]]
    with pytest.raises(Abandoned):
        gone.result(5)
    b.close(5)
    scored = [p for c in calls for p in c]
    # nothing of theirs after the piece that was under way when they left
    assert scored == ["g0", "g1", "g2", "after"]
    assert b.stats.dropped == 2 and b.queued == 0


def test_an_idle_batcher_waits_max_wait_for_company():
    rec = Recorder()
    b = Batcher(rec.score, BatcherConfig(token_budget=1000, max_wait_ms=300))
    f1 = b.submit(["a"], [["s"]], [1])
    time.sleep(0.05)  # well inside the 300 ms window
    f2 = b.submit(["b"], [["s"]], [1])
    assert f1.result(5) and f2.result(5)
    b.close(5)
    assert rec.calls == [["a", "b"]]


def test_a_full_budget_does_not_wait_for_max_wait():
    rec = Recorder()
    b = Batcher(rec.score, BatcherConfig(token_budget=4, max_wait_ms=60_000))
    start = time.monotonic()
    f = b.submit(["a", "b"], [["s"], ["s"]], [2, 2])
    assert f.result(5)
    assert time.monotonic() - start < 30
    b.close(5)


def test_the_queue_is_bounded_and_overload_says_when_to_retry():
    rec = Recorder()
    b, first = held_batcher(rec, max_queue=3, max_wait_ms=0)
    ok = b.submit(["a", "b"], [["s"], ["s"]], [1, 1])
    with pytest.raises(Overloaded) as e:
        b.submit(["c", "d"], [["s"], ["s"]], [1, 1])  # 2 queued + 2 > 3
    assert 1 <= e.value.retry_after <= 60
    assert "2 solutions are queued" in str(e.value)
    fits = b.submit(["e"], [["s"]], [1])                # 2 + 1 = 3 still fits
    rec.hold.set()
    assert ok.result(5) and fits.result(5) and first.result(5)
    b.close(5)
    assert b.stats.refused == 1


def test_a_job_whose_caller_left_is_not_scored():
    rec = Recorder()
    b, first = held_batcher(rec, max_wait_ms=0)
    gone = b.submit(["gone"], [["s"]], [1])
    kept = b.submit(["kept"], [["s"]], [1])
    assert gone.cancel()
    rec.hold.set()
    assert kept.result(5) == [expected("kept", ["s"])]
    b.close(5)
    assert ["gone"] not in rec.calls and all("gone" not in c for c in rec.calls)
    assert b.stats.dropped == 1


def test_a_failing_job_fails_alone():
    rec = Recorder(fail_on="bad")
    b, first = held_batcher(rec, max_wait_ms=0)
    good = b.submit(["good"], [["s"]], [1])
    bad = b.submit(["bad"], [["s"]], [1])
    rec.hold.set()
    assert good.result(5) == [expected("good", ["s"])]
    with pytest.raises(ValueError, match="cannot score 'bad'"):
        bad.result(5)
    b.close(5)
    assert rec.calls[1:] == [["good", "bad"], ["good"], ["bad"]]


def test_close_finishes_queued_jobs_and_then_refuses_new_ones():
    rec = Recorder()
    b, first = held_batcher(rec, token_budget=1, max_wait_ms=60_000)  # "x" fills the budget
    queued = [b.submit([f"p{i}"], [["s"]], [1]) for i in range(3)]
    closer = threading.Thread(target=b.close, args=(10,))
    closer.start()
    time.sleep(0.05)
    rec.hold.set()
    closer.join(10)
    assert not closer.is_alive()
    assert [f.result(0) for f in queued] == [[expected(f"p{i}", ["s"])] for i in range(3)]
    with pytest.raises(Closed):
        b.submit(["late"], [["s"]], [1])


def test_empty_jobs_and_bad_configs():
    b = Batcher(Recorder().score)
    assert b.submit([], [], []).result(1) == []
    with pytest.raises(PrmkitError):
        b.submit(["a"], [], [])
    b.close(5)
    for bad in ({"token_budget": 0}, {"max_wait_ms": -1}, {"max_queue": 0},
                {"max_wait_ms": float("nan")}):
        with pytest.raises(PrmkitError):
            BatcherConfig(**bad)


def test_together_a_problems_solutions_share_a_piece_past_the_cap():
    """Prefix sharing reads a problem's prefix once per piece: together, a piece ends before a
    problem's run rather than inside it, and takes the run it begins with whole, up to the
    token budget; without, the cap cuts where it falls."""
    for together, calls in ((False, [["x"], ["a", "a"], ["a", "b"], ["c", "b"], ["b"]]),
                            (True, [["x"], ["a", "a", "a"], ["b", "b", "b"], ["c"]])):
        rec = Recorder()
        rec.hold.clear()
        b = Batcher(rec.score, BatcherConfig(token_budget=30, max_wait_ms=0), together)
        first = b.submit(["x"], [["s"]], [1])
        assert rec.entered.wait(5)
        b._cap = lambda: 10   # the measured speed's cap: two solutions of 5 tokens
        jobs = [b.submit(["a"] * 3, [["s"]] * 3, [5] * 3), b.submit(["b"] * 3, [["s"]] * 3, [5] * 3),
                b.submit(["c"], [["s"]], [5])]
        rec.hold.set()
        first.result(5)
        assert [j.result(5) for j in jobs] == [[expected(p, ["s"])] * n for p, n in (("a", 3), ("b", 3), ("c", 1))]
        b.close(5)
        assert rec.calls == calls


def test_together_brings_a_problems_jobs_side_by_side_and_answers_in_order():
    rec = Recorder()
    rec.hold.clear()
    b = Batcher(rec.score, BatcherConfig(token_budget=12, max_wait_ms=0), together=True)
    first = b.submit(["x"], [["s"]], [1])
    assert rec.entered.wait(5)
    b._cap = lambda: 8
    mixed = b.submit(["pp", "q", "pp", "q"], [["a"], ["b"], ["c", "d"], ["e"]], [2] * 4)
    other = b.submit(["r"], [["s"]], [2])
    more = b.submit(["q"], [["f"]], [2])
    big = b.submit(["z"] * 7, [["s"]] * 7, [2] * 7)   # 14 padded tokens: over the budget, split
    rec.hold.set()
    first.result(5)
    assert mixed.result(5) == [expected("pp", ["a"]), expected("q", ["b"]),
                               expected("pp", ["c", "d"]), expected("q", ["e"])]
    assert other.result(5) == [expected("r", ["s"])] and more.result(5) == [expected("q", ["f"])]
    assert big.result(5) == [expected("z", ["s"])] * 7
    b.close(5)
    # the job's own solutions by problem; the later job of "q" right after it, so that the run
    # of "q" (6 tokens) does not fit after "pp" and waits for the next piece; "z" over 12 tokens
    assert rec.calls == [["x"], ["pp", "pp"], ["q", "q", "q", "r"], ["z"] * 6, ["z"]]
