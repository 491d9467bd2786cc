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


def ids(text):
    return tokenizer()(text)["input_ids"]


def test_math_shepherd_text_and_positions_by_hand():
    bound = PRESETS["math-shepherd"].bind(tokenizer())
    enc = bound.encode(PROBLEM, STEPS)
    want = f"{PROBLEM} {STEPS[0]} ки\n{STEPS[1]} ки\n{STEPS[2]} ки"
    assert enc.input_ids == ids(want)   # one call on the whole text: ids, not decoded text
    tag_id = tokenizer()(" ки", add_special_tokens=False)["input_ids"][-1]
    assert bound.tag_id == tag_id
    assert enc.read_positions == [i for i, t in enumerate(ids(want)) if t == tag_id]
    # the text up to each read position ends exactly at that step's tag
    for k, p in enumerate(enc.read_positions):
        text = f"{PROBLEM} " + "\n".join(f"{s} ки" for s in STEPS[:k + 1])
        assert enc.input_ids[:p + 1] == ids(text)
    assert bound.positive_id == tokenizer()("+", add_special_tokens=False)["input_ids"][0]
    assert bound.negative_id == tokenizer()("-", add_special_tokens=False)["input_ids"][0]


def test_math_shepherd_adds_step_k_where_a_step_lacks_it():
    """Its model was trained on 'Step k: ... ки' lines (the model card's text); ProcessBench's
    steps have no such marker, Math-Shepherd's own data does (kept by the converter)."""
    bound = PRESETS["math-shepherd"].bind(tokenizer())
    bare = ["2 + 3 = 5. ", "The answer is 5."]
    enc = bound.encode(PROBLEM, bare)
    assert enc.input_ids == ids(f"{PROBLEM} Step 1: 2 + 3 = 5. ки\nStep 2: The answer is 5. ки")
    assert bound.encode(PROBLEM, STEPS[:2]).input_ids == ids(f"{PROBLEM} {STEPS[0]} ки\n{STEPS[1]} ки")
    # a marker of another number is the step's own text: the right one is added before it
    assert bound.encode(PROBLEM, ["Step 2: x"]).input_ids == ids(f"{PROBLEM} Step 1: Step 2: x ки")
    assert "Step k: " in PRESETS["math-shepherd"].description


def test_a_step_holding_the_tag_is_read_once_in_scoring_and_training(caplog):
    """Math-Shepherd's recipe reads every tag id, so a step holding ' ки' would be read twice;
    prmkit reads each step once at the tag it adds, warns, and training labels the same
    positions the scorer reads."""
    import logging

    from prmkit.records import Record
    from prmkit.train.prm import step_examples

    bound = PRESETS["math-shepherd"].bind(tokenizer())
    steps = ["Step 1: 2 + 3 = 5. ки", "Step 2: ки The answer is 5."]
    with caplog.at_level(logging.WARNING, logger="prmkit"):
        enc = bound.encode(PROBLEM, steps)
    assert "holds the tag" in caplog.text and "step 0" in caplog.text and PROBLEM[:20] in caplog.text
    assert len(enc.read_positions) == 2
    whole = ids(f"{PROBLEM} Step 1: 2 + 3 = 5. ки ки\nStep 2: ки The answer is 5. ки")
    tags = [i for i, t in enumerate(whole) if t == bound.tag_id]
    assert enc.input_ids == whole and len(tags) == 4   # the recipe would read 4 positions
    assert enc.read_positions == [tags[1], tags[3]]      # prmkit: the tag after each step
    examples, _ = step_examples([Record("r", PROBLEM, steps, labels=[1.0, 0.0])], bound,
                                max_length=512, soft=False, until_first_error=False)
    assert examples[0].read_positions == enc.read_positions
    for name in ("qwen-prm", "prmkit"):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="prmkit"):
            tag = "<extra_0>" if name == "qwen-prm" else "ки"
            enc = PRESETS[name].bind(tokenizer()).encode(PROBLEM, [f"a {tag} b", "c"])
        assert "holds the tag" in caplog.text and len(enc.read_positions) == 2


def test_saved_formats_without_the_new_fields_tokenise_piece_by_piece():
    from prmkit.models.pypi import DEFAULT_PRM_DIR

    fmt = get_format(DEFAULT_PRM_DIR)
    assert (fmt.tokenize, fmt.read, fmt.bos, fmt.tag, fmt.marker) == ("pieces", "end", "tokenizer", "", "")
    assert StepFormat.from_dict({"name": "x", "step": "{step} ки", "positive": "+",
                                 "negative": "-"}).tokenize == "pieces"


def test_qwen_prm_uses_the_chat_template_and_reads_extra_0():
    bound = PRESETS["qwen-prm"].bind(tokenizer())
    enc = bound.encode(PROBLEM, STEPS[:2])
    system = PRESETS["qwen-prm"].system
    want = (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{PROBLEM}<|im_end|>\n"
            f"<|im_start|>assistant\n{STEPS[0]}<extra_0>{STEPS[1]}<extra_0>")
    assert enc.input_ids == ids(want)
    extra = tokenizer().convert_tokens_to_ids("<extra_0>")
    assert [enc.input_ids[p] for p in enc.read_positions] == [extra, extra]


def test_rlhflow_steps_are_user_turns_read_where_the_reply_starts():
    bound = PRESETS["rlhflow"].bind(tokenizer())
    enc = bound.encode(PROBLEM, STEPS[:2])
    turn1 = f"<|im_start|>user\n{PROBLEM} {STEPS[0]}<|im_end|>\n<|im_start|>assistant\n"
    turn2 = f"+<|im_end|>\n<|im_start|>user\n{STEPS[1]}<|im_end|>\n<|im_start|>assistant\n"
    whole = ids(turn1 + turn2 + "+<|im_end|>\n")   # the recipe renders the last '+' too
    assert enc.input_ids == whole[:len(ids(turn1 + turn2))]
    assert enc.read_positions == [len(ids(turn1)) - 1, len(ids(turn1 + turn2)) - 1]


def test_trl_reads_the_last_token_of_step_plus_separator():
    enc = PRESETS["trl"].bind(tokenizer()).encode(PROBLEM, STEPS[:2])
    assert decode(enc.input_ids) == f"{PROBLEM}{STEPS[0]}\n{STEPS[1]}\n"
    # each piece tokenised alone, the separator too (TRL's tokenize_row)
    alone = [tokenizer()(t, add_special_tokens=False)["input_ids"]
             for t in (PROBLEM, STEPS[0], "\n", STEPS[1], "\n")]
    assert enc.input_ids == [x for piece in alone for x in piece]
    assert enc.read_positions == [sum(map(len, alone[:3])) - 1, sum(map(len, alone)) - 1]


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


class NoOffsets:
    """A tokenizer without offset mappings (a slow tokenizer)."""

    is_fast = False

    def __init__(self, tok):
        self.tok = tok

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def __call__(self, *args, **kwargs):
        kwargs.pop("return_offsets_mapping", None)
        return self.tok(*args, **kwargs)


@pytest.mark.parametrize("name", [n for n, f in PRESETS.items() if f.tokenize == "whole"])
def test_whole_text_formats_read_the_same_without_offset_mappings(name):
    fast = PRESETS[name].bind(tokenizer()).encode(PROBLEM, STEPS)
    slow = PRESETS[name].bind(NoOffsets(tokenizer())).encode(PROBLEM, STEPS)
    assert (slow.input_ids, slow.read_positions) == (fast.input_ids, fast.read_positions)
