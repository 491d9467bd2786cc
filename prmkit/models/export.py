"""Export a prmkit PRM folder as a standard Hugging Face model folder (``prmkit export``).

Any PRM or ORM folder prmkit reads (a last-k delta on its base, a LoRA run, already merged when
it was saved, a full run, or a public PRM) becomes a folder that plain transformers, vLLM and TGI
load: full safetensors weights (the delta merged onto its base), ``config.json`` with the
architecture that reads it (``*ForTokenClassification`` for a class or value head,
``*ForCausalLM`` for label tokens), the tokenizer, ``prmkit_format.json`` (so ``prmkit score
--model OUT`` reads it as before) and a model card (``README.md``) that states the input
convention, with a transformers-only snippet that computes the step scores
(:func:`snippet`).

An implicit PRM folder (a policy and its reference) is refused: its scores need two models.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.models.folder import TRAIN_FILE, read_train_info
from prmkit.models.spec import resolve_model
from prmkit.stepformat import StepFormat

EXPORT_DTYPES = ("float32", "bfloat16")


def export_prm(model: str, output: str, dtype: str = "float32",
               step_format: str | None = None) -> dict[str, Any]:
    """Write ``model`` (a prmkit PRM folder, a default model name) as a plain HF folder at
    ``output``. Returns what was written (architecture, parameters)."""
    import torch

    from prmkit.models.backends.hf import open_hf
    from prmkit.models.reading import HFConfig

    if dtype not in EXPORT_DTYPES:
        raise PrmkitError(f"--dtype {dtype!r} is not one of {', '.join(EXPORT_DTYPES)}")
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise PrmkitError(f"{output}: already exists and is not empty")
    spec = resolve_model(model, "hf", step_format)
    path = spec.path
    if spec.kind == "implicit-prm":
        raise PrmkitError(f"model {model!r} is an implicit PRM (a policy and its reference "
                          f"model): export cannot write it as one transformers model; score it "
                          f"with prmkit")
    prm = open_hf(spec, HFConfig(dtype="float32"))
    net = prm.model.to(getattr(torch, dtype))
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".export-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # a folder like any other, not mkdtemp's private one
    try:
        net.save_pretrained(tmp, safe_serialization=True)
        prm.tokenizer.save_pretrained(tmp)
        prm.format.save(tmp)
        info = read_train_info(path)
        if info:
            with open(os.path.join(tmp, TRAIN_FILE), "w", encoding="utf-8") as f:
                json.dump(info, f, indent=2)
        arch = type(net).__name__
        with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
            f.write(card(model, output, prm.format, arch, prm.bound.bos, prm.bound.tag_id,
                         prm.bound.positive_id, prm.bound.negative_id, dtype))
        if os.path.isdir(output):
            os.rmdir(output)
        os.replace(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"architecture": arch, "parameters": sum(p.numel() for p in net.parameters()),
            "format": prm.format.name}


def card(model: str, output: str, fmt: StepFormat, arch: str, bos: list[int],
         tag_id: int | None, positive_id: int | None, negative_id: int | None,
         dtype: str) -> str:
    """The exported folder's model card: the input convention and the snippet."""
    reading = {
        "classes": f"a token-classification head: the score of a step is softmax(logits)"
                   f"[{fmt.positive_class}] at its read position",
        "value": "a one-logit head: the score of a step is sigmoid(logit) at its read position",
        "label-tokens": f"a causal LM: the score of a step is P({fmt.positive!r}) against "
                        f"P({fmt.negative!r}) (softmax over those two logits) at its read "
                        f"position",
    }[fmt.reading]
    if fmt.hazard:
        reading = (f"a hazard head: softmax(logits)[{fmt.positive_class}] at every token is "
                   f"P(no error at this token), and the score of a step is the product of these "
                   f"over the tokens 0..its read position")
    if fmt.surprisal:
        reading = ("a surprisal head: at every token, the logit of P(no error at this token) "
                   "is the two classes' difference plus the next outputs (gates) times features "
                   "of the LM's distribution at the token before (the final hidden state times "
                   "the input embeddings; see the snippet); the score of a step is the product "
                   "of these probabilities over the tokens 0..its read position")
    task = "text-generation" if fmt.reading == "label-tokens" else "token-classification"
    lines = [
        "---", "library_name: transformers", f"pipeline_tag: {task}",
        "tags: [process-reward-model, prm, prmkit]", "---", "",
        f"# PRM exported by prmkit from {model}",
        "",
        f"A process reward model: one score in [0, 1] per step of a solution (the probability "
        f"that the step is correct). Architecture `{arch}`, weights in {dtype} safetensors; "
        f"plain `transformers` loads it. prmkit reads it with `prmkit score --model THIS_FOLDER`.",
        "",
        "## Input convention",
        "",
        f"Step format `{fmt.name}` (saved in `prmkit_format.json`): {fmt.description}".rstrip(),
        "",
        f"- layout `{fmt.layout}`; the problem as `{fmt.prefix!r}`, each step as "
        f"`{fmt.step!r}`" + (f" then the tag `{fmt.tag!r}`" if fmt.tag else "")
        + f", steps separated by `{fmt.between!r}`"
        + (f", each step starting with `{fmt.marker!r}`" if fmt.marker else "")
        + ("; steps stripped of surrounding whitespace" if fmt.strip else "")
        + ("; each wrong equation of a step followed by a calculator's note, `= 9 [calculator: "
           "8]` (`prmkit.calculator.annotate`)" if fmt.calculator else "") + ";",
        f"- tokenised {'piece by piece (the head, each step, its tag and each separator on their own, ids joined)' if fmt.tokenize == 'pieces' else 'as one text'}"
        f"{', ids ' + str(bos) + ' first' if bos else ''};",
        f"- each step is read at the last token of its piece; {reading}.",
        "",
        "A solution longer than the model's maximum length is cut by prmkit, and its steps "
        "past the cut get no score.",
        "",
    ]
    code = snippet(output, fmt, arch, bos, tag_id, positive_id, negative_id)
    if code is None:
        lines += ["This layout has no short transformers-only snippet: build the inputs with "
                  "`prmkit.stepformat` (`get_format(folder).bind(tokenizer).encode(problem, "
                  "steps)`), or score with `prmkit score`.", ""]
    else:
        lines += ["## Step scores with transformers only", "", "```python", code.rstrip(),
                  "```", ""]
    return "\n".join(lines)


def snippet(output: str, fmt: StepFormat, arch: str, bos: list[int], tag_id: int | None,
            positive_id: int | None, negative_id: int | None) -> str | None:
    """Python that computes step scores with transformers alone, as prmkit does; None for the
    layouts it does not cover (``turns``, ``whole`` read at the end by offsets, and the
    calculator's notes, which are prmkit's code)."""
    if fmt.layout == "turns" or fmt.calculator or (fmt.tokenize == "whole" and fmt.read != "tag-id"):
        return None
    auto = "AutoModelForCausalLM" if fmt.reading == "label-tokens" else "AutoModelForTokenClassification"
    head = (f"    messages = {[{'role': 'system', 'content': fmt.system}] if fmt.system else []!r}\n"
            f"    messages.append({{'role': 'user', 'content': PREFIX.format(problem=problem)}})\n"
            f"    return tokenizer.apply_chat_template(messages, tokenize=False, "
            f"add_generation_prompt=True)\n"
            if fmt.layout == "chat" else "    return PREFIX.format(problem=problem)\n")
    read = {
        "classes": f"logits.softmax(-1)[:, {fmt.positive_class}]",
        "value": "logits[:, 0].sigmoid()",
        "label-tokens": f"logits[:, [{positive_id}, {negative_id}]].softmax(-1)[:, 0]",
    }[fmt.reading]
    if fmt.tokenize == "pieces":
        encode = (
            "def encode(problem, steps):\n"
            "    \"\"\"Token ids and the position read for each step (each piece tokenised alone).\"\"\"\n"
            "    ids = BOS + ids_of(head(problem))\n"
            "    read = []\n"
            "    for k, step in enumerate(steps):\n"
            "        ids += ids_of(step_text(k, step)) + ids_of(TAG)\n"
            "        read.append(len(ids) - 1)\n"
            "        if k < len(steps) - 1:\n"
            "            ids += ids_of(BETWEEN)\n"
            "    return ids, read\n")
    else:
        special = fmt.bos == "tokenizer"
        encode = (
            "def encode(problem, steps):\n"
            "    \"\"\"Token ids of the whole text, read wherever the id is the tag's.\"\"\"\n"
            "    text = head(problem) + BETWEEN.join(step_text(k, s) + TAG for k, s in enumerate(steps))\n"
            f"    ids = tokenizer(text, add_special_tokens={special})['input_ids']\n"
            "    if BOS and ids[:len(BOS)] != BOS:\n"
            "        ids = BOS + ids\n"
            f"    return ids, [i for i, t in enumerate(ids) if t == {tag_id}]\n")
    bos_line = f"BOS = {list(bos)!r}" if fmt.tokenize == "pieces" or fmt.bos == "always" else "BOS = []"
    return (
        "import torch\n"
        f"from transformers import AutoTokenizer, {auto}\n\n"
        f"path = {output!r}  # this folder, or the hub id it is uploaded to\n"
        "tokenizer = AutoTokenizer.from_pretrained(path)\n"
        f"model = {auto}.from_pretrained(path, dtype=torch.float32).eval()\n\n"
        f"PREFIX, STEP, TAG, BETWEEN = {fmt.prefix!r}, {fmt.step!r}, {fmt.tag!r}, {fmt.between!r}\n"
        f"MARKER, STRIP = {fmt.marker!r}, {fmt.strip!r}\n"
        f"{bos_line}\n\n\n"
        "def ids_of(text):\n"
        "    return tokenizer(text, add_special_tokens=False)['input_ids'] if text else []\n\n\n"
        "def head(problem):\n" + head + "\n\n"
        "def step_text(k, step):\n"
        "    step = step.strip() if STRIP else step\n"
        "    marker = MARKER.format(n=k + 1) if MARKER else ''\n"
        "    if marker and not step.startswith(marker.rstrip()):\n"
        "        step = marker + step\n"
        "    return STEP.format(step=step)\n\n\n"
        + encode + "\n\n"
        "def step_scores(problem, steps):\n"
        "    ids, read = encode(problem, steps)\n"
        "    with torch.no_grad():\n"
        + (surprisal_read(fmt.positive_class) if fmt.surprisal else
           hazard_read(fmt.positive_class) if fmt.hazard else
           "        logits = model(input_ids=torch.tensor([ids])).logits[0, read].float()\n"
           f"    return {read}.tolist()\n") + "\n\n"
        "print(step_scores('What is 2 + 3?', ['2 + 3 = 5.', 'The answer is 5.']))\n")


def hazard_read(p: int) -> str:
    """The snippet's last lines for a hazard head: every token's log P(no error), summed."""
    return ("        logits = model(input_ids=torch.tensor([ids])).logits[0].float()\n"
            f"    keep = torch.nn.functional.logsigmoid(logits[:, {p}] - logits[:, {1 - p}])\n"
            "    return keep.cumsum(0)[read].clamp(max=-1e-6).exp().tolist()\n")


def surprisal_read(p: int) -> str:
    """The snippet's last lines for a surprisal head (:mod:`prmkit.models.surprisal`)."""
    from prmkit.models.surprisal import SCALE

    return ("        logits = model(input_ids=torch.tensor([ids])).logits[0].float()\n"
            "        hidden = model.base_model(input_ids=torch.tensor([ids])).last_hidden_state[0]\n"
            "    lm = hidden[:-1].float() @ model.get_input_embeddings().weight.float().T\n"
            "    cap = getattr(model.config.get_text_config(), 'final_logit_softcapping', None)\n"
            "    lm = cap * torch.tanh(lm / cap) if cap else lm\n"
            "    logp, x = lm.log_softmax(-1), torch.tensor(ids[1:])\n"
            "    own = logp.gather(-1, x[:, None])[:, 0]\n"
            "    z = torch.stack([own, own - logp.max(-1).values, -(logp.exp() * logp).sum(-1),\n"
            f"                     (logp.argmax(-1) == x).float()], -1) / torch.tensor({list(SCALE)!r})\n"
            "    z = torch.cat([torch.zeros(1, z.shape[1]), z])   # nothing predicts the first token\n"
            f"    keep = logits[:, {p}] - logits[:, {1 - p}] + (logits[:, 2:] * z).sum(-1)\n"
            "    return torch.nn.functional.logsigmoid(keep).cumsum(0)[read].clamp(max=-1e-6).exp().tolist()\n")
