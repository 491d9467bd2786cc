"""Resume never mixes (prmkit/resume.py): every resuming command (generate, label, score, search,
eval) writes a header naming its whole identity first in OUT.partial, and refuses a partial
without one, or with a header that differs in any field, naming the field and both values.

The battery goes over every option of each command's parser, not a chosen few: a run killed
after its first rows is resumed with that option changed, and must be refused naming it (an
option in the identity) or give what a clean run gives (an option marked outside the identity,
where it is declared). A server is identified by what it serves, not its URL."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil

import pytest

import test_eval_model
import tiny
from partials import killed
from prmkit import cli
from prmkit.records import Record, write_records

RAY_SKIPPED = "starts Ray; tests/test_score_ray.py resumes a local partial on Ray workers"


def run(capsys, argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, err


def rows(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def assert_close(a, b, where="", tol=1e-5):
    """The same rows, floats to ``tol`` (float32 batches differ by ~1e-7), timings apart."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) | set(b)
        keys.discard("seconds")
        for k in sorted(keys):
            assert k in a and k in b, f"{where}.{k} only on one side"
            assert_close(a[k], b[k], f"{where}.{k}", tol)
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{where}[{i}]", tol)
    elif isinstance(a, float) and isinstance(b, float):
        assert abs(a - b) <= tol, f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


# ---------------------------------------------------------------------------------------------
# the commands, each with a fast setup


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two tiny models, records to score, lab problems, lab solutions, a ProcessBench file."""
    root = tmp_path_factory.mktemp("world")
    for name, seed in (("m1", 0), ("m2", 1)):
        tiny.causal_lm(seed=seed).save_pretrained(root / name, safe_serialization=True)
        tiny.tokenizer().save_pretrained(root / name)
    write_records(str(root / "records.jsonl"), [
        Record(id=f"r{i}", problem=f"What is {i // 2} + 1?", group=f"g{i // 2}",
               steps=[f"{i // 2} + 1 = {i // 2 + 1}.", f"The answer is {i // 2 + i % 2}."])
        for i in range(6)])
    with contextlib.redirect_stderr(open(os.devnull, "w")):
        assert cli.main(["lab", "problems", "--n", "4", "--min-steps", "2", "--max-steps", "3",
                         "--seed", "3", "--output", str(root / "problems.jsonl")]) == 0
        assert cli.main(["generate", "--policy", "lab", "--input", str(root / "problems.jsonl"),
                         "-n", "2", "--output", str(root / "solutions.jsonl")]) == 0
    test_eval_model.processbench_file(root / "gsm8k.json", 8)
    return root


def commands(w):
    """command -> (argv without --output, the option naming the file that resumes, the rows a
    killed run keeps, the option naming the input)."""
    m1, m2 = w / "m1", w / "m2"
    return {
        "score": (["score", "--model", m1, "--format", "math-shepherd", "--dtype", "float32",
                   "--input", w / "records.jsonl"], "output", 2, "input"),
        "search": (["search", "--method", "best-of-n", "--policy", "lab", "--prm", m1,
                    "--prm-format", "math-shepherd", "--prm-dtype", "float32",
                    "--input", w / "problems.jsonl", "-n", "2", "-m", "1", "--chunk", "2"],
                   "output", 2, "input"),
        "generate": (["generate", "--policy", "lab", "--input", w / "problems.jsonl", "-n", "2",
                      "--chunk", "2"], "output", 4, "input"),
        "label mc": (["label", "mc", "--policy", "lab", "--input", w / "solutions.jsonl",
                      "--rollouts", "2", "--chunk", "2"], "output", 3, "input"),
        "eval processbench": (["eval", "processbench", "--model", m1, "--format", "math-shepherd",
                               "--dtype", "float32", "--data", w / "gsm8k.json"],
                              "save_scores", 3, "data"),
    }


def values(w, tmp_path, data_option, source):
    """Options a generic change cannot give a usable other value."""
    copy = tmp_path / ("copy-" + os.path.basename(str(source)))
    shutil.copy(source, copy)
    return {"model": w / "m2", "prm": w / "m2", "format": "rlhflow", "prm_format": "rlhflow",
            "policy": "lab:0.3", "chunk": 1, "threads": 1, "aggregate": "min",
            "select": "majority", data_option: copy,
            "output": tmp_path / "elsewhere.jsonl",
            "save_scores": tmp_path / "elsewhere.scores.jsonl",
            "device": "cuda", "prm_device": "cuda", "server": "http://127.0.0.1:9/v1",
            "base_url": "http://127.0.0.1:9/v1"}


def parser_of(path: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    for name in path.split():
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def change(action: argparse.Action, now, given: dict):
    """The argv that gives ``action`` another value than ``now``; None for no usable one."""
    flag = action.option_strings[0]
    if action.nargs == 0:                                  # a flag: turn it on (or off)
        return [flag]
    if action.dest in given:
        value = given[action.dest]
    elif action.choices is not None:
        value = next((c for c in action.choices if str(c) != str(now)), None)
    elif action.type is int:
        value = 64 if now is None else now + 1
    elif action.type is float:
        value = 0.5 if not now else now / 2
    else:
        value = "other"
    return None if value is None else [flag, value]


def io_paths(w, name, tmp_path):
    """(the command's whole argv, writing in ``tmp_path``; the file that resumes)."""
    argv, writes, _, _ = commands(w)[name]
    out = tmp_path / "out.jsonl"
    if writes == "save_scores":    # eval: the scores resume, the results are written anew
        return argv + ["--output", tmp_path / "out.json", "--save-scores", out], out
    return argv + ["--output", out], out


# ---------------------------------------------------------------------------------------------
# every resuming command goes through the contract


def subparsers(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from subparsers(sub, path + (name,))


def test_every_command_that_resumes_declares_its_identity():
    """A command with --no-resume has an identity (prmkit.resume.resumable), with its output,
    its resume flag and its chunks (but search's, whose compute accounts depend on them)
    outside it; and only prmkit/resume.py opens a partial file."""
    resuming = {}
    for path, parser in subparsers(cli.build_parser()):
        dests = {a.dest for a in parser._actions}
        if "no_resume" in dests:
            resuming[" ".join(path)] = parser.get_default("identity_options")()
    assert set(resuming) == {"score", "generate", "search", "label mc", "label judge",
                             "eval processbench", "eval prmbench", "eval bestofn"}
    for name, identity in resuming.items():
        assert not {"output", "no_resume", "save_scores", "ray", "workers"} & set(identity), name
        assert ("chunk" in identity) == (name == "search"), name
    package = os.path.join(os.path.dirname(cli.__file__))
    users = sorted(os.path.relpath(os.path.join(d, f), package) for d, _, fs in os.walk(package)
                   for f in fs if f.endswith(".py")
                   and "ResumableWriter" in open(os.path.join(d, f), encoding="utf-8").read())
    assert users == ["records.py", "resume.py"]


# ---------------------------------------------------------------------------------------------
# a partial without a header, and one from other settings


@pytest.mark.parametrize("name", ["score", "search", "generate", "label mc", "eval processbench"])
def test_a_partial_without_a_header_is_refused(name, world, tmp_path, capsys):
    argv, out = io_paths(world, name, tmp_path)
    rc, err = run(capsys, argv)
    assert rc == 0, err
    lines = out.read_text().splitlines(keepends=True)
    partial = tmp_path / (out.name + ".partial")
    partial.write_text("".join(lines[:len(lines) // 2]))   # the first half of a finished run
    os.unlink(out)
    rc, err = run(capsys, argv)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{partial} holds {len(lines) // 2} finished rows but no header" in err
    assert "--no-resume" in err and not out.exists()
    assert partial.read_text() == "".join(lines[:len(lines) // 2])   # left as it was


def test_the_first_half_of_a_bfloat16_search_is_not_resumed_in_float32(world, tmp_path, capsys):
    """The issue's case: a finished bfloat16 search cut in half as OUT.partial, run in float32."""
    argv, out = io_paths(world, "search", tmp_path)
    bf16 = [a if a != "float32" else "bfloat16" for a in argv]
    assert run(capsys, bf16)[0] == 0
    lines = out.read_text().splitlines(keepends=True)
    (tmp_path / "out.jsonl.partial").write_text("".join(lines[:len(lines) // 2]))
    os.unlink(out)
    rc, err = run(capsys, argv)
    assert rc == 2 and "no header" in err and "resuming" not in err and not out.exists()
    # and written as a run writes it, with its header, the dtype is named
    os.unlink(tmp_path / "out.jsonl.partial")
    killed(bf16, tmp_path / "out.jsonl.partial", 2)
    rc, err = run(capsys, argv)
    assert rc == 2 and 'prm_dtype="bfloat16", this run has prm_dtype="float32"' in err, err


@pytest.mark.parametrize("name, option, value", [
    ("score", "--dtype", "bfloat16"), ("search", "--prm-dtype", "bfloat16"),
    ("generate", "--seed", "1"), ("label mc", "--rollouts", "3"),
    ("eval processbench", "--max-length", "64")])
def test_a_partial_from_another_setting_is_refused_naming_it(name, option, value, world,
                                                              tmp_path, capsys):
    argv, out = io_paths(world, name, tmp_path)
    partial = tmp_path / (out.name + ".partial")
    killed(argv, partial, 2, torn=True)
    before = partial.read_text()      # the refusal leaves it as it was, torn line and all
    rc, err = run(capsys, argv + [option, value])
    field = option.lstrip("-").replace("-", "_")
    assert rc == 2 and f"{partial} was written with {field}=" in err, err
    assert f"this run has {field}={json.dumps(value if field.endswith('dtype') else int(value))}" \
        in err and "--no-resume" in err
    assert partial.read_text() == before and not out.exists()
    # the same settings resume, and the header never reaches OUT
    rc, err = run(capsys, argv)
    assert rc == 0 and "resuming" in err, err
    assert "__prmkit_partial__" not in out.read_text() and not partial.exists()
    # --no-resume starts again with the other setting
    killed(argv, partial, 2)
    assert run(capsys, argv + [option, value, "--no-resume"])[0] == 0


# ---------------------------------------------------------------------------------------------
# every option in turn


@pytest.mark.parametrize("name", ["score", "search", "generate", "label mc", "eval processbench"])
def test_every_option_changed_on_resume_is_refused_or_changes_nothing(name, world, tmp_path,
                                                                      capsys):
    argv, out = io_paths(world, name, tmp_path)
    base, writes, keep, data_option = commands(world)[name]
    clean = tmp_path / "clean"
    clean.mkdir()
    clean_argv, clean_out = io_paths(world, name, clean)
    assert run(capsys, clean_argv)[0] == 0
    partial = tmp_path / (out.name + ".partial")
    killed(argv, partial, keep)
    saved = partial.read_text()
    args = cli.build_parser().parse_args([str(a) for a in argv])
    identity = set(args.identity_options())
    given = values(world, tmp_path, data_option, base[base.index("--" + data_option) + 1])
    tried, skipped, wrong = [], [], []
    for action in parser_of(name)._actions:
        if action.dest in (argparse.SUPPRESS, "help"):
            continue
        if action.dest == "ray":
            skipped.append((action.dest, RAY_SKIPPED))
            continue
        extra = change(action, vars(args)[action.dest], given)
        assert extra is not None, f"{name}: no other value for {action.dest}"
        for path in (out, partial, given["output"], given["save_scores"]):
            if os.path.exists(path):
                os.unlink(path)
        partial.write_text(saved)
        rc, err = run(capsys, argv + extra)
        # an option this command refuses whatever the partial (a generative PRM's sampling
        # without --backend generative) fails as a clean run with it fails, partial untouched
        inapplicable = rc == 2 and "is read only with" in err and partial.read_text() == saved
        if action.dest in identity and not inapplicable:
            refused = rc == 2 and f"was written with {action.dest}=" in err and \
                "--no-resume" in err and partial.read_text() == saved
            if not refused:
                wrong.append((action.dest, extra, rc, err.strip()[-300:]))
        else:
            try:
                _changes_nothing(capsys, extra, rc, err, clean_argv, clean_out,
                                 given[writes] if action.dest == writes else out)
            except AssertionError as e:
                wrong.append((action.dest, extra, rc, str(e)[:300]))
        tried.append(action.dest)
    assert wrong == [], "\n".join(map(str, wrong))
    assert len(tried) >= 10 and skipped == [("ray", RAY_SKIPPED)] * len(skipped)
    assert identity <= set(tried)


def _changes_nothing(capsys, extra, rc, err, clean_argv, clean_out, written):
    """An option outside the identity: the resumed run writes what a clean run writes, or fails
    as a clean run with the same option fails (the option, not the partial, is at fault)."""
    if rc != 0:
        fresh = os.path.join(os.path.dirname(clean_out), "fresh-" + os.path.basename(clean_out))
        again, said = run(capsys, [a if a != clean_out else fresh for a in clean_argv] + extra
                          + ["--no-resume"])
        last = [s.strip().splitlines()[-1] if s.strip() else "" for s in (said, err)]
        assert (again, last[0].replace(fresh, "X")) == (rc, last[1].replace(str(written), "X")), \
            f"fails otherwise than a clean run: {last}"
        return
    assert_close(rows(written), rows(clean_out))


# ---------------------------------------------------------------------------------------------
# a server is identified by what it serves


@pytest.fixture
def served(world):
    """Start `prmkit serve`'s app in this process: served(model folder, name) -> its URL."""
    from prmkit.models.backends.hf import HFConfig, load_hf_prm
    from prmkit.serve.app import ServerThread, create_app
    from prmkit.serve.config import ServeConfig

    servers = []

    def serve(folder, name, dtype="float32"):
        prm = load_hf_prm(str(folder), "math-shepherd", HFConfig(dtype=dtype))
        config = ServeConfig(host="127.0.0.1", port=0)
        server = ServerThread(create_app(prm, config, name, "math-shepherd"), config=config)
        servers.append(server.start())
        return server.url

    yield serve
    for server in servers:
        server.stop()


def test_score_resumes_the_same_model_served_on_a_new_port(world, served, tmp_path, capsys):
    first = served(world / "m1", "tiny")
    argv = ["score", "--input", world / "records.jsonl", "--output", tmp_path / "out.jsonl"]
    clean = tmp_path / "clean.jsonl"
    assert run(capsys, argv[:-1] + [clean, "--model", first])[0] == 0
    partial = tmp_path / "out.jsonl.partial"
    killed(argv + ["--model", first], partial, 2)
    head = json.loads(partial.read_text().splitlines()[0])
    assert head["identity"]["model"] == {"served": {"model": "tiny", "format": "math-shepherd",
                                                    "dtype": "float32"}}
    saved = partial.read_text()
    # another model, or the same in another dtype, on another port: refused, naming it
    for folder, name, dtype, field in ((world / "m2", "tiny2", "float32", "model.served.model"),
                                       (world / "m1", "tiny", "bfloat16", "model.served.dtype")):
        rc, err = run(capsys, argv + ["--model", served(folder, name, dtype)])
        assert rc == 2 and f"was written with {field}=" in err, err
        assert partial.read_text() == saved
    # the same model on a new port resumes, and scores as the clean run did
    second = served(world / "m1", "tiny")
    assert second != first
    rc, err = run(capsys, argv + ["--model", second])
    assert rc == 0 and "resuming: 2 of 6" in err, err
    assert_close(rows(tmp_path / "out.jsonl"), rows(clean))
