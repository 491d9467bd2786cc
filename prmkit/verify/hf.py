"""The transformers backend of a generative PRM, on CPU or GPU.

Sampling is :class:`prmkit.generate.hf.HFGenerator`'s (a prompt is prefilled once for its K
samples, its key-value cache repeated for them). The verdict probabilities are read after
sampling, teacher-forced: the prompt is read once more into a key-value cache, repeated for the
K verifications, and the K texts are read on it in one right-padded pass; at the token where a
verdict word starts, P(word) / (P(word) + P(other word)) over the first token of each word
(the texts are re-encoded, so a verdict whose word is not a token boundary there reads None,
and its verdict counts as 1 or 0). Each prompt is thus read twice rather than 2K times:
``prompt_tokens_saved`` counts the difference.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

from prmkit.generate.hf import HFGenerator, encode_prompt
from prmkit.verify.backend import GenStats, Sample, Sampling


class HFVerifier:
    """A transformers causal LM as a :class:`prmkit.verify.backend.VerifierBackend`."""

    def __init__(self, generator: HFGenerator):
        self.gen = generator
        self.model = generator.model      # what scoring.describe() reads the dtype from
        self.tokenizer = generator.tokenizer
        self.stats = GenStats()   # replaced by the PRM's own

    def sample(self, prompt: str, n: int, stop: Sequence[str], max_tokens: int,
               sampling: Sampling, seed: int | None) -> list[Sample]:
        return self.sample_many([prompt], n, stop, max_tokens, sampling, seed)[0]

    def sample_many(self, prompts: Sequence[str], n: int, stop: Sequence[str], max_tokens: int,
                    sampling: Sampling, seed: int | None) -> list[list[Sample]]:
        """The generator's batches (:class:`prmkit.generate.hf.HFGenerator`: sample k of a prompt
        seeded from (seed, prompt, k), as alone); a prompt with no room left scores nothing."""
        limit = self.gen.max_positions
        fits = [limit is None or len(self.gen.encode(p)) < limit for p in prompts]
        room = [p for p, ok in zip(prompts, fits) if ok]
        made = iter(self.gen.generate(room, n, list(stop), max_tokens, sampling.temperature,
                                      sampling.top_p, seed, top_k=sampling.top_k)
                    if room else [])
        out = []
        for ok in fits:
            if not ok:
                out.append([Sample("", "length", 0) for _ in range(n)])   # counted as cut
                continue
            outs = next(made)
            length = outs[0].prompt_tokens if outs else 0
            self.stats.prompt_tokens += length
            self.stats.prompt_tokens_saved += length * (n - 1)
            out.append([Sample(o.text, o.finish_reason, o.n_tokens) for o in outs])
        return out

    def first_token(self, word: str) -> int:
        return int(self.tokenizer(word, add_special_tokens=False)["input_ids"][0])

    def read_after(self, prompt: str, rows: Sequence[Sequence[int]]) -> tuple[Any, Any]:
        """Teacher-forced: the prompt read once into a key-value cache, repeated for ``rows``
        (token ids that follow it), then the rows in one right-padded pass; the logits after
        the prompt's last token, and each row's at each of its tokens."""
        torch = self.gen.torch
        from transformers import DynamicCache

        prompt_ids = encode_prompt(self.tokenizer, prompt)
        k, width = len(rows), max(1, max(len(r) for r in rows))
        self.stats.prompt_tokens += len(prompt_ids)
        self.stats.prompt_tokens_saved += len(prompt_ids) * (k - 1)
        device = self.gen.device
        params = inspect.signature(self.gen.model.forward).parameters
        kw = "cache" if "cache" in params else "past_key_values"
        ids = torch.full((k, width), self.gen.pad_id, dtype=torch.long)
        mask = torch.zeros((k, len(prompt_ids) + width), dtype=torch.long)
        mask[:, :len(prompt_ids)] = 1
        for r, row in enumerate(rows):
            ids[r, :len(row)] = torch.tensor(list(row), dtype=torch.long)
            mask[r, len(prompt_ids):len(prompt_ids) + len(row)] = 1
        positions = torch.arange(len(prompt_ids), len(prompt_ids) + width).expand(k, -1)
        with torch.inference_mode():
            cache = DynamicCache(config=self.gen.model.config)
            head = self.gen.model(input_ids=torch.tensor([prompt_ids], device=device),
                                  **{kw: cache}, use_cache=True).logits[0, -1].float()
            cache.batch_repeat_interleave(k)
            logits = self.gen.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                                    position_ids=positions.to(device), **{kw: cache},
                                    use_cache=True).logits.float()
        return head, logits

    def verdict_probs(self, prompt: str, samples: Sequence[Sample], words: tuple[str, str],
                      ats: Sequence[Sequence[int]]) -> list[list[float | None]]:
        torch = self.gen.torch
        yes, no = self.first_token(words[0]), self.first_token(words[1])
        texts = [self.tokenizer(s.text, add_special_tokens=False, return_offsets_mapping=True)
                 for s in samples]
        head, logits = self.read_after(prompt, [t["input_ids"] for t in texts])
        out = []
        for r, (t, at) in enumerate(zip(texts, ats)):
            starts = {s: i for i, (s, _) in enumerate(t["offset_mapping"])}
            row = []
            for a in at:
                i = starts.get(a)
                if i is None:
                    row.append(None)
                    continue
                scores = head if i == 0 else logits[r, i - 1]
                pair = torch.softmax(scores[[yes, no]], dim=0)
                row.append(float(pair[0]))
            out.append(row)
        return out

    def decision_probs(self, prompt: str, heads: Sequence[str],
                       words: tuple[str, str]) -> list[float | None]:
        """Read teacher-forced: the prompt once into a key-value cache, repeated for the heads,
        then the heads in one right-padded pass (:meth:`read_after`), each read at its last
        token; None for every head where the two words begin with the same token."""
        torch = self.gen.torch
        yes, no = self.first_token(words[0]), self.first_token(words[1])
        if yes == no or not heads:
            return [None] * len(heads)
        rows = [self.tokenizer(h, add_special_tokens=False)["input_ids"] for h in heads]
        _, logits = self.read_after(prompt, rows)
        return [float(torch.softmax(logits[r, len(row) - 1][[yes, no]], 0)[0]) if row else None
                for r, row in enumerate(rows)]


def load_hf_verifier(model: str, dtype: str = "auto", device: str = "cpu",
                     trust_remote_code: bool = False) -> HFVerifier:
    """A model folder, default model name or hub id, as a verifier backend."""
    from prmkit.generate.hf import HFGenConfig, load_hf_generator
    from prmkit.generate.prompts import END_TOKENS

    config = HFGenConfig(dtype=dtype, device=device, trust_remote_code=trust_remote_code)
    return HFVerifier(load_hf_generator(model, config, END_TOKENS))
