"""The HF sampling loop on tiny models built from configs (float32, so equalities are exact).

The reference for the KV-cache loop is the slowest correct thing: recompute the whole sequence
for every new token, one sample at a time, with the same per-sample generator.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tiny  # noqa: E402

from prmkit.errors import PrmkitError  # noqa: E402
from prmkit.generate.base import cut_at_stop, sample_seed  # noqa: E402
from prmkit.generate.hf import HFGenConfig, HFGenerator, _kept, _sample, encode_prompt  # noqa: E402

PROMPTS = ["What is 2 + 3? Step 1:", "Natalia sold clips to 48 of her friends in April, and then",
           "+ -"]


def gemma_lm(seed=0):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = tiny.tokenizer()
    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                              num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                              head_dim=16, sliding_window=4,
                              layer_types=["sliding_attention", "full_attention"],
                              max_position_embeddings=512, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id, bos_token_id=None)
    return Gemma3ForCausalLM(config).eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from threads, and on a busy machine threads cost a lot."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def gen():
    return HFGenerator(tiny.causal_lm(), tiny.tokenizer(), HFGenConfig(dtype="float32", batch_size=4))


def reference(model, tokenizer, prompt, k, seed, max_tokens, temperature=1.0, top_p=1.0):
    """Token ids of sample k without a cache, batching or padding."""
    g = torch.Generator().manual_seed(sample_seed(seed, prompt, k))
    ids = encode_prompt(tokenizer, prompt)
    out = []
    with torch.inference_mode():
        for _ in range(max_tokens):
            logits = model(torch.tensor([ids + out])).logits[:, -1, :].float()
            tok = int(_sample(torch, logits, [g], temperature, top_p)[0])
            out.append(tok)
            if tok == tokenizer.eos_token_id:
                break
    return out


@pytest.mark.parametrize("make_model", [tiny.causal_lm, gemma_lm], ids=["llama", "gemma3-sliding"])
def test_cache_loop_equals_full_recompute(make_model):
    model, tok = make_model(), tiny.tokenizer()
    gen = HFGenerator(model, tok, HFGenConfig(dtype="float32", batch_size=4))
    # batch 4 with n=2: two prompts of different lengths share a batch (left padding), rows
    # finish at different times (cache rows dropped); the sliding window (4) is far exceeded.
    out = gen.generate(PROMPTS, n=2, max_tokens=12, temperature=1.0, seed=3)
    for i, prompt in enumerate(PROMPTS):
        for k in range(2):
            ref = reference(model, tok, prompt, k, 3, 12)
            c = out[i][k]
            if ref[-1] == tok.eos_token_id:
                assert c.finish_reason == "eos" and c.n_tokens == len(ref)
                ref = ref[:-1]
            else:
                assert c.finish_reason == "length" and c.n_tokens == 12
            assert c.text == gen.decode(gen._context(encode_prompt(tok, prompt)), ref)
            assert c.prompt_tokens == len(encode_prompt(tok, prompt))


def test_sample_does_not_depend_on_batch_or_n(gen):
    together = gen.generate(PROMPTS, n=3, max_tokens=10, seed=7)
    alone = gen.generate([PROMPTS[1]], n=3, max_tokens=10, seed=7)
    fewer = gen.generate([PROMPTS[1]], n=2, max_tokens=10, seed=7)
    assert [c.text for c in alone[0]] == [c.text for c in together[1]]
    assert [c.text for c in fewer[0]] == [c.text for c in together[1]][:2]
    assert gen.generate(PROMPTS, n=3, max_tokens=10, seed=7) == together
    assert [c.text for c in gen.generate(PROMPTS, n=3, max_tokens=10, seed=8)[1]] != \
        [c.text for c in together[1]]


def test_n_larger_than_batch(gen):
    big = gen.generate([PROMPTS[0]], n=6, max_tokens=6, seed=1)      # batches of 4 + 2 samples
    small = gen.generate([PROMPTS[0]], n=2, max_tokens=6, seed=1)
    assert len(big[0]) == 6 and [c.text for c in big[0][:2]] == [c.text for c in small[0]]


def test_stop_strings_are_kept_and_cut_at_the_first(gen):
    free = gen.generate(PROMPTS, n=4, max_tokens=30, seed=5)
    stop = [" ", "e"]
    cut = gen.generate(PROMPTS, n=4, stop=stop, max_tokens=30, seed=5)
    stopped = 0
    for row_free, row_cut in zip(free, cut):
        for f, c in zip(row_free, row_cut):
            text, matched = cut_at_stop(f.text, stop)
            if c.finish_reason == "stop":
                stopped += 1
                assert (c.text, c.stop) == (text, matched)
                assert c.text.endswith(c.stop) and c.n_tokens <= f.n_tokens
            else:  # no stop string in the text before it ended
                assert matched is None and c == f
    assert stopped >= 6


def test_end_token_ends_the_text(gen):
    free = gen.generate([PROMPTS[0]], n=1, max_tokens=20, seed=2)[0][0]
    ids = gen.tokenizer(free.text, add_special_tokens=False)["input_ids"]
    end = HFGenerator(gen.model, gen.tokenizer, gen.config)
    end.end_ids = {ids[3]}   # a token this sample emits: it now ends the text there
    c = end.generate([PROMPTS[0]], n=1, max_tokens=20, seed=2)[0][0]
    assert c.finish_reason == "eos" and c.stop is None
    assert free.text.startswith(c.text) and len(c.text) < len(free.text)


def test_greedy_and_tiny_top_p(gen):
    greedy = gen.generate(PROMPTS, n=3, max_tokens=8, temperature=0, seed=None)
    for row in greedy:
        assert len({c.text for c in row}) == 1
    nucleus = gen.generate(PROMPTS, n=3, max_tokens=8, temperature=1.0, top_p=1e-6, seed=4)
    assert [[c.text for c in r] for r in nucleus] == [[c.text for c in r] for r in greedy]


def test_top_p_keeps_the_nucleus():
    # probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps the first two (0.5 < 0.7 <= 0.8)
    logits = torch.log(torch.tensor([[0.15, 0.5, 0.05, 0.3]]))
    seen = {int(_sample(torch, logits, [torch.Generator().manual_seed(s)], 1.0, 0.7)[0])
            for s in range(200)}
    assert seen == {1, 3}
    seen = {int(_sample(torch, logits, [torch.Generator().manual_seed(s)], 1.0, 1.0)[0])
            for s in range(400)}
    assert seen == {0, 1, 2, 3}


def test_top_k_then_top_p_keep_what_transformers_warpers_keep():
    """The kept tokens against transformers' own TopK then TopP warpers (the order its
    ``generate`` applies them in), on random logits; on ties, as many (which of the tied
    tokens the nucleus keeps follows the sort, in both)."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    g = torch.Generator().manual_seed(0)
    rows = [torch.randn(4, 50, generator=g) * 3, torch.tensor([[2.0, 1.0, 1.0, 1.0, 0.0, -1.0]])]
    for logits in rows:
        for top_k, top_p in [(20, 0.95), (3, 1.0), (0, 0.5), (1, 0.9), (2, 0.3)]:
            theirs = logits.clone()
            if top_k:
                theirs = TopKLogitsWarper(top_k)(None, theirs)
            if top_p < 1.0:
                theirs = TopPLogitsWarper(top_p)(None, theirs)
            ours = _kept(torch, logits.clone(), top_p, top_k)
            if len(logits) > 1:
                assert torch.equal(torch.isinf(ours), torch.isinf(theirs)), (top_k, top_p)
            else:
                assert int(torch.isinf(ours).sum()) == int(torch.isinf(theirs).sum())
    # probabilities 0.5, 0.3, 0.15, 0.05: top_k 2 samples only the first two
    logits = torch.log(torch.tensor([[0.15, 0.5, 0.05, 0.3]]))
    seen = {int(_sample(torch, logits, [torch.Generator().manual_seed(s)], 1.0, 1.0, 2)[0])
            for s in range(200)}
    assert seen == {1, 3}


def test_max_tokens_and_prompt_checks(gen):
    c = gen.generate([PROMPTS[0]], n=1, max_tokens=1, seed=0)[0][0]
    assert c.n_tokens == 1
    with pytest.raises(PrmkitError, match="n must be"):
        gen.generate(PROMPTS, n=0)
    with pytest.raises(PrmkitError, match="top_p"):
        gen.generate(PROMPTS, top_p=0.0)
    with pytest.raises(PrmkitError, match="top_k"):
        gen.generate(PROMPTS, top_k=-1)
    with pytest.raises(PrmkitError, match="stop must be a list"):
        gen.generate(PROMPTS, stop="\n")


def test_encode_prompt_adds_bos_once():
    tok = tiny.tokenizer()
    assert encode_prompt(tok, "What is") == tok("What is", add_special_tokens=False)["input_ids"]
    # A tokenizer that adds BOS (as Gemma's does): once, also when the text already has it.
    from transformers import PreTrainedTokenizerFast

    with_bos = PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer, bos_token="<|im_start|>",
                                       eos_token="<|endoftext|>")
    from tokenizers import processors

    with_bos.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", with_bos.bos_token_id)])
    bos = with_bos.bos_token_id
    assert encode_prompt(with_bos, "What is")[0] == bos
    assert encode_prompt(with_bos, "<|im_start|>What is").count(bos) == 1


# ---------------------------------------------------------------------------------------------
# prompts that extend one another share their prefill (prmkit/generate/prefixcache.py)

GROWING = ["What is 2 + 3? Step 1: 2 + 3 = 5.", "What is 2 + 3? Step 1: 2 + 3 = 5. Step 2: The",
           "What is 2 + 3? Step 1: 2 + 3 = 5. Step 2: The answer is", "Natalia sold clips to 48"]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_kept_prompt_caches_give_the_same_samples(temperature):
    """Four samples per prompt on a batch of four: each prompt decoded alone, on the kept cache
    of the prompt it extends. The samples equal those of full prefills; the shared ids were
    not fed again (the chunks of one prompt, n = 8 here, reuse all but its last id)."""
    model, tok = tiny.causal_lm(), tiny.tokenizer()
    runs = {}
    for kept in (16, 0):
        g = HFGenerator(model, tok, HFGenConfig(dtype="float32", batch_size=4, prefix_cache=kept))
        runs[kept] = (g.generate(GROWING, n=8, max_tokens=6, temperature=temperature, seed=3), g)
    (a, cached), (b, plain) = runs[16], runs[0]
    assert [[c.text for c in row] for row in a] == [[c.text for c in row] for row in b]
    assert plain.prompts is None
    def shared(x, y):   # the length of the longest common prefix, written out here
        return next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))

    ids = sorted((encode_prompt(tok, p) for p in GROWING), key=len)   # the order decoded
    # per prompt: its first chunk reuses what it shares with a prompt before it, its second
    # chunk all but its last id
    want = sum(min(max([shared(x, y) for y in ids[:k]], default=0), len(x) - 1) + len(x) - 1
               for k, x in enumerate(ids))
    assert cached.prompts.reused == want
    assert cached.prompts.reused + cached.prompts.prefilled == 2 * sum(len(i) for i in ids)
    assert max(shared(ids[1], ids[2]), shared(ids[2], ids[3])) > 10   # the prompts do share


def test_sliding_window_models_keep_no_prompt_cache():
    g = HFGenerator(gemma_lm(), tiny.tokenizer(), HFGenConfig(dtype="float32", batch_size=2))
    assert g.prompts is None
