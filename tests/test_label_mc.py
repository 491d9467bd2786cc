"""Monte Carlo step labels with a scripted policy whose success per prefix is known exactly:
hard and soft values by their definition, binary search against per-step, the probes it
spends, the free last step, batching, relabeling from stored counts."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from prmkit.errors import PrmkitError, RecordError
from prmkit.generate.fake import FakeGenerator
from prmkit.generate.prompts import STYLES, Prompter
from prmkit.label.mc import MCConfig, first_error, label_mc, next_probes, relabel
from prmkit.records import Record

PROMPTER = Prompter(STYLES["few-shot"])
RIGHT, WRONG = "The answer is 42.", "The answer is 7."


def scripted(profiles: dict[str, list[int]]) -> FakeGenerator:
    """A policy for which exactly ``profiles[problem][i]`` of the rollouts from the prefix that
    ends at step i are right (samples k < c are right, the others wrong)."""
    heads = {PROMPTER.prompt(problem): problem for problem in profiles}

    def script(prompt: str, k: int) -> str:
        head = next(h for h in heads if prompt.startswith(h))
        i = prompt[len(head):].count("\n") - 1          # the last step written
        return RIGHT if k < profiles[heads[head]][i] else WRONG

    return FakeGenerator(script)


def record(name: str, n: int, last: str | None = None, reference: str = "42") -> Record:
    steps = [f"step {i} of {name}" for i in range(n)]
    if last is not None:
        steps[-1] = last
    return Record(id=name, problem=f"Problem {name}: what is the number?", steps=steps,
                  reference=reference)


def run(records, profiles, **config):
    fake = scripted({r.problem: profiles[r.id] for r in records})
    out = list(label_mc([Record.from_dict(r.to_dict()) for r in records], fake, PROMPTER,
                        MCConfig(**config), policy="scripted"))
    return {r.id: r for r in out}, fake


# ------------------------------------------------------------------------------- definitions


def test_hard_and_soft_values_per_step():
    counts = [3, 2, 0, 1, 0]   # right rollouts of 4, per prefix
    rec = record("a", 5)
    hard, fake = run([rec], {"a": counts}, rollouts=4, mode="hard")
    soft, _ = run([rec], {"a": counts}, rollouts=4, mode="soft")
    assert hard["a"].labels == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert soft["a"].labels == [0.75, 0.5, 0.0, 0.25, 0.0]
    assert hard["a"].first_error == soft["a"].first_error == 2
    mc = soft["a"].meta["mc"]
    assert mc["correct"] == counts and mc["samples"] == [4] * 5
    assert mc["rollouts_spent"] == 20 and mc["strategy"] == "per-step" and mc["policy"] == "scripted"
    assert mc["probes"] == [0, 1, 2, 3, 4]
    # one generator call, K samples of each prefix, stopped like a whole solution
    [call] = fake.calls
    assert call["n"] == 4 and call["stop"] == PROMPTER.end_strings and len(call["prompts"]) == 5
    assert call["prompts"][2] == PROMPTER.prompt(rec.problem, rec.steps[:3])


def test_soft_threshold_decides_what_is_wrong():
    rec = record("a", 4)
    counts = [4, 1, 2, 0]
    out, _ = run([rec], {"a": counts}, rollouts=4, mode="soft", threshold=0.25)
    assert out["a"].labels == [1.0, 0.25, 0.5, 0.0] and out["a"].first_error == 1
    out, _ = run([rec], {"a": counts}, rollouts=4, mode="soft", strategy="binary", threshold=0.25)
    assert out["a"].first_error == 1 and out["a"].labels == [1.0, 0.0, None, None]
    # in hard mode any threshold below 1 means "no rollout right"
    out, _ = run([rec], {"a": counts}, rollouts=4, mode="hard", threshold=0.9)
    assert out["a"].first_error == 3


def test_linear_stop_probes_in_order_up_to_the_first_error():
    out, fake = run([record("a", 5)], {"a": [3, 2, 0, 1, 0]}, rollouts=4, strategy="linear-stop")
    assert out["a"].meta["mc"]["probes"] == [0, 1, 2]
    assert out["a"].labels == [1.0, 1.0, 0.0, None, None] and out["a"].first_error == 2
    assert out["a"].meta["mc"]["correct"] == [3, 2, 0, None, None]
    assert len(fake.calls) == 3 and out["a"].meta["mc"]["rollouts_spent"] == 12


def test_binary_search_by_hand():
    # 8 steps, first error at 5: probe the last step (7: wrong), then 3 (right), 5 (wrong),
    # 4 (right): the first error is 5.
    counts = [2, 2, 1, 1, 1, 0, 0, 0]
    out, fake = run([record("a", 8)], {"a": counts}, rollouts=2, strategy="binary")
    mc = out["a"].meta["mc"]
    assert mc["probes"] == [7, 3, 5, 4] and out["a"].first_error == 5
    assert out["a"].labels == [1.0] * 5 + [0.0, None, None]
    assert mc["correct"] == [None, None, None, 1, 1, 0, None, 0]
    assert mc["rollouts_spent"] == 8 and len(fake.calls) == 4


def monotone_profiles(n: int, k: int, rng: random.Random):
    """Every success profile shape: right rollouts > 0 before the error, 0 from it on."""
    for error in range(n + 1):                 # error == n: no error
        yield error, [rng.randint(1, k) if i < error else 0 for i in range(n)]


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_binary_finds_the_per_step_first_error_with_log2_probes(mode):
    rng = random.Random(0)
    for n in range(1, 17):
        for error, counts in monotone_profiles(n, 3, rng):
            rec = record("a", n)
            per, _ = run([rec], {"a": counts}, rollouts=3, mode=mode)
            binary, _ = run([rec], {"a": counts}, rollouts=3, mode=mode, strategy="binary")
            expected = -1 if error == n else error
            assert per["a"].first_error == binary["a"].first_error == expected
            probes = binary["a"].meta["mc"]["probes"]
            # the last step, then bisection of n positions
            assert len(probes) <= 1 + math.ceil(math.log2(n)), (n, error, probes)
            assert binary["a"].meta["mc"]["rollouts_spent"] == 3 * len(probes)
            assert per["a"].meta["mc"]["rollouts_spent"] == 3 * n


def test_binary_spends_about_log2_of_the_per_step_rollouts():
    rng = random.Random(1)
    n, spent = 16, {"per-step": 0, "binary": 0}
    for error, counts in monotone_profiles(n, 4, rng):
        if error == n:
            continue
        for strategy in spent:
            out, _ = run([record("a", n)], {"a": counts}, rollouts=4, strategy=strategy)
            spent[strategy] += out["a"].meta["mc"]["rollouts_spent"]
    # wrong solutions of 16 steps: 1 + log2(16) = 5 probes instead of 16
    assert spent["binary"] == 16 * 5 * 4 and spent["per-step"] == 16 * 16 * 4


# ------------------------------------------------------------------------------- the last step


def test_a_stated_answer_is_the_last_steps_free_probe():
    right = record("r", 6, last="So the answer is 42.")
    wrong = record("w", 6, last="So the answer is 41.")
    profiles = {"r": [1] * 6, "w": [1, 1, 0, 0, 0, 0]}
    out, fake = run([right, wrong], profiles, rollouts=2, strategy="binary")
    # the right solution costs nothing: every step is right
    assert out["r"].first_error == -1 and out["r"].labels == [1.0] * 6
    assert out["r"].meta["mc"]["rollouts_spent"] == 0 and out["r"].meta["mc"]["samples"][-1] == 1
    assert all(right.problem not in p for c in fake.calls for p in c["prompts"])
    assert out["w"].first_error == 2 and out["w"].meta["mc"]["probes"][0] == 5
    assert out["w"].meta["mc"]["correct"][5] == 0 and out["w"].meta["mc"]["samples"][5] == 1
    # per-step: the last step is not sampled either; last_step=rollout samples it
    per, _ = run([wrong], profiles, rollouts=2)
    assert per["w"].meta["mc"]["rollouts_spent"] == 10 and per["w"].labels[-1] == 0.0
    rolled, _ = run([wrong], profiles, rollouts=2, last_step="rollout")
    assert rolled["w"].meta["mc"]["rollouts_spent"] == 12
    # a given answer field wins over the text
    given = Record.from_dict(dict(wrong.to_dict(), answer="42"))
    out, _ = run([given], profiles, rollouts=2, strategy="binary")
    assert out["w"].first_error == -1


# ------------------------------------------------------------------------------- batching


def test_one_generator_call_per_round_over_all_records_in_flight():
    recs = [record(name, 8) for name in "abc"]
    profiles = {"a": [1] * 3 + [0] * 5, "b": [1] * 8, "c": [0] * 8}
    out, fake = run(recs, profiles, rollouts=2, strategy="binary")
    rounds = max(len(r.meta["mc"]["probes"]) for r in out.values())
    assert len(fake.calls) == rounds
    assert len(fake.calls[0]["prompts"]) == 3           # every record's last step at once
    assert [out[k].first_error for k in "abc"] == [3, -1, 0]
    # chunk=1: one record at a time
    _, fake1 = run(recs, profiles, rollouts=2, strategy="binary", chunk=1)
    assert len(fake1.calls) == sum(len(r.meta["mc"]["probes"]) for r in out.values())


def test_records_come_out_as_they_finish():
    recs = [record("slow", 16), record("fast", 16)]
    fake = scripted({recs[0].problem: [1] * 5 + [0] * 11, recs[1].problem: [1] * 16})
    order = [r.id for r in label_mc(recs, fake, PROMPTER, MCConfig(strategy="binary", rollouts=1))]
    assert order == ["fast", "slow"]


# ------------------------------------------------------------------------------- counts kept


def test_relabel_from_stored_counts_equals_a_rerun():
    rng = random.Random(2)
    tried = replayed = 0
    for strategy, n in itertools.product(["per-step", "linear-stop", "binary"], [3, 6, 9]):
        for _ in range(20):
            counts = [rng.randint(0, 4) for _ in range(n)]
            rec = record("a", n)
            first, _ = run([rec], {"a": counts}, rollouts=4, mode="soft", strategy=strategy)
            for mode, threshold in (("hard", 0.0), ("soft", 0.25), ("soft", 0.5)):
                tried += 1
                again, _ = run([rec], {"a": counts}, rollouts=4, mode=mode,
                               threshold=threshold, strategy=strategy)
                try:
                    new = relabel(first["a"], mode, threshold)
                except PrmkitError as e:
                    assert strategy != "per-step" and "not probed" in str(e)
                    continue
                replayed += 1
                assert (new.labels, new.first_error) == (again["a"].labels, again["a"].first_error)
                assert new.meta["mc"]["mode"] == mode and new.meta["mc"]["threshold"] == threshold
    assert replayed > tried // 2


def test_pure_strategy_functions():
    assert next_probes("per-step", 3, {1: False}) == [0, 2]
    assert next_probes("linear-stop", 3, {0: False}) == [1]
    assert next_probes("linear-stop", 3, {0: False, 1: True}) == []
    assert next_probes("binary", 5, {}) == [4]
    assert next_probes("binary", 5, {4: False}) == []
    assert next_probes("binary", 5, {4: True}) == [1]
    assert next_probes("binary", 5, {4: True, 1: False}) == [2]
    assert next_probes("binary", 5, {4: True, 1: False, 2: True}) == []
    assert first_error({4: True, 1: False, 2: True}) == 2 and first_error({0: False}) == -1


def test_bad_settings_and_records():
    with pytest.raises(PrmkitError, match="threshold"):
        MCConfig(threshold=1.0)
    with pytest.raises(PrmkitError, match="strategy"):
        MCConfig(strategy="bisect")
    with pytest.raises(PrmkitError):
        MCConfig(rollouts=0)
    no_ref = Record(id="x", problem="p", steps=["a"])
    with pytest.raises(RecordError, match="reference"):
        list(label_mc([no_ref], scripted({}), PROMPTER))
    with pytest.raises(RecordError, match="no Monte Carlo counts"):
        relabel(no_ref)


def test_a_record_no_rollout_solves_is_warned_about(caplog):
    recs = [record("lost", 3), record("fine", 3)]
    with caplog.at_level("WARNING", logger="prmkit"):
        out, _ = run(recs, {"lost": [0, 0, 0], "fine": [2, 1, 0]}, rollouts=4)
    assert out["lost"].labels == [0.0, 0.0, 0.0]
    warned = [r.getMessage() for r in caplog.records if "carry no signal" in r.getMessage()]
    assert len(warned) == 1 and "'lost'" in warned[0] and "12 rollouts" in warned[0]


def test_many_records_without_signal_are_named_three_times_then_counted(caplog):
    from prmkit.label.mc import WARN_RECORDS

    names = [f"lost{k}" for k in range(WARN_RECORDS + 2)]
    with caplog.at_level("WARNING", logger="prmkit"):
        run([record(n, 2) for n in names], {n: [0, 0] for n in names}, rollouts=2)
    messages = [r.getMessage() for r in caplog.records]
    named = [m for m in messages if "carry no signal" in m]
    assert len(named) == WARN_RECORDS and all(f"'{n}'" in m for n, m in zip(names, named))
    summary = [m for m in messages if "records in all" in m]
    assert len(summary) == 1 and summary[0].startswith(f"{len(names)} records in all")
    assert f"'{names[-1]}'" in summary[0]


def test_a_step_that_begins_a_colon_stated_answer_is_the_free_probe():
    # "A: 42" states the answer: the solution's own answer settles it, with no rollout
    out, fake = run([record("a", 2, last="A: 42")], {"a": [0, 0]}, rollouts=4)
    assert out["a"].meta["mc"]["samples"] == [4, 1] and out["a"].labels[-1] == 1.0
