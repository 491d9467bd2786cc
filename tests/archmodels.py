"""Tiny random models of many architectures (no network), for the architecture matrix
(tests/test_architectures.py): each either scores exactly with prefix sharing or is scored
plain, with its reason."""

from __future__ import annotations

from typing import Any, Callable, Iterator

from tiny import tokenizer

WINDOW = 48       # a sliding window shorter than the grouped test input's sequences
CHUNK = 24


def _common() -> dict[str, Any]:
    tok = tokenizer()
    return dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
                initializer_range=0.2)


def _ends() -> dict[str, Any]:
    tok = tokenizer()
    return dict(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                bos_token_id=tok.eos_token_id, initializer_range=0.2)


def architectures() -> Iterator[tuple[str, Callable[[], Any], str]]:
    """(name, a function building the causal LM, its model_type) for every architecture of the
    matrix that this transformers has."""
    import transformers as T

    C = _common()
    V = C["vocab_size"]
    specs: list[tuple[str, str, str, Callable[[], Any]]] = [
        ("llama", "LlamaConfig", "LlamaForCausalLM", lambda: T.LlamaConfig(**C)),
        ("qwen2", "Qwen2Config", "Qwen2ForCausalLM", lambda: T.Qwen2Config(**C)),
        ("qwen2_window", "Qwen2Config", "Qwen2ForCausalLM", lambda: T.Qwen2Config(
            **C, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)),
        ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", lambda: T.Qwen3Config(**C, head_dim=8)),
        ("mistral", "MistralConfig", "MistralForCausalLM", lambda: T.MistralConfig(
            **C, sliding_window=None)),
        ("mistral_window", "MistralConfig", "MistralForCausalLM", lambda: T.MistralConfig(
            **C, sliding_window=WINDOW)),
        ("mistral_bigwindow", "MistralConfig", "MistralForCausalLM", lambda: T.MistralConfig(
            **C, sliding_window=4096)),
        ("phi3", "Phi3Config", "Phi3ForCausalLM", lambda: T.Phi3Config(**C)),
        ("gemma2", "Gemma2Config", "Gemma2ForCausalLM", lambda: T.Gemma2Config(
            **C, head_dim=8, sliding_window=4096, query_pre_attn_scalar=8)),
        ("gemma3", "Gemma3TextConfig", "Gemma3ForCausalLM", lambda: T.Gemma3TextConfig(
            **C, head_dim=8, sliding_window=WINDOW, query_pre_attn_scalar=8)),
        ("granite", "GraniteConfig", "GraniteForCausalLM", lambda: T.GraniteConfig(
            **C, logits_scaling=4.0)),
        ("cohere", "CohereConfig", "CohereForCausalLM", lambda: T.CohereConfig(
            **C, logit_scale=0.25)),
        ("gpt2", "GPT2Config", "GPT2LMHeadModel", lambda: T.GPT2Config(
            vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=4096, **_ends())),
        ("gptneo_local", "GPTNeoConfig", "GPTNeoForCausalLM", lambda: T.GPTNeoConfig(
            vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, window_size=CHUNK,
            attention_types=[[["global", "local"], 1]], max_position_embeddings=4096,
            **_ends())),
        ("falcon_alibi", "FalconConfig", "FalconForCausalLM", lambda: T.FalconConfig(
            vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, alibi=True,
            new_decoder_architecture=False, multi_query=False, **_ends())),
        ("llama4_chunked", "Llama4TextConfig", "Llama4ForCausalLM", lambda: T.Llama4TextConfig(
            **{k: v for k, v in C.items()}, head_dim=8, attention_chunk_size=CHUNK,
            num_local_experts=1, intermediate_size_mlp=64, interleave_moe_layer_step=2,
            no_rope_layers=[1, 1])),
    ]
    for name, config_cls, model_cls, config in specs:
        if hasattr(T, config_cls) and hasattr(T, model_cls):
            yield name, (lambda m=model_cls, c=config: _build(getattr(T, m), c)), config_cls


def _build(cls: Any, config: Callable[[], Any]) -> Any:
    import torch

    torch.manual_seed(0)
    return cls(config()).eval()
