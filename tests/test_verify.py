"""Generative PRMs (prmkit/verify): prompts against the recipes' own construction on real
tokenizers, verdict parsing on hand-written verifications, the step rule, K samples, the
transformers backend's verdict probabilities against a slow full-pass reference, and the CLI."""

from __future__ import annotations

import re

import pytest

import real_tokenizers as rt
from prmkit.errors import PrmkitError
from prmkit.verify import templates as T
from prmkit.verify.backend import Sample, Sampling
from prmkit.verify.prm import GenConfig, GenerativePRM
from prmkit.verify.verdicts import Verdict, combine, parse_genprm, parse_whole, step_values

PROBLEM = "What is 2 + 3 * 4?"
STEPS = ["Step 1: 3 * 4 = 12.", "2 + 12 = 14.", "The answer is \\boxed{14}."]


# ------------------------------------------------------------------ the recipes, as they build it

def thinkprm_reference(tok, problem, steps):
    """ThinkPRM's process_example (process_verifier) and format_verification_cot_for_thinkprm
    at inference, written out as the recipe builds them."""
    new = [f"Step {i + 1}: " + re.sub(r"Step \d+:", "", s).strip() for i, s in enumerate(steps)]
    solution = "\n".join(new)
    layout = ("You are given a math problem and a proposed step-by-step solution:\n\n[Math Problem]"
              "\n\n{problem}\n\n[Solution]\n\n{solution}\n\n{_instruction}\n").strip()
    instruction = ("Review and critique each step in the proposed solution to determine whether "
                   "each step is correct. If the solution is incomplete, only verify the provided "
                   "steps.")
    content = layout.replace("{problem}", problem).replace("{solution}", solution) \
        .replace("{_instruction}", instruction)
    return tok.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                   add_generation_prompt=True) + "\nLet's verify step by step:"


def genprm_reference(tok, problem, steps, earlier):
    """GenPRM's prm_evaluate.py conversation and genprm_inference.py's build_prompt + analyze
    start for step len(earlier) + 1."""
    data = list(steps)
    data[0] = problem + "\n" + data[0]
    conv = [{"role": "system", "content": "You are a math teacher. Your task is to review and "
                                          "critique the paragraphs in solution step by step."}]
    for d in data:
        conv += [{"role": "user", "content": d}, {"content": "", "role": "assistant"}]
    for i, e in enumerate(earlier):
        conv[2 + 2 * i] = {"role": "assistant", "content": e}
    step_index = 2 + 2 * len(earlier)
    prompt = tok.apply_chat_template(conv[:step_index], tokenize=False, add_generation_prompt=False)
    if prompt.endswith(f"{tok.eos_token}\n"):
        prompt = prompt[:-len(f"{tok.eos_token}\n")]
    elif prompt.endswith(tok.eos_token):
        prompt = prompt[:-len(tok.eos_token)]
    return prompt + f"<analyze>\nLet's analyze the Paragraph {len(earlier) + 1} step by step: "


TOKENIZERS = [lambda: rt.smollm2(), lambda: rt.with_chat("qwen", "chatml"),
              lambda: rt.with_chat("gemma3", "llama31")]


@pytest.mark.parametrize("get", TOKENIZERS, ids=["smollm2", "qwen-chatml", "gemma3-llama31"])
def test_thinkprm_prompt_ids_equal_the_recipe(get):
    tok = get()
    t = T.get_template("thinkprm")
    ours = T.whole_prompt(t, T.chat_of(tok, t, "m"), PROBLEM, STEPS)
    ref = thinkprm_reference(tok, PROBLEM, STEPS)
    assert ours == ref
    assert tok(ours, add_special_tokens=False)["input_ids"] == tok(ref, add_special_tokens=False)["input_ids"]
    assert "Step 1: 3 * 4 = 12.\nStep 2: 2 + 12 = 14." in ours    # its own "Step 1:" removed


@pytest.mark.parametrize("get", TOKENIZERS, ids=["smollm2", "qwen-chatml", "gemma3-llama31"])
def test_genprm_prompt_ids_equal_the_recipe(get):
    tok = get()
    t = T.get_template("genprm")
    chat = T.chat_of(tok, t, "m")
    earlier = ["<analyze>\nLet's analyze the Paragraph 1 step by step: fine.</analyze>\n"
               "<output>\n**Judgement**: $\\boxed{Yes}$\n</output>\n", "v2"]
    for k in range(3):
        ours = T.genprm_prompt(chat, tok.eos_token, PROBLEM, STEPS, earlier[:k])
        ref = genprm_reference(tok, PROBLEM, STEPS, earlier[:k])
        assert ours == ref
        assert tok(ours, add_special_tokens=False)["input_ids"] == \
            tok(ref, add_special_tokens=False)["input_ids"]


def test_templates_refuse_what_they_cannot_do():
    with pytest.raises(PrmkitError, match="not a generative PRM template; known: thinkprm"):
        T.get_template("thinkprmm")
    tok = rt.smollm2()
    bare = type("Bare", (), {"chat_template": None})()
    for name in ("thinkprm", "genprm"):
        with pytest.raises(PrmkitError, match="has no chat template, and --format"):
            T.chat_of(bare, T.get_template(name), "m")
    plain = T.get_template("plain")
    assert T.chat_of(bare, plain, "m") is None
    assert T.whole_prompt(plain, None, PROBLEM, STEPS).endswith("\n\nVerification:\n")
    assert T.chat_of(tok, plain, "m") is not None


# ------------------------------------------------------------------ parsing, hand-written

THINK_OK = ("\nStep 1: 3 * 4 = 12, right.\n\nThe step is \\boxed{correct}\n\n"
            "Step 2: 2 + 12 = 14. Good.\n\nThe step is \\boxed{ Correct }\n\n"
            "Step 3: boxed 14.\n\nThe step is \\boxed{correct}\n")
THINK_WRONG = ("Step 1: fine. \\boxed{correct}\nStep 2: 2 + 12 is 14? Yes... wait. "
               "\\boxed{incorrect}\nStep 3: follows. \\boxed{correct}\n")


def test_thinkprm_verdicts():
    v = parse_whole(THINK_OK, 3)
    assert [x.correct for x in v] == [True, True, True]
    assert THINK_OK[v[1].at:].startswith("Correct")
    v = parse_whole(THINK_WRONG, 3)
    assert [x.correct for x in v] == [True, False, True]
    assert step_values(v) == [1.0, 0.0, 0.0]                      # after the first wrong step
    assert step_values(v, [0.9, 0.3, 0.8]) == [0.9, 0.3, 0.3]    # it scores as that step does


def test_thinkprm_broken_and_truncated():
    cut = "Step 1: ok \\boxed{correct}\nStep 2: hmm, let me see whether 2 + 12"
    v = parse_whole(cut, 3)
    assert v[0].correct and v[1] is None and v[2] is None
    assert step_values(v) == [1.0, None, None]                   # never reached: no score
    assert parse_whole("Step 1: looks right. Step 2: also right.", 3) is None   # no verdict
    assert parse_whole("", 3) is None
    assert parse_whole("\\boxed{maybe} \\boxed{14}", 3) is None
    # a revision: the step's last verdict counts; a step number that does not exist is ignored
    v = parse_whole("Step 1: \\boxed{incorrect} no wait \\boxed{correct}\nStep 7: \\boxed{incorrect}", 3)
    assert v[0].correct and v[1] is None
    # no headers: the verdicts go to the steps in order
    v = parse_whole("\\boxed{correct} then \\boxed{INCORRECT}", 3)
    assert [x and x.correct for x in v] == [True, False, None]


def test_genprm_verdicts():
    assert parse_genprm("{Yes}$\n</output>\n") == Verdict(True, 1)
    assert parse_genprm("{no}$ </output>\n") == Verdict(False, 1)
    assert parse_genprm("{Maybe}$") is None
    assert parse_genprm("") is None


def test_combine_is_the_mean_over_the_samples_that_score():
    assert combine([[1.0, 0.0, None], [0.0, 0.0, None], [1.0, None, None]], 3) == [2 / 3, 0.0, None]


# ------------------------------------------------------------------ the PRM on a scripted backend

class Scripted:
    """A backend that returns scripted verifications and P(correct) = 0.75 or 0.25."""

    def __init__(self, texts, probs=True):
        self.texts, self.probs, self.prompts, self.heads = list(texts), probs, [], []

    def sample(self, prompt, n, stop, max_tokens, temperature, seed):
        self.prompts.append(prompt)
        out = []
        for _ in range(n):
            text, finish = self.texts.pop(0)
            out.append(Sample(text, finish, 5))
        return out

    def verdict_probs(self, prompt, samples, words, ats):
        if not self.probs:
            return [[None] * len(a) for a in ats]
        return [[0.75 if s.text[a:].lower().startswith(words[0].lower()) else 0.25 for a in at]
                for s, at in zip(samples, ats)]

    def decision_probs(self, prompt, heads, words):
        assert words == (" Yes", " No")
        self.heads += heads
        return [(0.2 if "{incorrect}" in h else 0.9) if self.probs else None for h in heads]


def prm_for(name, backend, k):
    tok = rt.smollm2()
    t = T.get_template(name)
    return GenerativePRM(backend, t, T.chat_of(tok, t, "m"), tok.eos_token,
                         GenConfig(samples=k, max_new_tokens=50))


def test_k_samples_shares_and_the_parse_rate():
    backend = Scripted([(THINK_OK, "eos"), (THINK_WRONG, "stop"), ("no verdict", "eos"),
                        ("Step 1: \\boxed{correct}", "length")], probs=False)
    prm = prm_for("thinkprm", backend, 4)
    assert prm.score([PROBLEM], [STEPS]) == [[1.0, 0.5, 0.5]]
    s = prm.stats
    assert (s.samples, s.parsed, s.capped, s.unparsable) == (4, 2, 1, 1)
    assert "parse rate 50.0% (2 of 4" in s.summary()


def test_logprobs_are_the_score_where_given():
    prm = prm_for("thinkprm", Scripted([(THINK_OK, "eos"), (THINK_WRONG, "eos")]), 2)
    assert prm.score([PROBLEM], [STEPS]) == [[0.75, 0.5, 0.5]]


def test_nothing_parsed_is_null_never_zero():
    prm = prm_for("plain", Scripted([("I think so.", "eos")]), 1)
    assert prm.score([PROBLEM], [STEPS]) == [[None, None, None]]


def test_genprm_chains_verify_each_step_after_their_own_verifications():
    out = "{Yes}$\n</output>\n"
    # step 1: both chains from one prompt, then each verdict; then each chain's analysis of
    # step k, then their verdicts
    texts = [("a1</analyze>\n", "stop"), ("b1</analyze>\n", "stop"), (out, "stop"), (out, "stop"),
             ("a2</analyze>\n", "stop"), ("b2 cut", "length"), ("{No}$\n</output>\n", "stop"),
             ("a3</analyze>\n", "stop"), ("b3</analyze>\n", "stop"),
             ("{Yes}$\n</output>\n", "stop"), ("{Maybe}</output>\n", "stop")]
    backend = Scripted(texts, probs=False)
    prm = prm_for("genprm", backend, 2)
    assert prm.score([PROBLEM], [STEPS]) == [[1.0, 0.0, 1.0]]
    assert "Paragraph 2" in backend.prompts[3] and "a1</analyze>" in backend.prompts[3]
    assert "b1</analyze>" in backend.prompts[4] and "a1" not in backend.prompts[4]
    assert (prm.stats.samples, prm.stats.parsed, prm.stats.capped, prm.stats.unparsable) == (6, 4, 1, 1)


def test_a_verifier_with_the_calculator_reads_its_notes_and_keeps_the_record_s_steps():
    """calculator=True (a verifier trained with it): the prompt shows each wrong equation with
    the calculator's note, for a whole verification and for GenPRM's turns; the texts it wrote
    are kept under the steps as the record has them."""
    steps = ["2 + 3 = 6.", "6 * 2 = 12.", "The answer is 12."]
    shown = "2 + 3 = 6 [calculator: 5]."
    backend = Scripted([(THINK_OK, "eos")], probs=False)
    tok = rt.smollm2()
    t = T.get_template("thinkprm")
    prm = GenerativePRM(backend, t, T.chat_of(tok, t, "m"), tok.eos_token,
                        GenConfig(samples=1, max_new_tokens=50), calculator=True)
    prm.score([PROBLEM], [steps])
    assert f"Step 1: {shown}" in backend.prompts[0] and "6 * 2 = 12." in backend.prompts[0]
    assert prm.verifications_of(PROBLEM, steps) == [THINK_OK]
    plain = Scripted([(THINK_OK, "eos")], probs=False)
    prm_for("thinkprm", plain, 1).score([PROBLEM], [steps])
    assert "[calculator:" not in plain.prompts[0]
    g = Scripted([("a</analyze>\n", "stop"), ("{Yes}$\n</output>\n", "stop")] * 3, probs=False)
    gt = T.get_template("genprm")
    GenerativePRM(g, gt, T.chat_of(tok, gt, "m"), tok.eos_token,
                  GenConfig(samples=1, max_new_tokens=50), calculator=True).score([PROBLEM], [steps])
    assert shown in g.prompts[0]


def test_two_records_with_the_same_solution_both_keep_what_was_written():
    backend = Scripted([(THINK_OK, "eos")] * 3, probs=False)
    prm = prm_for("thinkprm", backend, 1)
    prm.score([PROBLEM, PROBLEM], [STEPS, STEPS])
    assert prm.verifications_of(PROBLEM, STEPS) == prm.verifications_of(PROBLEM, STEPS) == [THINK_OK]
    prm.score([PROBLEM], [STEPS[:1]])          # the next call forgets the last one's texts
    assert prm.verifications_of(PROBLEM, STEPS) == []


def test_gen_config_refuses_bad_values():
    with pytest.raises(PrmkitError, match="--samples"):
        GenConfig(samples=0)


def test_verdict_row_reads_the_two_words_and_bounds_a_missing_one_by_hand():
    """P(correct) from a server's top logprobs at the verdict token, worked by hand: both words
    listed, .6 / (.6 + .2) = .75; "incorrect" not among the alternatives, its probability is
    bounded by the least listed (.1, GenPRM's rule): .6 / .7; neither listed, or no token
    starting at the offset: None."""
    import math

    from prmkit.verify.backend import verdict_row

    texts = ["\\boxed{", "correct", "}"]
    at = [len("\\boxed{")]
    both = {"correct": math.log(0.6), "incorrect": math.log(0.2)}
    one = {"correct": math.log(0.6), "x": math.log(0.3), "y": math.log(0.1)}
    neither = {"x": math.log(0.9), "y": math.log(0.1)}
    for top, want in ((both, 0.75), (one, 0.6 / 0.7), (neither, None)):
        got = verdict_row(texts, [{}, top, {}], at, "correct", "incorrect")[0]
        assert got == (None if want is None else pytest.approx(want))
    assert verdict_row(texts, [{}, both, {}], [3], "correct", "incorrect") == [None]


def test_the_solution_level_score_is_thinkprm_s_decision_after_its_question():
    """ThinkPRM's P(yes): each verification, without the stop string it ended at, then
    ``Is the solution correct?`` on its own line; the mean over those that did not hit the
    cap, worked by hand: (.9 + .2) / 2. None for GenPRM's per-step template, and where nothing
    can be read."""
    backend = Scripted([(THINK_OK + "Is the solution correct?", "stop"),
                        (THINK_WRONG + "Step 4:", "stop"), ("Step 1: \\boxed{correct}", "length")])
    prm = prm_for("thinkprm", backend, 3)
    prm.score([PROBLEM], [STEPS])
    assert prm.outcome_of(PROBLEM, STEPS) == pytest.approx((0.9 + 0.2) / 2)
    assert backend.heads == [THINK_OK.rstrip() + "\nIs the solution correct?",
                             THINK_WRONG.rstrip() + "\nIs the solution correct?"]
    blind = prm_for("thinkprm", Scripted([(THINK_OK, "eos")], probs=False), 1)
    blind.score([PROBLEM], [STEPS])
    assert blind.outcome_of(PROBLEM, STEPS) is None


def test_scoring_keeps_the_texts_and_the_solution_level_score_with_each_record():
    from prmkit.records import Record
    from prmkit.scoring import score_records

    rec = Record(id="a", problem=PROBLEM, steps=list(STEPS))
    prm = prm_for("thinkprm", Scripted([(THINK_WRONG, "stop")]), 1)
    score_records([rec], prm, chunk=None)
    assert rec.meta["verifications"] == [THINK_WRONG]
    assert rec.meta["outcome_score"] == pytest.approx(0.2)
    assert rec.step_scores == [0.75, 0.25, 0.25]


def test_a_ray_worker_keeps_what_the_verifier_wrote_with_each_record():
    """``--ray``: each worker's records carry the texts and the solution-level score (the
    driver copies them from the records it gets back)."""
    from prmkit.records import Record
    from prmkit.scoring import score_batch

    rec = Record(id="a", problem=PROBLEM, steps=list(STEPS))
    prm = prm_for("thinkprm", Scripted([(THINK_OK, "eos")]), 1)
    [got, note] = list(score_batch([rec], prm))
    assert got.meta["verifications"] == [THINK_OK] and got.meta["outcome_score"] == pytest.approx(0.9)
    assert "described" in note


def test_each_template_samples_at_its_recipe_s_temperature_unless_told():
    """GenPRM's genprm_inference.py samples at 0.6, ThinkPRM's thinkprm_api.py at 0.7; a
    trained folder's saved setting, then --temperature, win over the recipe's."""
    assert prm_for("genprm", Scripted([]), 1).config.temperature == 0.6
    assert prm_for("thinkprm", Scripted([]), 1).config.temperature == 0.7
    assert prm_for("plain", Scripted([]), 1).config.temperature == 0.7
    genprm = T.get_template("genprm")
    assert GenConfig().resolved({"temperature": 0.0}, genprm).temperature == 0.0
    assert GenConfig(temperature=1.0).resolved({"temperature": 0.0}, genprm).temperature == 1.0
    # and GenPRM's top_p 0.95 and top_k 20; the others sample from the whole distribution
    assert prm_for("genprm", Scripted([]), 1).config.sampling == Sampling(0.6, 0.95, 20)
    assert prm_for("thinkprm", Scripted([]), 1).config.sampling == Sampling(0.7, 1.0, 0)
    assert GenConfig(top_k=0, top_p=1.0).resolved(None, genprm).sampling == Sampling(0.6, 1.0, 0)
    for bad in ({"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -1}):
        with pytest.raises(PrmkitError, match="--top-"):
            GenConfig(**bad)


@pytest.mark.parametrize("option", [["--temperature", "0.3"], ["--top-k", "20"],
                                    ["--samples", "4"], ["--top-p", "0.9"],
                                    ["--copy-steps"], ["--no-copy-steps"]])
def test_a_generative_option_without_the_generative_backend_is_refused(tmp_path, capsys, option):
    from prmkit.cli import main

    data = tmp_path / "r.jsonl"
    data.write_text('{"id": "a", "problem": "1 + 1?", "steps": ["2."]}\n')
    assert main(["score", "--model", "default", "--input", str(data),
                 "--output", str(tmp_path / "o.jsonl")] + option) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"prmkit: {option[0]} is read only with --backend generative (it sets how a " \
                  "generative PRM samples)"


@pytest.mark.parametrize("option", [["--token-budget", "100"], ["--max-length", "64"],
                                    ["--per-prefix"]])
def test_a_discriminative_option_with_the_generative_backend_is_refused(tmp_path, capsys, option):
    from prmkit.cli import main

    data = tmp_path / "r.jsonl"
    data.write_text('{"id": "a", "problem": "1 + 1?", "steps": ["2."]}\n')
    assert main(["score", "--backend", "generative", "--model", "smollm2-135m", "--input",
                 str(data), "--output", str(tmp_path / "o.jsonl")] + option) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"prmkit: {option[0]} is read only by a discriminative PRM (--backend hf or " \
                  "vllm); a generative PRM's cost is set by --samples and --max-new-tokens"
    assert not (tmp_path / "o.jsonl").exists()
