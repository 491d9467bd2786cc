"""Whole verifications whose step copies prmkit writes (prmkit/verify/copies.py, --copy-steps):
the lines a scripted verifier sees and when a verification ends, the copies against the lab
chains a verifier is trained on, logprob backends' token data put end to end, and the
transformers backend's batches against a slow loop of one line per call."""

from __future__ import annotations

import math

import pytest

import real_tokenizers as rt
from prmkit.errors import PrmkitError
from prmkit.records import Record
from prmkit.verify import copies
from prmkit.verify import templates as T
from prmkit.verify.backend import Sample, Sampling, verdict_row
from prmkit.verify.prm import GenConfig, GenerativePRM
from prmkit.verify.verdicts import parse_whole

PROBLEM = "What is 2 + 3 * 4?"
STEPS = ["Step 1: 3 * 4 = 12.", "2 + 12 = 14.", "The answer is \\boxed{14}."]


class Lines:
    """A verifier that writes, after each copied step, the line ``answer(step, prompt)`` gives
    (its text and finish reason); P(correct) 0.75 or 0.25 as its verdict says."""

    def __init__(self, answer):
        self.answer, self.calls, self.heads = answer, [], []

    def sample(self, prompt, n, stop, max_tokens, sampling, seed):
        self.calls.append((prompt, tuple(stop), max_tokens, seed))
        step = int(prompt.rsplit("Step ", 1)[1].split(":")[0])
        text, finish = self.answer(step, prompt)
        return [Sample(text, finish, len(text.split()))]

    def verdict_probs(self, prompt, samples, words, ats):
        return [[0.75 if s.text[a:].startswith(words[0]) else 0.25 for a in at]
                for s, at in zip(samples, ats)]

    def decision_probs(self, prompt, heads, words):
        self.heads += heads
        return [0.5 for _ in heads]


def copying_prm(backend, template="thinkprm", **config):
    tok = rt.smollm2()
    t = T.get_template(template)
    return GenerativePRM(backend, t, T.chat_of(tok, t, "m"), tok.eos_token,
                         GenConfig(**{"copy_steps": True, "max_new_tokens": 30, **config}))


def test_prmkit_writes_each_step_and_the_verifier_the_rest_of_its_line():
    verdicts = {1: "correct", 2: "incorrect", 3: "correct"}
    backend = Lines(lambda k, _: (f" Checked. The step is \\boxed{{{verdicts[k]}}}\n", "stop"))
    prm = copying_prm(backend)
    [scores] = prm.score([PROBLEM], [STEPS])
    assert scores == [0.75, 0.25, 0.25]   # step 3 is not reviewed: it inherits step 2's verdict
    prompt = prm._whole_prompt(PROBLEM, STEPS)
    [text] = prm.verifications_of(PROBLEM, STEPS)
    assert text == ("\nStep 1: 3 * 4 = 12. Checked. The step is \\boxed{correct}\n"
                    "Step 2: 2 + 12 = 14. Checked. The step is \\boxed{incorrect}\n")
    assert [c[0] for c in backend.calls] == [prompt + "\nStep 1: 3 * 4 = 12.",
                                             prompt + "\n" + text.split("\n")[1] + "\nStep 2: 2 + 12 = 14."]
    assert all(c[1:] == (copies.LINE_STOPS, 30, 0) for c in backend.calls)   # greedy chain 0's seed
    assert backend.heads == [text.rstrip() + "\n" + T.THINKPRM_END]   # ThinkPRM's decision after it
    s = prm.stats
    assert (s.samples, s.parsed, s.tokens_generated) == (1, 1, 2 * 5)   # the verifier's words


@pytest.mark.parametrize("line2, finish, scores, capped", [
    (" The step is \\boxed{correct}\nIs the solution correct?", "stop", [0.75, 0.75, None], 0),
    (" The step is \\boxed{correct}", "eos", [0.75, 0.75, None], 0),
    (" a line that goes on and on", "length", [None] * 3, 1),
    (" no verdict on this line\n", "stop", [0.75, None, 0.75], 0),
    (" " + "many words " * 11 + "\n", "stop", [None] * 3, 1),   # 22 words: 27 in all, over 25
])
def test_the_verifier_ends_a_verification_or_its_tokens_do(line2, finish, scores, capped):
    first = " The step is \\boxed{correct}\n"
    backend = Lines(lambda k, _: (line2, finish) if k == 2 else (first, "stop"))
    prm = copying_prm(backend, max_new_tokens=25) if capped and finish == "stop" else \
        copying_prm(backend)
    assert prm.score([PROBLEM], [STEPS]) == [scores]
    assert prm.stats.capped == capped
    assert len(backend.calls) == (3 if finish == "stop" and not capped and "Is the" not in line2
                                  else 2)


def test_k_chains_each_sample_with_their_own_seed_and_genprm_is_refused():
    backend = Lines(lambda k, _: (" The step is \\boxed{correct}\n", "stop"))
    prm = copying_prm(backend, samples=2, temperature=0.7)
    assert prm.score([PROBLEM], [STEPS]) == [[0.75] * 3]
    assert sorted({c[3] for c in backend.calls}) == [0, copies.CHAIN_SEED]
    assert prm.stats.samples == 2
    with pytest.raises(PrmkitError, match="--copy-steps writes the step lines of a whole "
                                          "verification .* genprm verifies one step per turn"):
        copying_prm(backend, template="genprm")


def test_a_perfect_lab_verifier_writes_the_lab_chain_it_was_trained_on():
    """The copies are the chain's own: a verifier that writes the rest of each line of the
    training chain (prmkit train verifier --chains lab, calculator on) rebuilds the chain."""
    from prmkit.train.verifier import VerifierTrainConfig, make_chains

    problem = ("Mia has 12 apples. She buys 5 more apples. The number of apples is then "
               "multiplied by 3. How many apples does she have now?")
    steps = ["She buys 5 more, so she has 12 + 5 = 17 apples.",
             "The number is multiplied by 3: 17 * 3 = 50 apples.", "The answer is 50."]
    gold = Record(id="a", problem=problem, steps=steps, labels=[1.0, 0.0, 0.0])
    [chain], _ = make_chains(VerifierTrainConfig(base="smollm2-135m", data="d", output="o"), [gold])

    def rest_of_line(_, prompt):
        written = prompt[prompt.index("Let's verify step by step:") + len("Let's verify step by step:"):]
        assert chain.text.startswith(written), (written, chain.text)   # the copy is the chain's
        line = chain.text[len(written):].split("\n", 1)[0] + "\n"
        return line, "stop"

    prm = copying_prm(Lines(rest_of_line))
    prm.calculator = True
    assert prm.score([problem], [steps]) == [[0.75, 0.25, 0.25]]
    [text] = prm.verifications_of(problem, steps)
    assert text + T.THINKPRM_END + " No" == chain.text


def test_logprob_backends_read_the_verdicts_from_the_token_data_put_end_to_end():
    """A server's sample data (token texts, top logprobs) is joined across the lines, the copies
    as tokens with no alternatives, so verdict_row finds each verdict's token."""
    lp = {"correct": math.log(0.8), "incorrect": math.log(0.2)}
    lp2 = {"correct": math.log(0.3), "incorrect": math.log(0.7)}
    lines = {1: (["Fine", ". The step is \\boxed{", "correct", "}\n"], [{}, {}, lp, {}]),
             2: (["Wrong", ". The step is \\boxed{", "incorrect"], [{}, {}, lp2])}   # no "}\n"

    class Server(Lines):
        def sample(self, prompt, n, stop, max_tokens, sampling, seed):
            step = int(prompt.rsplit("Step ", 1)[1].split(":")[0])
            texts, tops = lines[step]
            text = "".join(texts) + ("" if step == 1 else "}\n")   # a stop the server added
            return [Sample(text, "stop", len(texts), (texts, tops))]

        def verdict_probs(self, prompt, samples, words, ats):
            return [verdict_row(*s.data, at, *words) for s, at in zip(samples, ats)]

    prm = copying_prm(Server(None))
    assert prm.score([PROBLEM], [STEPS]) == [[pytest.approx(0.8), pytest.approx(0.3),
                                              pytest.approx(0.3)]]
    chain = copies._Chain()
    chain.copy("\nStep 1: x")
    chain.extend(Sample(" y", "stop", 1, (["z"], [{}])))   # token texts that do not spell it
    assert chain.sample().data == (["\nStep 1: x", " y"], [{}, {}])
    chain.extend(Sample(" w", "stop", 1, None))   # no token data: none at all
    assert chain.sample().data is None and chain.sample().text == "\nStep 1: x y w"


def test_transformers_batches_equal_one_line_per_call(monkeypatch):
    """The transformers backend samples the lines of several solutions in one batch; each
    verification is what a slow loop of one ``sample`` call per line, per chain, gives. The
    tiny model rarely writes a newline, so lines end at a space here: many lines per chain."""
    torch = pytest.importorskip("torch")
    import tiny
    from prmkit.generate.hf import HFGenConfig, HFGenerator
    from prmkit.verify.hf import HFVerifier

    torch.set_num_threads(1)
    monkeypatch.setattr(copies, "LINE_STOPS", (" ", T.THINKPRM_END, "</think>"))
    t = T.get_template("plain")
    problems = [PROBLEM, "What is 7 - 2?", PROBLEM, "What is 3 * 3?"]
    steps = [STEPS, ["7 - 2 = 5.", "The answer is 5."], STEPS[:2], ["3 * 3 = 9.", "9.", "9."]]
    backend = HFVerifier(HFGenerator(tiny.causal_lm(), tiny.tokenizer(), HFGenConfig(dtype="float32")))
    config = GenConfig(samples=2, max_new_tokens=8, temperature=0.9, copy_steps=True)
    prm = GenerativePRM(backend, t, T.chat_of(backend.tokenizer, t, "m"), "", config)
    prm.score(problems, steps)
    sampling = prm.config.sampling
    lines = 0
    for problem, solution in zip(problems, steps):
        prompt = prm._whole_prompt(problem, solution)
        expected = []
        for k in range(2):
            text, used = "", 0
            for j, step in enumerate(solution):
                text += f"\nStep {j + 1}: {T.step_line(step)}"
                [got] = backend.sample(prompt + text, 1, copies.LINE_STOPS, 8, sampling,
                                       copies.CHAIN_SEED * k)
                text, used, lines = text + got.text, used + got.n_tokens, lines + 1
                verdicts = parse_whole(text, len(solution))
                wrong = verdicts is not None and verdicts[j] is not None and not verdicts[j].correct
                if got.finish_reason != "stop" or not got.text.endswith(" ") or wrong \
                        or used > 8:
                    break
            expected.append(text)
        assert prm.verifications_of(problem, solution) == expected
    assert lines > 2 * len(problems)   # lines after the first step were sampled


def test_a_line_s_token_texts_are_cut_to_spell_it():
    """A server may stop inside a token (at the newline of ``.\\n\\n``), add back the stop
    string its tokens lack, or return token texts that disagree with its text: the tokens kept
    spell the line, and the rest has no alternatives."""
    a, b = {"x": -0.1}, {"y": -0.2}
    assert copies.spelled("ok.\n", ["ok", ".\n\n"], [a, b]) == (["ok", ".\n"], [a, b])
    assert copies.spelled("ok.\n", ["ok", "."], [a, b]) == (["ok", ".", "\n"], [a, b, {}])
    assert copies.spelled("ok.\n", ["o", "x", "k"], [a, b, a]) == (["o", "k.\n"], [a, {}])
    assert copies.spelled("ok", ["ok", "more"], [a, b]) == (["ok"], [a])
