"""Tiny models and a tokenizer built locally from configs, for fast exact tests (no network)."""

from __future__ import annotations

import functools

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

CORPUS = [
    "What is 2 + 3? Step 1: 2 + 3 = 5. ки\nStep 2: The answer is 5. ки",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May.",
    "+ - + - ки ки <extra_0> The answer is \\boxed{10}. 1/2 = 0.5 \n\n",
    "Let's call the price of a pencil p and the price of a jumbo eraser e.",
]


@functools.lru_cache(maxsize=None)
def tokenizer():
    """A byte-level BPE tokenizer (vocab ~400) with ChatML specials and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<extra_0>"]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


def word_tokenizer(first: str, last: str, **specials: str):
    """A word-level tokenizer whose offsets and ids are known by hand: "x", "=", "1", newline,
    space, "y" and "2." are tokens of their own (ids 1 to 7), ``first`` is id 0 and ``last``
    id 8; ``specials`` name the special tokens (unk_token is [UNK], one of the two ends)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate([first, "x", "=", "1", "\n", " ", "y", "2.", last])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\n| "), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", **specials)


def llama_config(**kw):
    from transformers import LlamaConfig

    tok = tokenizer()
    return LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=8192, pad_token_id=tok.pad_token_id,
                       eos_token_id=tok.eos_token_id, bos_token_id=None, **kw)


def causal_lm(seed: int = 0, **config):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(llama_config(**config)).eval()


def token_classifier(num_labels: int = 2, seed: int = 0):
    import torch
    from transformers import LlamaForTokenClassification

    torch.manual_seed(seed)
    return LlamaForTokenClassification(llama_config(num_labels=num_labels)).eval()


class ClosingBound:
    """A bound step format whose ids after the last step depend on which step is last (like a
    chat layout that closes the assistant turn): a prefix's ids are then not a prefix of its
    continuations', and a scorer that reuses caches must fall back (search, shared prefixes)."""

    def __init__(self, bound):
        self.bound = bound

    def __getattr__(self, name):
        return getattr(self.bound, name)

    def encode(self, problem, steps, max_length=None):
        enc = self.bound.encode(problem, steps, max_length)
        if steps:
            end = self.bound.tokenizer("<|im_end|>", add_special_tokens=False)["input_ids"]
            enc.input_ids = enc.input_ids + end
        return enc
