"""Scoring on Ray workers (prmkit.distributed), with one local Ray instance for the module: the
same records as a local run (ids, order, scores), groups still shared, a resume from a local
partial file, a dead worker replaced, the evaluations' table unchanged; and the failures that
need no Ray instance (Ray missing, an address that does not answer, too few GPUs).
Skipped when Ray is not installed (``pip install 'prmkit[ray]'``)."""

from __future__ import annotations

import functools
import json
import os
import sys
import time

import pytest

import tiny
from prmkit import cli
from prmkit.distributed import RayConfig, check_resources, connect, probe, ray_stream
from prmkit.errors import PrmkitError
from prmkit.records import Record

ray = pytest.importorskip("ray")

import test_eval_model  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])   # the workers' test work
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model")
    tiny.token_classifier().save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    return str(path)


def lab_candidates(path, problems=4, per=4):
    """Grouped candidates of lab problems (each group: one problem, ``per`` sampled solutions)."""
    from prmkit.lab import LabConfig, load_lab_policy, make_problems
    from prmkit.lab.candidates import candidates_of
    from prmkit.records import write_records

    policy, prompter = load_lab_policy("lab:0.1:0.6")
    ps = make_problems(LabConfig(n=problems, seed=7, min_steps=2, max_steps=4))
    recs = candidates_of(ps, per, policy, prompter, "lab:0.1:0.6", 1)
    write_records(str(path), recs)
    return [r.id for r in recs]


def score(model, src, out, *extra):
    return cli.main(["score", "--model", model, "--format", "trl", "--dtype", "float32",
                     "--input", str(src), "--output", str(out), "--chunk", "4", *extra])


def rows(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def assert_same(a, b, tol=1e-5):
    assert [r["id"] for r in a] == [r["id"] for r in b]
    for x, y in zip(a, b):
        assert {k: v for k, v in x.items() if k != "step_scores"} == \
            {k: v for k, v in y.items() if k != "step_scores"}
        assert x["step_scores"] == pytest.approx(y["step_scores"], abs=tol)


def test_score_on_two_workers_equals_local_and_shares_groups(local_ray, model, tmp_path, capsys):
    ids = lab_candidates(tmp_path / "in.jsonl")
    assert score(model, tmp_path / "in.jsonl", tmp_path / "local.jsonl") == 0
    assert score(model, tmp_path / "in.jsonl", tmp_path / "ray.jsonl", "--ray", "local",
                 "--workers", "2") == 0
    err = capsys.readouterr().err
    local, on_ray = rows(tmp_path / "local.jsonl"), rows(tmp_path / "ray.jsonl")
    assert [r["id"] for r in on_ray] == ids
    assert_same(on_ray, local)
    lines = [ln for ln in err.splitlines() if ln.startswith("prefix sharing:")]
    assert len(lines) == 2 and lines[0] == lines[1] and " 4 groups" in lines[1]

    # a driver killed after 5 records (a torn sixth line): the rerun on Ray scores the rest
    done = open(tmp_path / "local.jsonl", encoding="utf-8").read().splitlines(keepends=True)
    from partials import header_of

    part = tmp_path / "again.jsonl.partial"
    head = header_of(["score", "--model", model, "--format", "trl", "--dtype", "float32",
                      "--input", tmp_path / "in.jsonl", "--output", tmp_path / "again.jsonl"], part)
    part.write_text(head + "".join(done[:5]) + done[5][:30])
    assert score(model, tmp_path / "in.jsonl", tmp_path / "again.jsonl", "--ray", "local") == 0
    assert f"resuming: 5 of {len(ids)}" in capsys.readouterr().err
    assert_same(rows(tmp_path / "again.jsonl"), local)
    assert not part.exists()

    # another model's partial is refused, on Ray as locally
    part.write_text(head + "".join(done[:5]))
    assert score(model, tmp_path / "in.jsonl", tmp_path / "again.jsonl", "--ray", "local",
                 "--dtype", "bfloat16") == 2
    assert "dtype" in capsys.readouterr().err


@pytest.mark.slow
def test_processbench_table_is_the_same_on_workers(local_ray, model, tmp_path, capsys):
    data = test_eval_model.processbench_file(tmp_path / "gsm8k.json")
    base = ["eval", "processbench", "--model", model, "--format", "trl", "--dtype", "float32",
            "--data", str(data)]
    assert cli.main(base + ["--output", str(tmp_path / "a.json")]) == 0
    table = capsys.readouterr().out
    assert cli.main(base + ["--output", str(tmp_path / "b.json"), "--ray", "local",
                            "--workers", "2"]) == 0
    assert capsys.readouterr().out == table
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert a["model"] == b["model"] and a["scored_by"] == b["scored_by"]


# -- the distribution itself, with trivial work -----------------------------------------------

def double_once_dying(records, state, marker):
    """Doubles ``meta.x``; the first worker to reach record r3 kills its own process."""
    for rec in records:
        if rec.id == "r3" and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(9)
        rec.meta["x"] = 2 * rec.meta["x"] + state
        yield rec
    yield {"batch": len(records)}


def test_a_dead_worker_is_replaced_and_its_records_sent_again(local_ray, tmp_path, capsys):
    recs = [Record(id=f"r{i}", problem="p", steps=["s"], meta={"x": i}) for i in range(10)]
    batches = [recs[i:i + 4] for i in range(0, 10, 4)]
    notes = []
    work = functools.partial(double_once_dying, marker=str(tmp_path / "died"))
    got = list(ray_stream(functools.partial(int, "100"), work, batches,
                          RayConfig(ray="local", workers=2), notes.append))
    assert os.path.exists(tmp_path / "died")
    assert "a Ray worker died" in capsys.readouterr().err
    assert sorted(r.id for r in got) == sorted(r.id for r in recs)     # each once
    assert {r.id: r.meta["x"] for r in got} == {f"r{i}": 2 * i + 100 for i in range(10)}
    # the dying batch's note never came; its unfinished records came back in a new batch
    assert sum(n["batch"] for n in notes) >= 10 - 4 + 1


def test_too_few_gpus_are_refused_before_anything_starts(local_ray):
    with pytest.raises(PrmkitError, match="need 2 GPUs; the Ray cluster has 0"):
        check_resources(local_ray, RayConfig(ray="local", workers=2, worker_gpus=1))


def test_an_address_that_does_not_answer_fails_in_seconds():
    start = time.monotonic()
    with pytest.raises(PrmkitError, match="does not answer"):
        probe("127.0.0.1:9")                          # nothing listens: refused at once
    with pytest.raises(PrmkitError, match="does not answer"):
        probe("ray://10.255.255.1:10001", seconds=1.0)  # unroutable: no answer (or unreachable)
    assert time.monotonic() - start < 5
    with pytest.raises(PrmkitError, match="HOST:PORT"):
        probe("nowhere")


def test_a_running_cluster_answers_the_probe(local_ray):
    probe(local_ray.get_runtime_context().gcs_address)      # the GCS: gRPC, HTTP status 200


def test_the_command_line_says_so(tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text('{"id": "a", "problem": "p", "steps": ["s"]}\n')
    assert cli.main(["score", "--input", str(tmp_path / "in.jsonl"), "--output",
                     str(tmp_path / "o.jsonl"), "--ray", "127.0.0.1:9"]) == 2
    assert "--ray 127.0.0.1:9: the cluster does not answer" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


def test_ray_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(PrmkitError, match=r"pip install 'prmkit\[ray\]'"):
        connect("local")


def test_bad_settings_are_refused():
    with pytest.raises(PrmkitError, match="--workers"):
        RayConfig(ray="local", workers=0)


def test_sigterm_exits_so_that_clean_up_runs_and_the_handler_comes_back():
    import signal

    from prmkit.distributed import sigterm_exits

    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(SystemExit) as info:
        with sigterm_exits():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                cleaned.append(True)
    assert info.value.code == 143 and cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) is before
    with sigterm_exits(active=False):
        assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.slow
def test_a_sigterm_stops_the_local_ray_and_ray_s_auth_warning_is_not_shown(model, tmp_path):
    """`score --ray local` sent SIGTERM mid-run: it exits through SystemExit, and no process of its session
    (Ray's own, started by the driver) is left a few seconds later; no token-authentication
    warning on the way."""
    import signal
    import subprocess

    src = tmp_path / "in.jsonl"
    lab_candidates(src, problems=40, per=4)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    env.update(PYTHONPATH=os.getcwd(), PRMKIT_PROGRESS_EVERY="0", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "prmkit.cli", "score", "--model", model,
                             "--format", "trl", "--dtype", "float32", "--input", str(src),
                             "--output", str(tmp_path / "o.jsonl"), "--chunk", "1", "--ray",
                             "local", "--workers", "1"], env=env, start_new_session=True,
                            stderr=subprocess.PIPE, text=True)
    partial, deadline = tmp_path / "o.jsonl.partial", time.monotonic() + 300
    while time.monotonic() < deadline and not (partial.exists() and
                                               len(partial.read_text().splitlines()) > 2):
        assert proc.poll() is None, proc.stderr.read()   # records are coming back from Ray
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=120)[1]
    # a SystemExit, not death by the signal (-15): prmkit's handler (143), or Ray's own once
    # ray.init has put it in place (15); either way the finally clauses and exit hooks ran
    assert proc.returncode in (143, 15), err
    assert "Token authentication" not in err
    for _ in range(30):                     # Ray's processes share the driver's session
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(1)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("Ray's processes outlived the driver by 30 s")
