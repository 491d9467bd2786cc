"""Sample completions with any Hugging Face causal LM (transformers), on CPU or GPU.

The sampling loop is prmkit's own, on the transformers forward with a KV cache, not
``model.generate``:

* every row (sample ``k`` of a prompt) has its own ``torch.Generator`` seeded by
  :func:`prmkit.generate.base.sample_seed` (``generate`` draws from the global RNG);
* each row is cut right after its first stop string, which is kept, and a finished row leaves
  the batch;
* a prompt is prefilled once for its ``n`` samples, and a prompt alone in its batch prefills
  only what it does not share with a recently kept prompt (:mod:`prmkit.generate.prefixcache`).

Prompts are sorted by length and packed ``batch_size // n`` to a batch (one prompt in chunks of
``batch_size`` samples when ``n >= batch_size``), left-padded with position ids that skip the
padding. ``dtype="auto"`` is bfloat16 where the hardware has it, else float32. In bfloat16 a
prompt's logits depend slightly on its batch neighbours; use float32 for comparisons.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import (Completion, check_sampling, check_stop, find_stop,
                                  sample_seed)
from prmkit.generate.prefixcache import PromptCache
from prmkit.models.reading import DTYPES, torch_dtype

log = logging.getLogger("prmkit")


@dataclass
class HFGenConfig:
    """How an HF policy is loaded and run."""

    dtype: str = field(default="auto", metadata={
        "help": "auto = bfloat16 where the hardware has it (GPU, AVX512-BF16 or AMX), else "
                "float32; float32 for exact comparisons"})
    device: str = field(default="cpu", metadata={"help": "cpu, cuda, cuda:1, ..."})
    batch_size: int = field(default=8, metadata={
        "help": "the most sequences (samples) decoded together in one forward pass"})
    trust_remote_code: bool = field(default=False, metadata={
        "help": "run the model repository's own Python code"})
    prefix_cache: int = field(default=16, metadata={
        "help": "prompts whose key-value cache is kept, so that a prompt beginning with one of "
                "them prefills only the rest (prmkit/generate/prefixcache.py); 0: off"})

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise PrmkitError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.batch_size < 1:
            raise PrmkitError(f"batch_size must be positive, got {self.batch_size}")
        if self.prefix_cache < 0:
            raise PrmkitError(f"prefix_cache must be 0 or more, got {self.prefix_cache}")


class HFGenerator:
    """A transformers causal LM as a :class:`prmkit.generate.base.Generator`."""

    def __init__(self, model: Any, tokenizer: Any, config: HFGenConfig | None = None,
                 stop_tokens: Sequence[str] = ()):
        import torch

        self.torch = torch
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config or HFGenConfig()
        self.device = next(model.parameters()).device
        self.end_ids = end_token_ids(model, tokenizer, stop_tokens)
        self.pad_id = next((i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0)
                            if i is not None))
        self.special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        limit = getattr(model.config, "max_position_embeddings", None)
        self.max_positions = int(limit) if limit and limit < 10**7 else None
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" in params
        self.tokens_generated = 0   # over the generator's life, for benchmarks and budgets
        # a sliding-window layer keeps only its window's keys: nothing to share there
        mc = model.config
        sliding = getattr(mc, "sliding_window", None) or "sliding_attention" in (
            getattr(mc, "layer_types", None) or ())
        self.prompts = PromptCache(self.config.prefix_cache) if self.config.prefix_cache and \
            not sliding else None

    # ------------------------------------------------------------------------------ encoding

    def encode(self, text: str) -> list[int]:
        """Token ids of a prompt string, with the BOS token the model expects (once)."""
        return encode_prompt(self.tokenizer, text)

    def decode(self, ctx: list[int], ids: list[int]) -> str:
        """The text of ``ids`` as it reads after the prompt: decoded after the prompt's last
        ordinary token ``ctx``, whose text is cut off again (SentencePiece decoders strip a
        leading space at the start of a text)."""
        kw = dict(skip_special_tokens=True, clean_up_tokenization_spaces=False)
        if ctx:
            head = self.tokenizer.decode(ctx, **kw)
            full = self.tokenizer.decode(ctx + ids, **kw)
            if full.startswith(head):
                return full[len(head):]
        return self.tokenizer.decode(ids, **kw)

    # ------------------------------------------------------------------------------ sampling

    def generate(self, prompts: Sequence[str], n: int = 1, stop: Sequence[str] = (),
                 max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                 seed: int | None = None, top_k: int = 0) -> list[list[Completion]]:
        """:meth:`prmkit.generate.base.Generator.generate`; ``top_k`` (here alone, for the
        generative PRMs' recipes): sample among the k likeliest tokens only (0: all)."""
        check_sampling(n, max_tokens, temperature, top_p, seed, top_k)
        stop = check_stop(stop)
        encoded = [self.encode(p) for p in prompts]
        for i, ids in enumerate(encoded):
            if self.max_positions is not None and len(ids) >= self.max_positions:
                raise PrmkitError(f"prompt {i} has {len(ids)} tokens; the model takes at most "
                                  f"{self.max_positions}")
        results: list[list[Completion | None]] = [[None] * n for _ in prompts]
        for batch in self._batches([len(e) for e in encoded], n):
            rows = [(i, k) for i, ks in batch for k in ks]
            seeds = [sample_seed(seed, prompts[i], k) for i, k in rows]
            reps = len(batch[0][1])
            outs = self._sample_batch([encoded[i] for i, _ in batch], reps, seeds, stop,
                                      max_tokens, temperature, top_p, top_k)
            for (i, k), out in zip(rows, outs):
                results[i][k] = out
        return results  # type: ignore[return-value]

    def _batches(self, lengths: list[int], n: int) -> list[list[tuple[int, list[int]]]]:
        """Batches of (prompt index, sample indices); every entry of a batch has as many
        samples. Prompts sorted by length, so a batch pads little."""
        order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
        size = self.config.batch_size
        if n >= size:
            return [[(i, list(range(s, min(s + size, n))))] for i in order for s in range(0, n, size)]
        per = size // n
        return [[(i, list(range(n))) for i in order[s:s + per]] for s in range(0, len(order), per)]

    def _sample_batch(self, prompts: list[list[int]], reps: int, seeds: list[int],
                      stop: list[str], max_tokens: int, temperature: float,
                      top_p: float, top_k: int = 0) -> list[Completion]:
        torch = self.torch
        from transformers import DynamicCache

        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for b, p in enumerate(prompts):
            ids[b, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[b, width - len(p):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            if len(prompts) == 1 and self.prompts is not None:   # alone: no padding
                logits, cache = self._prefill_kept(prompts[0], mask, positions)
            else:
                cache = DynamicCache(config=self.model.config)
                logits = self._forward(ids, mask, positions, cache, last_only=True)
            if reps > 1:
                cache.batch_repeat_interleave(reps)
                logits = logits.repeat_interleave(reps, dim=0)
                mask = mask.repeat_interleave(reps, dim=0)
                positions = positions.repeat_interleave(reps, dim=0)
            n_rows = len(seeds)
            prompt_of = [r // reps for r in range(n_rows)]
            budget = [self._budget(len(prompts[prompt_of[r]]), max_tokens) for r in range(n_rows)]
            ctx = [self._context(prompts[prompt_of[r]]) for r in range(n_rows)]
            gens = [torch.Generator(device="cpu").manual_seed(s) for s in seeds]
            tokens: list[list[int]] = [[] for _ in range(n_rows)]
            texts = [""] * n_rows
            done: list[Completion | None] = [None] * n_rows
            active = list(range(n_rows))
            last = positions[:, -1:]
            longest_stop = max((len(s) for s in stop), default=0)
            while True:
                picked = _sample(torch, logits, [gens[r] for r in active], temperature, top_p,
                                 top_k)
                self.tokens_generated += len(active)
                for j, r in enumerate(active):
                    tok = int(picked[j])
                    tokens[r].append(tok)
                    count = len(tokens[r])
                    prompt_len = len(prompts[prompt_of[r]])
                    if tok in self.end_ids:
                        done[r] = Completion(self.decode(ctx[r], tokens[r][:-1]), count, "eos",
                                             prompt_tokens=prompt_len)
                        continue
                    if stop:
                        before = len(texts[r])
                        texts[r] = self.decode(ctx[r], tokens[r])
                        found = find_stop(texts[r], stop, max(0, before - longest_stop - 4))
                        if found is not None:
                            done[r] = Completion(texts[r][:found[0]], count, "stop", found[1],
                                                 prompt_tokens=prompt_len)
                            continue
                    if count >= budget[r]:
                        done[r] = Completion(self.decode(ctx[r], tokens[r]), count, "length",
                                             prompt_tokens=prompt_len)
                keep = [j for j, r in enumerate(active) if done[r] is None]
                if not keep:
                    break
                if len(keep) < len(active):
                    index = torch.tensor(keep, dtype=torch.long)
                    cache.batch_select_indices(index.to(self.device))
                    mask, last, picked = mask[index], last[index], picked[index]
                    active = [active[j] for j in keep]
                mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype)], dim=1)
                last = last + 1
                logits = self._forward(picked.view(-1, 1), mask, last, cache, last_only=False)
        return done  # type: ignore[return-value]

    def _prefill_kept(self, prompt: list[int], mask: Any, positions: Any) -> tuple[Any, Any]:
        """Prefill one prompt on the kept cache of the ids it shares with a recent prompt
        (:mod:`prmkit.generate.prefixcache`); keep its own cache. Its last id always goes
        through the model: its logits start the sampling."""
        from transformers import DynamicCache

        assert self.prompts is not None
        n, kept = self.prompts.longest(prompt)
        n = min(n, len(prompt) - 1)
        cache = DynamicCache(config=self.model.config)
        for layer, (keys, values) in enumerate(kept if n and kept else []):
            cache.update(keys[:, :, :n], values[:, :, :n], layer)
        ids = self.torch.tensor([prompt[n:]], dtype=self.torch.long)
        logits = self._forward(ids, mask, positions[:, n:], cache, last_only=True)
        self.prompts.put(prompt, [(layer.keys, layer.values) for layer in cache.layers])
        self.prompts.reused += n
        self.prompts.prefilled += len(prompt) - n
        return logits, cache

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any, last_only: bool) -> Any:
        kwargs = {self._cache_kw: cache, "use_cache": True}
        if last_only and self._keep_kw:
            kwargs["logits_to_keep"] = 1
        out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                         position_ids=positions.to(self.device), **kwargs)
        logits = out.logits if hasattr(out, "logits") else out[0]
        return logits[:, -1, :].float().cpu()

    def _budget(self, prompt_len: int, max_tokens: int) -> int:
        if self.max_positions is None:
            return max_tokens
        return max(1, min(max_tokens, self.max_positions - prompt_len))

    def _context(self, prompt: list[int]) -> list[int]:
        for tok in reversed(prompt):
            if tok not in self.special_ids:
                return [tok]
        return []


def _sample(torch: Any, logits: Any, gens: list[Any], temperature: float, top_p: float,
            top_k: int = 0) -> Any:
    """One token per row: greedy at temperature 0, else from softmax(logits / T) restricted by
    :func:`_kept`, each row with its own generator."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = _kept(torch, logits / temperature, top_p, top_k).softmax(dim=-1)
    return torch.cat([torch.multinomial(probs[j], 1, generator=g) for j, g in enumerate(gens)])


def _kept(torch: Any, logits: Any, top_p: float, top_k: int = 0) -> Any:
    """``logits`` with -inf outside the ``top_k`` likeliest tokens (0: all), then outside the
    top-p nucleus of those (the order transformers' and vLLM's samplers apply them in)."""
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, index = logits.sort(dim=-1, descending=True)
        probs = ordered.softmax(dim=-1)
        # Drop a token when the ones above it already reach top_p (the first always stays).
        ordered[(probs.cumsum(dim=-1) - probs) >= top_p] = float("-inf")
        logits = torch.full_like(logits, float("-inf")).scatter(-1, index, ordered)
    return logits


# ---------------------------------------------------------------------------------------------
# tokens


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` (special tokens written in it are parsed), with the BOS token
    prepended when the tokenizer adds one and the text does not already start with it."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    bos = tokenizer.bos_token_id
    if bos is not None and (not ids or ids[0] != bos):
        probe = tokenizer("a", add_special_tokens=True)["input_ids"]
        if probe and probe[0] == bos:
            ids.insert(0, bos)
    return ids


def end_token_ids(model: Any, tokenizer: Any, extra: Sequence[str] = ()) -> set[int]:
    """Tokens that end a completion (finish_reason "eos"): the tokenizer's EOS, the model's
    generation config EOS ids, and ``extra`` tokens (such as ``<|im_end|>``) that exist in
    the vocabulary as single tokens."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if eos is not None:
        ids.update(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
    vocab = tokenizer.get_vocab()
    for token in extra:
        if token in vocab:
            ids.add(int(vocab[token]))
    return ids


# ---------------------------------------------------------------------------------------------
# loading


def load_hf_generator(policy: str, config: HFGenConfig | None = None,
                      stop_tokens: Sequence[str] = ()) -> HFGenerator:
    """A default model name (``smollm2-135m``, ``gemma3-270m``), a local folder or a hub id,
    loaded from safetensors."""
    from prmkit.models.folder import resolve_model_path

    config = config or HFGenConfig()
    path = resolve_model_path(policy)  # a missing model is reported before the heavy imports

    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch_dtype(config.dtype, config.device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=config.trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, use_safetensors=True,
                                                     trust_remote_code=config.trust_remote_code)
    except Exception as e:  # noqa: BLE001 - any loader failure is the folder's, said plainly
        from prmkit.models.folder import load_error

        raise PrmkitError(load_error(policy, path, e, "policy")) from None
    model.to(config.device)
    return HFGenerator(model, tokenizer, config, stop_tokens)
