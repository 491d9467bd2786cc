"""The generate job: records, resuming after a kill (same records as one uninterrupted run),
problem sources, and the `prmkit generate` command on a tiny model folder."""

from __future__ import annotations

import json

import pytest

from prmkit import cli
from prmkit.errors import PrmkitError
from prmkit.generate.fake import FakeGenerator, count_tokens
from prmkit.generate.prompts import STYLES, Prompter
from prmkit.generate.run import GenerateConfig, Problem, read_problems, run_generate
from prmkit.records import read_records

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
GSM8K = [{"question": f"Problem {i}: what is {i} + {i}?",
          "answer": f"{i} + {i} = <<{i}+{i}={2 * i}>>{2 * i}\n#### {2 * i}"} for i in range(5)]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


class Killed(Exception):
    pass


def kill_after(k):
    def hook(done):
        if done >= k:
            raise Killed()
    return hook


# --------------------------------------------------------------------------------- records


def test_records_of_a_scripted_policy(tmp_path):
    chat = Prompter(STYLES["chat"], CHATML)
    problems = [Problem("p1", "What is 2 + 2?", "4"), Problem("p2", "What is 1 + 1?", None)]
    answers = {0: "2 + 2 = 4.\nThe answer is 4.", 1: "2 + 2 = 5.\n\nThe answer is 5.", 2: ""}
    fake = FakeGenerator(lambda prompt, k: answers[k])
    out = str(tmp_path / "c.jsonl")
    summary = run_generate(problems, fake, chat, out, GenerateConfig(n=3, seed=1), policy="fake",
                           backend="fake", progress=False)
    recs = read_records(out)
    assert [r.id for r in recs] == ["p1-0", "p1-1", "p1-2", "p2-0", "p2-1", "p2-2"]
    r0, r1, r2 = recs[:3]
    assert r0.group == "p1" and r0.steps == ["2 + 2 = 4.", "The answer is 4."]
    assert (r0.answer, r0.reference, r0.is_correct) == ("4", "4", True)
    assert r1.steps == ["2 + 2 = 5.", "The answer is 5."] and r1.is_correct is False
    assert r0.meta == {"policy": "fake", "backend": "fake", "seed": 1, "temperature": 0.7,
                       "top_p": 1.0, "max_tokens": 512, "sample": 0,
                       "prompt_tokens": count_tokens(chat.prompt("What is 2 + 2?")),
                       "completion_tokens": 9 + 1, "finish_reason": "eos"}   # 9 words + the end
    # an empty completion stays, as one empty step that is not correct
    assert r2.steps == [""] and r2.meta["empty"] is True and r2.is_correct is False
    assert recs[3].is_correct is None and recs[3].reference is None
    assert summary.records == 6 and summary.accuracy is None   # p2 has no reference
    assert len(fake.calls) == 2                                  # chunk=1: a call per problem


def test_accuracy_and_pass_at_n(tmp_path):
    fake = FakeGenerator(lambda prompt, k: f"The answer is {k}.")
    problems = [Problem("a", "x?", "1"), Problem("b", "y?", "7")]
    s = run_generate(problems, fake, Prompter(STYLES["few-shot"]), str(tmp_path / "o.jsonl"),
                     GenerateConfig(n=4), progress=False)
    assert (s.accuracy, s.pass_at_n) == (1 / 8, 1 / 2)
    assert "accuracy 12.5%, pass@4 50.0%" in s.line(4)


# --------------------------------------------------------------------------------- resuming


@pytest.fixture(scope="module")
def tiny_policy():
    torch = pytest.importorskip("torch")
    tiny = pytest.importorskip("tiny")
    from prmkit.generate.hf import HFGenConfig, HFGenerator

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield (HFGenerator(tiny.causal_lm(), tiny.tokenizer(), HFGenConfig(dtype="float32", batch_size=4)),
           Prompter(STYLES["chat"], tiny.CHATML))
    torch.set_num_threads(threads)


@pytest.mark.parametrize("chunk", [1, 2])
def test_killed_and_resumed_equals_uninterrupted(tmp_path, tiny_policy, chunk):
    gen, prompter = tiny_policy
    problems = read_problems(write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K), "gsm8k")
    config = GenerateConfig(n=3, max_tokens=12, temperature=1.0, seed=11, chunk=chunk)
    full = str(tmp_path / "full.jsonl")
    run_generate(problems, gen, prompter, full, config, policy="tiny", progress=False)

    out = str(tmp_path / "resumed.jsonl")
    with pytest.raises(Killed):
        run_generate(problems, gen, prompter, out, config, policy="tiny", progress=False,
                     on_chunk=kill_after(2))
    with open(out + ".partial", encoding="utf-8") as f:
        lines = f.readlines()
    assert len(lines) == 1 + 2 * 3     # the header (prmkit/resume.py), then 2 problems' records
    # a kill in the middle of writing: one record lost, the next one torn
    with open(out + ".partial", "w", encoding="utf-8") as f:
        f.writelines(lines[:-2])
        f.write(lines[-1][:10])
    calls = []
    generate = gen.generate
    gen.generate = lambda prompts, *a, **kw: calls.append(list(prompts)) or generate(prompts, *a, **kw)
    try:
        summary = run_generate(problems, gen, prompter, out, config, policy="tiny", progress=False)
    finally:
        del gen.generate
    with open(full, encoding="utf-8") as a, open(out, encoding="utf-8") as b:
        assert a.read() == b.read()
    # finished chunks were not generated again; the half-written chunk was, whole
    first_redone = 1 if chunk == 1 else 0
    assert calls[0][0] == prompter.prompt(problems[first_redone].problem)
    assert summary.generated_problems == 4                     # problem 0 was done


def test_resume_refuses_other_settings(tmp_path):
    fake = FakeGenerator(lambda prompt, k: "The answer is 1.")
    problems = [Problem("a", "x?", "1"), Problem("b", "y?", "1")]
    out = str(tmp_path / "o.jsonl")
    with pytest.raises(Killed):
        run_generate(problems, fake, Prompter(STYLES["few-shot"]), out, GenerateConfig(n=2, seed=1),
                     on_chunk=kill_after(1), progress=False)
    with pytest.raises(PrmkitError, match="seed=1, this run has seed=2"):
        run_generate(problems, fake, Prompter(STYLES["few-shot"]), out, GenerateConfig(n=2, seed=2),
                     progress=False)
    with pytest.raises(PrmkitError, match="would not write"):
        run_generate(problems[1:], fake, Prompter(STYLES["few-shot"]), out,
                     GenerateConfig(n=2, seed=1), progress=False)


# --------------------------------------------------------------------------------- problems


def test_problem_sources(tmp_path):
    gsm = read_problems(write_jsonl(tmp_path / "g.jsonl", GSM8K), "gsm8k", limit=2)
    assert [(p.id, p.reference) for p in gsm] == [("gsm8k-0", "0"), ("gsm8k-1", "2")]
    plain = read_problems(write_jsonl(tmp_path / "p.jsonl", [
        {"problem": "a?", "reference": 3}, {"question": "b?", "id": "q2"}]), "problems")
    assert [(p.id, p.problem, p.reference) for p in plain] == [("problem-0", "a?", "3"), ("q2", "b?", None)]
    recs = read_problems(write_jsonl(tmp_path / "r.jsonl", [
        {"id": "s1", "group": "g", "problem": "c?", "steps": ["x"], "reference": "1"},
        {"id": "s2", "group": "g", "problem": "c?", "steps": ["y"], "reference": "1"},
        {"id": "s3", "problem": "d?", "steps": ["z"]}]))
    assert [(p.id, p.problem) for p in recs] == [("g", "c?"), ("s3", "d?")]
    with pytest.raises(PrmkitError, match="p.jsonl:1: field 'problem'"):
        read_problems(write_jsonl(tmp_path / "p.jsonl", [{"text": "a"}]), "problems")


# --------------------------------------------------------------------------------- the command


def test_generate_command_on_a_tiny_model_folder(tmp_path, capsys, tiny_policy):
    tiny = pytest.importorskip("tiny")
    folder = tmp_path / "policy"
    tiny.causal_lm().save_pretrained(folder)
    tiny.tokenizer().save_pretrained(folder)
    problems = write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K)
    out = tmp_path / "cands.jsonl"
    argv = ["generate", "--policy", folder, "--input", problems, "--input-format", "gsm8k",
            "--limit", 3, "-n", 2, "--max-tokens", 8, "--dtype", "float32", "--seed", 4,
            "--output", out]
    assert cli.main([str(a) for a in argv]) == 0
    err = capsys.readouterr().err
    assert "6 candidates for 3 problems; accuracy" in err
    recs = read_records(str(out))
    assert [r.id for r in recs] == [f"gsm8k-{i}-{k}" for i in range(3) for k in range(2)]
    assert all(r.meta["policy"] == str(folder) and r.meta["backend"] == "hf" for r in recs)
    assert all(r.meta["completion_tokens"] <= 8 for r in recs)
    # a user mistake is one line, exit status 2
    assert cli.main(["generate", "--policy", str(folder), "--input", str(tmp_path / "missing"),
                     "--output", str(out)]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
