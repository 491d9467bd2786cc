"""Records spread over Ray workers, on one machine or many (``--ray auto|local|ADDRESS``), for
labelling (``prmkit label mc|judge``) and scoring (``prmkit score``, the evaluations that score).

The driver starts ``workers`` Ray actors; each loads its state once (``make_state()``: a policy,
a PRM) and runs ``work(records, state)`` on the batches it is sent, a generator yielding each
record as it finishes (and notes, anything not a :class:`~prmkit.records.Record`, passed to
``on_note``). The caller chooses the batches (scoring: whole groups, so prefix sharing still
applies). Each actor has two batches queued; records stream back as they end and the caller
writes them at once, so a killed driver loses only the records in flight.

Failures: a dead worker is replaced and its unreturned records sent again (a batch whose
workers die ``MAX_DEATHS`` times ends the run); an error raised by ``work`` or ``make_state``
ends the run at once. A cluster address that does not answer fails within ``PROBE_SECONDS``
(:func:`probe`); workers the cluster cannot hold are refused before anything starts.

Addresses: ``auto`` joins the cluster running on this machine (``ray start --head``); ``local``
starts a private instance for this run; anything else is a cluster address (``HOST:6379`` or
``ray://HOST:10001``), whose nodes must have prmkit and the model's dependencies installed. A
Ray already initialised in this process is used. Ray is optional: ``pip install 'prmkit[ray]'``.

A ``local`` instance is this run's own: it is shut down when the run ends, on an error, on
Ctrl-C and on SIGTERM (:func:`sigterm_exits`; a kill -9 leaves it to Ray's own clean-up). It
starts with Ray's default token authentication and without Ray's warning about it on every
run, and with Ray's own log lines at WARNING: neither is something the user can act on.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from prmkit.errors import PrmkitError
from prmkit.records import Record

StateFactory = Callable[[], Any]                         # () -> a worker's state (a model)
WorkFn = Callable[[list[Record], Any], Iterator[Any]]     # (records, state) -> records, notes

PROBE_SECONDS = 5.0      # how long a cluster address may take to answer
MAX_DEATHS = 3           # worker deaths one batch may see before the run ends


@dataclass
class RayConfig:
    """Where and how wide a job runs on Ray (off when ``ray`` is None). None of it is in a
    resume's identity (:mod:`prmkit.resume`): a run on workers continues a local one's partial."""

    ray: str | None = field(default=None, metadata={
        "metavar": "ADDRESS", "identity": False,
        "help": "spread records over Ray workers: auto (the cluster running on this machine), "
                "local (a private instance) or a cluster address"})
    workers: int = field(default=2, metadata={
        "help": "--ray: workers, each loading the model once", "identity": False})
    worker_cpus: float = field(default=1.0, metadata={
        "help": "--ray: CPUs each worker reserves", "identity": False})
    worker_gpus: float = field(default=0.0, metadata={
        "help": "--ray: GPUs each worker reserves (1 = one worker per GPU)", "identity": False})

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise PrmkitError(f"--workers must be positive, got {self.workers}")
        if self.worker_cpus < 0 or self.worker_gpus < 0:
            raise PrmkitError(f"--worker-cpus and --worker-gpus must not be negative, got "
                              f"{self.worker_cpus} and {self.worker_gpus}")


def ray_config(args: Any) -> RayConfig | None:
    """The :class:`RayConfig` of a command's options (``args.ray`` and the rest), or None when
    ``--ray`` is not given (or the command has no such option)."""
    if not getattr(args, "ray", None):
        return None
    return RayConfig(ray=args.ray, workers=args.workers, worker_cpus=args.worker_cpus,
                     worker_gpus=args.worker_gpus)


class _Worker:
    """A Ray actor: holds one state and works through the batches it is sent, streaming each
    finished record (``("r", row)``) and note (``("n", note)``) back."""

    def __init__(self, make_state: StateFactory, work: WorkFn):
        self.state = make_state()
        self.work = work

    def run(self, rows: list[dict[str, Any]]) -> Iterator[tuple[str, Any]]:
        for item in self.work([Record.from_dict(row) for row in rows], self.state):
            yield ("r", item.to_dict()) if isinstance(item, Record) else ("n", item)


def probe(address: str, seconds: float = PROBE_SECONDS) -> None:
    """Fail within about ``seconds`` when nothing answers at the cluster address ``address``
    (``HOST:PORT`` or ``ray://HOST:PORT``) as a Ray cluster does; ``auto`` and ``local`` pass.

    Both of Ray's ports are gRPC servers, which answer any HTTP/2 call with ``:status 200``, so
    one call made by hand (:func:`_grpc_status`) tells a closed port, a silent host and a proxy
    answering 404 for an absent host apart, where Ray itself retries for 20 s or more.
    """
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise PrmkitError(f"--ray {address}: expected auto, local, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=seconds) as conn:
            status = _grpc_status(conn, hostport)
        why = None if status == 200 else f"HTTP status {status}, not a gRPC server"
    except OSError as e:
        why = f"no answer within {seconds:g} s" if isinstance(e, socket.timeout) \
            else (e.strerror or type(e).__name__)
    if why:
        raise PrmkitError(f"--ray {address}: the cluster does not answer ({why}); is `ray start` "
                          f"running there?")


def _grpc_status(conn: socket.socket, authority: str) -> int | None:
    """The HTTP status of one gRPC call made over ``conn`` (HTTP/2 frames by hand: the client
    preface, empty SETTINGS, a HEADERS frame in literal HPACK, an empty message); None when the
    answer is no HTTP/2 status. 200 is HPACK's static entry 8 (byte 0x88), 404 entry 13."""
    def frame(kind: int, flags: int, payload: bytes) -> bytes:
        return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + (1).to_bytes(4, "big") \
            + payload

    def literal(name: str, value: str) -> bytes:
        n, v = name.encode(), value.encode()
        return bytes([0, len(n)]) + n + bytes([len(v)]) + v

    headers = b"".join(literal(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", "/prmkit.Probe/Ping"),
        (":authority", authority[:100]), ("content-type", "application/grpc"), ("te", "trailers")))
    conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
                 + frame(1, 4, headers) + frame(0, 1, bytes(5)))
    buf = b""
    while True:
        while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
            more = conn.recv(4096)
            if not more:
                return None
            buf += more
        size, kind, flags = int.from_bytes(buf[:3], "big"), buf[3], buf[4]
        stream, body, buf = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + size], buf[9 + size:]
        if kind == 7:                                          # GOAWAY
            return None
        if kind == 1 and stream == 1:
            body = body[1 + body[0]:] if flags & 0x8 else body   # padded
            body = body[5:] if flags & 0x20 else body              # priority
            return {0x88: 200, 0x8D: 404}.get(body[0] if body else -1, 0)


def connect(address: str, cpus: float = 0.0) -> tuple[Any, bool]:
    """The ``ray`` module, initialised for ``address`` (a ``local`` instance gets at least
    ``cpus`` CPUs); and whether this call started it."""
    try:
        import ray
    except ImportError:
        raise PrmkitError("--ray needs Ray: pip install 'prmkit[ray]'") from None
    probe(address)                   # an address that does not answer fails here, in seconds
    if ray.is_initialized():
        return ray, False
    try:
        if address == "local":
            # Ray's default token authentication for a new local cluster, without its warning
            logging.getLogger("ray._private.authentication").setLevel(logging.ERROR)
            ray.init(num_cpus=max(os.cpu_count() or 1, math.ceil(cpus)), include_dashboard=False,
                     log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PrmkitError(f"--ray {address}: cannot start or reach Ray ({why})") from None
    return ray, True


@contextlib.contextmanager
def sigterm_exits(active: bool = True) -> Iterator[None]:
    """While inside, SIGTERM raises SystemExit (status 143) in the main thread, so that the
    ``finally`` clauses and Ray's own exit hook run (the default action ends the process at
    once, leaving a local Ray's processes behind). The former handler comes back after."""
    if not active or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def check_resources(ray: Any, config: RayConfig) -> None:
    """Refuse workers the cluster cannot hold at once (they would wait for ever)."""
    have = ray.cluster_resources()
    for name, each, flag in (("CPU", config.worker_cpus, "--worker-cpus"),
                             ("GPU", config.worker_gpus, "--worker-gpus")):
        need = config.workers * each
        if need > have.get(name, 0.0) + 1e-9:
            raise PrmkitError(f"--workers {config.workers} {flag} {each:g} need {need:g} "
                              f"{name}s; the Ray cluster has {have.get(name, 0.0):g}")


@dataclass
class _Task:
    actor: Any
    records: list[Record]
    deaths: int
    back: set[str] = field(default_factory=set)     # ids of the records that came back


def ray_stream(make_state: StateFactory, work: WorkFn, batches: Iterable[list[Record]],
               config: RayConfig, on_note: Callable[[Any], None] | None = None) -> Iterator[Record]:
    """The records of ``batches``, finished by ``work`` on Ray workers, as they come back.

    ``make_state`` and ``work`` are sent to the workers, so they must pickle (module-level
    functions, :func:`functools.partial` of them).
    """
    exits = sigterm_exits()    # from before Ray starts: a SIGTERM then still shuts it down
    exits.__enter__()
    try:
        ray, started = connect(config.ray or "local", config.workers * config.worker_cpus)
    except BaseException:
        exits.__exit__(None, None, None)
        raise
    from ray.exceptions import RayActorError, RayTaskError, WorkerCrashedError

    remote = ray.remote(num_cpus=config.worker_cpus, num_gpus=config.worker_gpus)(_Worker)
    actors: list[Any] = []
    try:
        check_resources(ray, config)
        actors.extend(remote.remote(make_state, work) for _ in range(config.workers))
        todo, again = iter(batches), deque()            # again: records of dead workers
        free = deque(actors * 2)                        # two batches queued per worker
        running: dict[Any, _Task] = {}                  # streaming task -> what it holds
        while True:
            while free:
                batch, deaths = again.popleft() if again else (next(todo, None), 0)
                if not batch:
                    break
                actor = free.popleft()
                running[actor.run.remote([r.to_dict() for r in batch])] = _Task(actor, batch, deaths)
            if not running:
                return
            [ready], _ = ray.wait(list(running), num_returns=1)
            try:
                kind, item = ray.get(next(ready))
            except StopIteration:                       # the batch is over: its actor is free
                free.append(running.pop(ready).actor)
                continue
            except RayTaskError as e:                   # an error inside work()
                if isinstance(e.cause, PrmkitError):
                    raise PrmkitError(str(e.cause)) from None
                raise
            except (RayActorError, WorkerCrashedError) as e:
                _replace(running[ready].actor, e, running, again, free, actors,
                         lambda: remote.remote(make_state, work))
                continue
            if kind == "n":
                if on_note is not None:
                    on_note(item)
                continue
            rec = Record.from_dict(item)
            running[ready].back.add(rec.id)
            yield rec
    finally:
        try:
            for actor in actors:
                ray.kill(actor)
            if started:
                ray.shutdown()
        finally:
            exits.__exit__(None, None, None)


def _replace(dead: Any, error: Exception, running: dict[Any, _Task], again: deque,
             free: deque, actors: list[Any], new_actor: Callable[[], Any]) -> None:
    """A worker died: queue the records of its batches that did not come back, and start a new
    worker in its place (two free slots)."""
    if getattr(error, "actor_init_failed", False):       # make_state() raised: not a death
        last = [ln for ln in str(error).strip().splitlines() if ln.strip()][-1:] or ["?"]
        raise PrmkitError(f"a Ray worker could not start: "
                          f"{last[0].split('PrmkitError: ', 1)[-1].strip()}") from None
    resent = 0
    for ref in [ref for ref, task in running.items() if task.actor is dead]:
        task = running.pop(ref)
        left = [r for r in task.records if r.id not in task.back]
        resent += len(left)
        if task.deaths + 1 >= MAX_DEATHS:
            raise PrmkitError(f"Ray workers died {MAX_DEATHS} times on the batch holding record "
                              f"{task.records[0].id!r}; last: {str(error).splitlines()[0]}")
        if left:
            again.append((left, task.deaths + 1))
    print(f"a Ray worker died ({str(error).strip().splitlines()[0][:120]}); a new one takes its "
          f"place and its {resent} unfinished records are sent again", file=sys.stderr)
    while dead in free:
        free.remove(dead)
    actors.remove(dead)
    actors.append(new_actor())
    free.extend([actors[-1]] * 2)
