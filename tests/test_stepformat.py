"""The step format: ids built piece by piece, read positions at the end of each step's tag."""

from __future__ import annotations

import json

import pytest

from prmkit.errors import PrmkitError
from prmkit.stepformat import PRESETS, StepFormat, get_format
from tiny import tokenizer

PROBLEM = "What is 2 + 3?"
STEPS = ["Step 1: 2 + 3 = 5.", "Step 2: The answer is 5.", "Step 3: \\boxed{5}"]


def decode(ids):
    return tokenizer().decode(ids, skip_special_tokens=False)


@pytest.mark.parametrize("name", list(PRESETS))
def test_prefix_ids_are_a_prefix_of_the_whole(name):
    bound = PRESETS[name].bind(tokenizer())
    whole = bound.encode(PROBLEM, STEPS)
    assert len(whole.read_positions) == len(STEPS) == whole.n_steps
    for k in range(1, len(STEPS) + 1):
        part = bound.encode(PROBLEM, STEPS[:k])
        assert part.input_ids == whole.input_ids[:whole.step_ends[k - 1]]
        assert part.read_positions == whole.read_positions[:k]
        # the read point is the last token of the prefix: nothing after it is needed
        assert part.read_positions[-1] == len(part.input_ids) - 1
    # no steps yet (a search's first expansion): the context alone, a prefix of the whole
    empty = bound.encode(PROBLEM, [])
    assert empty.read_positions == [] and empty.n_steps == 0
    assert len(empty.input_ids) < whole.read_positions[0]
    if PRESETS[name].tokenize == "pieces":
        assert empty.input_ids == whole.input_ids[:len(empty.input_ids)]
    else:   # one call on the whole text: the head's last token may merge with the first step
        n = max(len(empty.input_ids) - 1, 0)
        assert empty.input_ids[:n] == whole.input_ids[:n]


def test_math_shepherd_text_and_positions_by_hand():
    bound = PRESETS["math-shepherd"].bind(tokenizer())
    enc = bound.encode(PROBLEM, STEPS)
    want = f"{PROBLEM} {STEPS[0]} ки\n{STEPS[1]} ки\n{STEPS[2]} ки"
    assert decode(enc.input_ids) == want
    tag_id = tokenizer()(" ки", add_special_tokens=False)["input_ids"][-1]
    assert [enc.input_ids[p] for p in enc.read_positions] == [tag_id] * 3
    # the text up to each read position ends exactly at that step's tag
    for k, p in enumerate(enc.read_positions):
        text = f"{PROBLEM} " + "\n".join(f"{s} ки" for s in STEPS[:k + 1])
        assert decode(enc.input_ids[:p + 1]) == text
    assert bound.positive_id == tokenizer()("+", add_special_tokens=False)["input_ids"][0]
    assert bound.negative_id == tokenizer()("-", add_special_tokens=False)["input_ids"][0]


def test_qwen_prm_uses_the_chat_template_and_reads_extra_0():
    bound = PRESETS["qwen-prm"].bind(tokenizer())
    enc = bound.encode(PROBLEM, STEPS[:2])
    system = PRESETS["qwen-prm"].system
    want = (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{PROBLEM}<|im_end|>\n"
            f"<|im_start|>assistant\n{STEPS[0]}<extra_0>{STEPS[1]}<extra_0>")
    assert decode(enc.input_ids) == want
    extra = tokenizer().convert_tokens_to_ids("<extra_0>")
    assert [enc.input_ids[p] for p in enc.read_positions] == [extra, extra]


def test_rlhflow_steps_are_user_turns_read_where_the_reply_starts():
    bound = PRESETS["rlhflow"].bind(tokenizer())
    enc = bound.encode(PROBLEM, STEPS[:2])
    turn1 = f"<|im_start|>user\n{PROBLEM} {STEPS[0]}<|im_end|>\n<|im_start|>assistant\n"
    turn2 = f"+<|im_end|>\n<|im_start|>user\n{STEPS[1]}<|im_end|>\n<|im_start|>assistant\n"
    assert decode(enc.input_ids) == turn1 + turn2
    assert decode(enc.input_ids[:enc.read_positions[0] + 1]) == turn1


def test_trl_reads_the_last_token_of_step_plus_separator():
    enc = PRESETS["trl"].bind(tokenizer()).encode(PROBLEM, STEPS[:2])
    assert decode(enc.input_ids) == f"{PROBLEM}{STEPS[0]}\n{STEPS[1]}\n"
    assert decode(enc.input_ids[:enc.read_positions[0] + 1]) == f"{PROBLEM}{STEPS[0]}\n"


def test_truncation_keeps_only_steps_that_fit_and_never_shifts_them():
    bound = PRESETS["math-shepherd"].bind(tokenizer())
    whole = bound.encode(PROBLEM, STEPS)
    cut = whole.read_positions[1]  # step 1's tag is just outside
    enc = bound.encode(PROBLEM, STEPS, max_length=cut)
    assert enc.truncated and enc.n_steps == 3
    assert enc.read_positions == whole.read_positions[:1]
    assert enc.input_ids == whole.input_ids[:cut]


def test_label_token_that_is_several_tokens_is_an_error():
    fmt = StepFormat(name="x", step="{step} ки", positive="+", negative="answer is wrong")
    with pytest.raises(PrmkitError, match="label token"):
        fmt.bind(tokenizer())


def test_invalid_formats_are_rejected():
    with pytest.raises(PrmkitError, match="layout"):
        StepFormat(name="x", layout="nope", positive="+", negative="-")
    with pytest.raises(PrmkitError, match="step"):
        StepFormat(name="x", step="no placeholder", positive="+", negative="-")
    with pytest.raises(PrmkitError, match="positive"):
        StepFormat(name="x", reading="label-tokens")
    with pytest.raises(PrmkitError, match="unknown step format"):
        get_format("no-such-format")


def test_format_saves_and_loads_from_a_model_folder(tmp_path):
    fmt = PRESETS["prmkit"]
    fmt.save(str(tmp_path))
    assert get_format(str(tmp_path)) == fmt
    (tmp_path / "bad.json").write_text(json.dumps({"name": "x", "colour": 1}))
    with pytest.raises(PrmkitError, match="colour"):
        get_format(str(tmp_path / "bad.json"))


def test_chat_formats_need_a_chat_template():
    from copy import deepcopy

    tok = deepcopy(tokenizer())
    tok.chat_template = None
    with pytest.raises(PrmkitError, match="chat template"):
        PRESETS["qwen-prm"].bind(tok)
