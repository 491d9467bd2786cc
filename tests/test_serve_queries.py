"""How /get_reward cuts queries into (problem, steps) and turns step scores into rewards
(prmkit/serve/queries.py), and the server's settings (prmkit/serve/config.py)."""

from __future__ import annotations

import math

import pytest

from prmkit.errors import PrmkitError
from prmkit.serve.config import ServeConfig, is_loopback
from prmkit.serve.queries import (PAD_SCORE, problem_from_prompt, rewards_from_scores,
                                  split_query, strip_end_tokens)

CHATML_PROMPT = ("<|im_start|>system\nSolve it.<|im_end|>\n<|im_start|>user\nWhat is 1+1?"
                 "<|im_end|>\n<|im_start|>assistant\n")
LLAMA3_PROMPT = ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 1+1?"
                 "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_plain_query_first_piece_is_the_problem():
    assert split_query("1+1?\n\n1+1=2\n\nThe answer is 2") == ("1+1?", ["1+1=2", "The answer is 2"])
    assert split_query("1+1?\n1+1=2\nThe answer is 2", None, "lines") == \
        ("1+1?", ["1+1=2", "The answer is 2"])
    assert split_query("only one piece") == ("", ["only one piece"])
    assert split_query("   ") == ("", [])


def test_prompt_prefix_is_cut_off_and_chat_markup_removed():
    query = CHATML_PROMPT + "1+1=2\nThe answer is 2<|im_end|><|endoftext|>"
    assert split_query(query, CHATML_PROMPT) == ("What is 1+1?", ["1+1=2", "The answer is 2"])
    # a BOS before the prompt (the prompt text lacks it) is skipped
    assert split_query("<s>Q: 2+2?\nA: 2+2=4\nThe answer is 4</s>", "Q: 2+2?\nA:", "lines") == \
        ("Q: 2+2?\nA:", ["2+2=4", "The answer is 4"])
    with pytest.raises(PrmkitError, match="does not contain its prompt"):
        split_query("something else", "the prompt")


def test_chat_query_without_prompts_is_cut_at_the_assistant_header():
    query = LLAMA3_PROMPT + "1+1=2\n\nThe answer is 2<|eot_id|>"
    assert split_query(query) == ("What is 1+1?", ["1+1=2", "The answer is 2"])
    gemma = "<start_of_turn>user\nWhat is 3?<end_of_turn>\n<start_of_turn>model\nIt is 3.<end_of_turn>"
    assert split_query(gemma) == ("What is 3?", ["It is 3."])
    assert split_query(CHATML_PROMPT + "<|im_end|>") == ("What is 1+1?", [])  # empty response


def test_helpers():
    assert problem_from_prompt("  plain problem \n") == "plain problem"
    assert problem_from_prompt(CHATML_PROMPT) == "What is 1+1?"
    assert strip_end_tokens("x <|im_end|>\n<|endoftext|> ") == "x"
    assert strip_end_tokens("<|im_end|> in the middle <|im_end|>") == "<|im_end|> in the middle"


def test_rewards_hand_worked():
    out = rewards_from_scores([[0.9, 0.5, 0.8], [], [0.6, None]], "min", width=4)
    assert out["rewards"] == [0.5, 0.0, 0.6] and out["scores"] == out["rewards"]
    logs = out["extra_logs"]
    assert logs["prm_min"] == [0.5, 0.0, 0.6]
    assert logs["prm_last"] == [0.8, 0.0, 0.6]          # nulls are dropped first
    assert math.isclose(logs["prm_prod"][0], 0.9 * 0.5 * 0.8)
    assert math.isclose(logs["prm_mean"][0], (0.9 + 0.5 + 0.8) / 3)
    assert logs["prm_num_steps"] == [3, 0, 2]
    assert out["step_scores_padded"] == [[0.9, 0.5, 0.8, PAD_SCORE], [PAD_SCORE] * 4,
                                         [0.6, PAD_SCORE, PAD_SCORE, PAD_SCORE]]
    # one number per query in every extra_logs value (OpenRLHF's per-sample metrics)
    assert all(len(v) == 3 and all(isinstance(x, (int, float)) for x in v) for v in logs.values())
    assert rewards_from_scores([[0.9, 0.5]], "last", 2)["rewards"] == [0.5]
    with pytest.raises(PrmkitError):
        rewards_from_scores([[0.1, 0.2, 0.3]], "min", width=2)
    with pytest.raises(PrmkitError):
        rewards_from_scores([[0.1]], "max", width=2)


def test_loopback_and_token_rules(monkeypatch):
    monkeypatch.delenv("PRMKIT_SERVE_TOKEN", raising=False)
    monkeypatch.delenv("PRMKIT_TOKEN", raising=False)
    for host in ("127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.org", "192.168.1.2"):
        assert not is_loopback(host), host
    assert ServeConfig(host="127.0.0.1").token is None
    with pytest.raises(PrmkitError, match="needs a token"):
        ServeConfig(host="0.0.0.0")
    assert ServeConfig(host="0.0.0.0", token="s3cret").token == "s3cret"
    monkeypatch.setenv("PRMKIT_SERVE_TOKEN", "from-env")   # the alias
    assert ServeConfig(host="0.0.0.0").token == "from-env"
    monkeypatch.setenv("PRMKIT_TOKEN", "one-name")          # the name clients read wins
    assert ServeConfig(host="0.0.0.0").token == "one-name"
    with pytest.raises(PrmkitError, match="whitespace"):
        ServeConfig(token="two words")


def test_config_limits_are_checked():
    from prmkit.serve.batcher import BatcherConfig

    for bad in ({"max_steps": 0}, {"max_body_bytes": 0}, {"max_tokens": 1}, {"port": 70000},
                {"step_rule": "sentences"}, {"reward": "max"}, {"graceful_timeout": -1},
                {"max_solutions": 10, "batching": BatcherConfig(max_queue=5)}):
        with pytest.raises(PrmkitError):
            ServeConfig(**bad)
