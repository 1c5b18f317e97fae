"""``streampunct bench failover``: real-time streams through HAProxy while replicas die and drain.

Starts N ``streampunct serve`` replicas on loopback ports and HAProxy in
front of them (deploy/haproxy.cfg), runs M real-time sessions through the
balancer with :class:`~streampunct.client.stream_client.ResumableStream`, SIGKILLs one
replica mid-stream, then SIGTERMs another (``serve --drain resume``: it closes
its streams with 1012), and checks every stream: each word sent final exactly
once (:func:`~benchmarks.load_finals.check_finals`), the sessions that lost
their connection resumed, the longest wait between two finals of a session,
and the p95 finalize margin before, during and after the failures.

Phases, by the clock of the run: a word is *before* when its final arrived
before the kill, *after* when it became decidable once the last interrupted
stream had resumed (and after the SIGTERM), *during* otherwise. A caption gap
(the wait between two consecutive finals of a session's real-time words) is
*before* when it ended before the kill, *after* when it began after the
recovery, *during* otherwise.

``streampunct bench failover --hold`` only starts them and keeps them until
Ctrl-C (printing the balancer's URL); :class:`Replicas` (the replicas plus
HAProxy, as a context manager) is usable on its own::

    with Replicas(ReplicaSpec(engine="fake"), 3, workdir) as rs:
        print(rs.url)   # ws://127.0.0.1:PORT/v1/stream, the balancer
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import csv
import io
import itertools
import random
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from benchmarks.common import (
    REPO,
    RESULTS_DIR,
    prepare_out_dir,
    result_stem,
    run_module,
    write_result,
)
from benchmarks.load_bench import (
    LoadBenchConfig,
    _quantiles_ms,
    analyse_session,
    load_corpus,
    plan_session,
)
from benchmarks.load_clients import SessionOutcome, SessionPlan
from benchmarks.load_finals import FinalsCheck
from benchmarks.server_under_test import (
    ServerProcess,
    ServerUnderTest,
    http_get,
    require_model_folder,
)
from engines.registry import BACKENDS, engine_threads, physical_cores
from streampunct.commands.children import dies_with_parent
from streampunct.core.options import SessionOptions
from streampunct.model import model_folder_argument

HAPROXY_TEMPLATE = REPO / "deploy" / "haproxy.cfg"


def render_haproxy_config(ports: Sequence[int], bind: str, stats_socket: Path,
                          template: Path = HAPROXY_TEMPLATE, host: str = "127.0.0.1") -> str:
    """deploy/haproxy.cfg with its fields filled: one ``server rK host:port`` line per replica."""
    servers = "\n".join(f"    server r{k + 1} {host}:{port}" for k, port in enumerate(ports))
    return string.Template(template.read_text()).substitute(
        bind=bind, servers=servers, stats_socket=str(stats_socket))


def find_haproxy(name: str = "haproxy") -> str | None:
    """The haproxy binary: ``name`` on PATH, else in the sbin folders (a user's PATH may lack them)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin:/sbin")


def require_haproxy(name: str) -> str:
    """:func:`find_haproxy`, or an InputError that says why not: a path given (``--haproxy
    PATH``) that does not exist or cannot be run, or a name not on PATH."""
    import os

    from streampunct.errors import InputError

    found = find_haproxy(name)
    if found is not None:
        return found
    if os.sep in name or (os.altsep and os.altsep in name):
        path = Path(name)
        why = ("does not exist" if not path.exists() else "is a folder" if path.is_dir()
               else "is not executable")
        raise InputError(f"--haproxy {name}: {why}")
    raise InputError(f"no {name!r} on PATH: install HAProxy (Debian: apt-get install haproxy), "
                     "or name its binary with --haproxy PATH")


def free_port() -> int:
    """A loopback port free now (the OS's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class ReplicaSpec:
    """How each replica is served: ``streampunct serve`` options."""

    engine: str = "onnxruntime"
    model_dir: Path | None = None
    engine_workers: int | None = 1
    drain: str = "resume"
    max_sessions: int = 1000
    startup_timeout_s: float = 180.0
    #: Engine threads of each engine (its backend's threads option; None: the server's own
    #: split, which gives one engine all the host's cores): replicas on one host share them.
    engine_threads: int | None = None

    def argv(self, port: int) -> list[str]:
        argv = [sys.executable, "-m", "streampunct.cli", "--log-level", "WARNING", "serve",
                "--host", "127.0.0.1", "--port", str(port), "--engine", self.engine,
                "--drain", self.drain, "--max-sessions", str(self.max_sessions)]
        if self.engine_workers is not None:
            argv += ["--engine-workers", str(self.engine_workers)]
        if self.engine_threads is not None:
            argv += [a for key, value in engine_threads(self.engine, self.engine_threads).items()
                     for a in ("--engine-option", f"{key}={value}")]
        if self.model_dir is not None:
            argv += ["--model", str(self.model_dir)]
        return argv


class Replicas:
    """N replicas on fixed loopback ports plus HAProxy in front (a context manager).

    Ports are chosen up front so that a replica restarted after a crash comes
    back where HAProxy looks for it.
    """

    def __init__(self, spec: ReplicaSpec, n: int, workdir: Path, *, haproxy: str = "haproxy",
                 extra_ports: Sequence[int] = ()) -> None:
        """``extra_ports``: loopback ports of servers run elsewhere, put behind HAProxy after the
        ``n`` replicas (as ``r{n+1}``, ...)."""
        self.spec, self.n, self.workdir = spec, n, Path(workdir)
        self.haproxy = haproxy
        self.ports = [free_port() for _ in range(n)]
        self.extra_ports = list(extra_ports)
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}/v1/stream"
        self.stats_socket = self.workdir / "haproxy.sock"
        self.servers: list[ServerProcess] = []
        self.proxy: subprocess.Popen | None = None
        self._starts = [0] * n

    def _server(self, k: int) -> ServerProcess:
        self._starts[k] += 1
        folder = self.workdir / f"replica{k + 1}" / f"start{self._starts[k]}"
        folder.mkdir(parents=True, exist_ok=True)
        # The replica's own command (a fixed port, --drain); the config gives the startup timeout.
        return ServerProcess(ServerUnderTest(startup_timeout_s=self.spec.startup_timeout_s), self.spec.max_sessions,
                             folder, argv=self.spec.argv(self.ports[k]))

    def start(self) -> str:
        """Start every replica (in parallel) and HAProxy; wait until HAProxy sees them all up.
        On any failure everything started is stopped again."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.servers = [self._server(k) for k in range(self.n)]
        with concurrent.futures.ThreadPoolExecutor(self.n) as pool:
            for fut in [pool.submit(s.start) for s in self.servers]:
                fut.result()
        cfg_path = self.workdir / "haproxy.cfg"
        cfg_path.write_text(render_haproxy_config([*self.ports, *self.extra_ports], f"127.0.0.1:{self.port}",
                                                  self.stats_socket))
        with open(self.workdir / "haproxy.log", "wb") as log:
            # it stops once this bench is gone, even killed, as the replicas do
            argv = dies_with_parent([self.haproxy, "-db", "-f", str(cfg_path)])
            self.proxy = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.wait_up(range(self.n + len(self.extra_ports)), timeout=30.0)

    def restart(self, k: int) -> None:
        """Start replica ``k`` again on its port (as a supervisor would after a crash)."""
        self.servers[k] = self._server(k)
        self.servers[k].start()

    def stats(self) -> dict[str, dict]:
        """HAProxy's ``show stat`` for the replicas: {name: {status, scur, ...}} ({} if unreachable)."""
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2.0)
                s.connect(str(self.stats_socket))
                s.sendall(b"show stat\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        except OSError:
            return {}
        rows = csv.DictReader(io.StringIO(data.decode().lstrip("# ")))
        return {r["svname"]: r for r in rows if r.get("pxname") == "replicas" and r["svname"].startswith("r")}

    def wait_up(self, replicas, timeout: float) -> None:
        """Until HAProxy's checks see replicas ``replicas`` (0-based) UP; RuntimeError after ``timeout``."""
        names = {f"r{k + 1}" for k in replicas}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proxy is not None and self.proxy.poll() is not None:
                raise RuntimeError("haproxy exited: " + (self.workdir / "haproxy.log").read_text()[-2000:])
            stats = self.stats()
            if names and all(stats.get(n, {}).get("status") == "UP" for n in names):
                return
            time.sleep(0.1)
        raise RuntimeError(f"haproxy did not see {sorted(names)} up after {timeout:.0f}s: {self.stats()}")

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        if self.proxy is not None and self.proxy.poll() is None:
            self.proxy.terminate()
            try:
                self.proxy.wait(10)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
                self.proxy.wait(5)

    def __enter__(self) -> Replicas:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@dataclass(frozen=True)
class FailoverConfig:
    """Options of the failover bench (see the module docstring).

    Attributes:
        replicas, sessions: N replicas, M concurrent real-time sessions.
        duration_s, words_per_second, prefill_words, stagger_s: each session's stream
            (as ``bench load``: prefill, then ASR-like chunks at real-time pace).
        kill_at_s: SIGKILL replica 1 this long after the first session started.
        term_at_s: SIGTERM replica 2 then (``serve --drain``: resume hands its streams off).
        restart_killed: start the killed replica again on its port right after the kill
            (as a supervisor would); needed with 2 replicas, or nothing serves after the SIGTERM.
        reconnect_attempts: the clients' :class:`~streampunct.client.stream_client.Reconnect` attempts.
    """

    replicas: int = 3
    sessions: int = 60
    engine: str = "onnxruntime"
    model_dir: Path | None = None
    engine_workers: int | None = 1
    drain: str = "resume"
    duration_s: float = 40.0
    words_per_second: float = 2.5
    prefill_words: int = 48
    stagger_s: float = 2.0
    kill_at_s: float = 12.0
    term_at_s: float = 24.0
    restart_killed: bool = False
    right_context: int = SessionOptions.right_context
    max_delay_ms: int = SessionOptions.max_delay_ms
    reconnect_attempts: int = 20
    drain_timeout_s: float = 30.0
    startup_timeout_s: float = 180.0
    data: Path = Path("data/iwslt2011/test2011")
    seed: int = 0
    haproxy: str = "haproxy"
    out_dir: Path = RESULTS_DIR / "failover"
    name: str = "failover"

    def __post_init__(self) -> None:
        if self.replicas < 2 or self.sessions < 1:
            raise ValueError("failover needs at least 2 replicas and 1 session")
        if self.replicas == 2 and not self.restart_killed:
            raise ValueError("with 2 replicas pass --restart-killed, or no replica serves after the SIGTERM")
        if not 0 < self.kill_at_s < self.term_at_s < self.duration_s:
            raise ValueError("need 0 < --kill-at-s < --term-at-s < --duration-s")

    def load_config(self) -> LoadBenchConfig:
        server = ServerUnderTest(engine=self.engine, model_dir=self.model_dir, right_context=self.right_context,
                                 max_delay_ms=self.max_delay_ms)
        return LoadBenchConfig(server=server, duration_s=self.duration_s, words_per_second=self.words_per_second,
                               prefill_words=self.prefill_words, stagger_s=self.stagger_s, data=self.data,
                               seed=self.seed)


@dataclass
class StreamRecord:
    """One session's outcome plus what resuming did."""

    outcome: SessionOutcome
    notices: list = field(default_factory=list)  # ResumeNotice
    resumed_at: list[float] = field(default_factory=list)
    failure: str = ""


async def run_resumable_session(url: str, plan: SessionPlan, start: float, deadline: float,
                                cfg: FailoverConfig, seed: int) -> StreamRecord:
    """Stream ``plan`` through a :class:`ResumableStream` from loop time ``start``."""
    from streampunct.client.stream_client import ClientError, Reconnect, ResumableStream
    from streampunct.core.wire import Ended, Error, Final, Resumed

    loop = asyncio.get_running_loop()
    record = StreamRecord(SessionOutcome(plan, np.full(len(plan.words), np.nan)))
    out = record.outcome
    await asyncio.sleep(max(0.0, start - loop.time()))
    stream = await ResumableStream.connect(
        url, right_context=cfg.right_context, max_delay_ms=cfg.max_delay_ms, seed=seed,
        reconnect=Reconnect(attempts=cfg.reconnect_attempts, initial_delay_s=0.1, max_delay_s=2.0))

    async def send() -> None:
        try:
            for at, a, b in plan.chunks:
                delay = start + at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                out.sent_at[a:b] = loop.time()
                await stream.send_words(plan.words[a:b])
            out.end_at = loop.time()
            await stream.end()
        except ClientError as e:
            out.errors["send_failed"] += 1
            record.failure = record.failure or str(e)

    sender = asyncio.create_task(send())
    try:
        async with asyncio.timeout(max(0.0, deadline - loop.time())):
            async for message in stream:
                now = loop.time()
                if isinstance(message, Final):
                    out.finals.append((now, message.start, [w.w for w in message.words]))
                elif isinstance(message, Resumed):
                    record.resumed_at.append(now)
                elif isinstance(message, Error):
                    out.errors[str(message.code)] += 1
                elif isinstance(message, Ended):
                    out.ended_words = message.words
    except TimeoutError:
        out.errors["drain_timeout"] += 1
    except ClientError as e:  # ResumeFailed, or a message out of protocol
        out.errors["resume_failed"] += 1
        record.failure = str(e)
    finally:
        if not sender.done():
            sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        await stream.close()
        out.close_code = stream.close_code
    record.notices = list(stream.notices)
    return record


def caption_gaps(record: StreamRecord) -> list[tuple[float, float]]:
    """``(earlier, later)`` arrival times of each two consecutive finals of a session's real-time
    words (finals of the prefill alone, sent at once at the start, are left out)."""
    prefill = record.outcome.plan.prefill
    times = [t for t, start, words in record.outcome.finals if start + len(words) > prefill]
    return list(itertools.pairwise(times))


async def _run(cfg: FailoverConfig, replicas: Replicas, corpus: Sequence[str]) -> tuple[list[StreamRecord], dict]:
    loop = asyncio.get_running_loop()
    lcfg = cfg.load_config()
    rng = random.Random(cfg.seed)
    plans = [plan_session(corpus, rng.randrange(len(corpus)), lcfg, rng) for _ in range(cfg.sessions)]
    t0 = loop.time() + 0.5
    starts = [t0 + rng.uniform(0.0, cfg.stagger_s) for _ in plans]
    last_chunk = max(p.chunks[-1][0] for p in plans)
    deadline = t0 + cfg.stagger_s + last_chunk + cfg.drain_timeout_s
    events: dict = {}

    async def chaos() -> None:
        await asyncio.sleep(max(0.0, t0 + cfg.kill_at_s - loop.time()))
        events["before_kill"] = {k: int(v.get("scur", 0) or 0) for k, v in replicas.stats().items()}
        replicas.servers[0].signal(signal.SIGKILL)
        events["kill_at"] = loop.time()
        if cfg.restart_killed:
            await asyncio.to_thread(replicas.restart, 0)
            events["restarted_at"] = loop.time()
        await asyncio.sleep(max(0.0, t0 + cfg.term_at_s - loop.time()))
        if cfg.restart_killed:
            await asyncio.to_thread(replicas.wait_up, [0], 60.0)
        events["before_term"] = {k: int(v.get("scur", 0) or 0) for k, v in replicas.stats().items()}
        replicas.servers[1].signal(signal.SIGTERM)
        events["term_at"] = loop.time()
        code = await asyncio.to_thread(replicas.servers[1].proc.wait, 60)  # type: ignore[union-attr]
        events["term_exit"] = {"code": code, "after_s": round(loop.time() - events["term_at"], 3)}

    chaos_task = asyncio.create_task(chaos())
    records = await asyncio.gather(*(
        run_resumable_session(replicas.url, plan, start, deadline, cfg, cfg.seed * 100003 + i)
        for i, (plan, start) in enumerate(zip(plans, starts, strict=True))))
    await chaos_task
    events["t0"] = t0
    return list(records), events


def summarize(cfg: FailoverConfig, records: Sequence[StreamRecord], events: dict) -> dict:
    """The result: exactly-once totals, resumes, caption gaps, margins by phase."""
    total = FinalsCheck()
    phases: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    gaps: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    kill_at, term_at, t0 = events["kill_at"], events["term_at"], events["t0"]
    resumed_times = [t for r in records for t in r.resumed_at]
    recovered_at = max([term_at, *resumed_times])
    ended_ok = 0
    for r in records:
        check, times = analyse_session(r.outcome, cfg.right_context, cfg.max_delay_ms)
        total = total + check
        ended_ok += r.outcome.ended_words == r.outcome.n_sent
        decidable = times.final_at - times.margin
        for m, f, d in zip(times.margin, times.final_at, decidable, strict=True):
            phase = "before" if f < kill_at else "after" if d >= recovered_at else "during"
            phases[phase].append(float(m))
        for a, b in caption_gaps(r):
            phase = "before" if b < kill_at else "after" if a >= recovered_at else "during"
            gaps[phase].append(b - a)
    interrupted = [r for r in records if r.notices]
    failed = [r for r in records if r.failure or any(n.start is None for n in r.notices)]
    codes: dict[str, int] = {}
    for r in records:
        for n in r.notices:
            codes[str(n.code)] = codes.get(str(n.code), 0) + 1
    resume_s = [n.seconds for r in records for n in r.notices if n.start is not None]
    return {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "words_sent": int(sum(r.outcome.n_sent for r in records)),
        "words_finalized": total.finalized,
        "words_lost": total.lost,
        "words_duplicated": total.duplicated,
        "words_out_of_order": total.out_of_order,
        "words_mismatched": total.mismatched,
        "sessions": len(records),
        "sessions_ended": ended_ok,
        "sessions_interrupted": len(interrupted),
        "sessions_resumed": len(interrupted) - len([r for r in interrupted if r in failed]),
        "sessions_failed": len(failed),
        "failures": sorted({r.failure for r in failed if r.failure})[:5],
        "interruptions": sum(len(r.notices) for r in records),
        "interruptions_by_close_code": codes,
        "resume_ms": _quantiles_ms(resume_s),
        "longest_caption_gap_ms": _longest_ms([g for v in gaps.values() for g in v]),
        "caption_gap_ms": {phase: {"gaps": len(v), "p95": _quantiles_ms(v)["p95"], "max": _longest_ms(v)}
                           for phase, v in gaps.items()},
        "margin_ms": {phase: {"words": len(v), **_quantiles_ms(v)} for phase, v in phases.items()},
        "events": {
            "kill_at_s": round(kill_at - t0, 3), "term_at_s": round(term_at - t0, 3),
            "recovered_at_s": round(recovered_at - t0, 3),
            "restarted_at_s": round(events["restarted_at"] - t0, 3) if "restarted_at" in events else None,
            "haproxy_sessions_before_kill": events.get("before_kill"),
            "haproxy_sessions_before_term": events.get("before_term"),
            "term_exit": events.get("term_exit"),
        },
        "errors": _errors(records),
    }


def _longest_ms(values: Sequence[float]) -> float | None:
    return round(1e3 * max(values), 1) if values else None


def _errors(records: Sequence[StreamRecord]) -> dict:
    errors: dict[str, int] = {}
    for r in records:
        for k, v in r.outcome.errors.items():
            errors[k] = errors.get(k, 0) + v
    return errors


def ok(result: dict) -> bool:
    """Every word final exactly once, every session ended, every interrupted session resumed."""
    return (result["words_lost"] == result["words_duplicated"] == result["words_out_of_order"]
            == result["words_mismatched"] == result["sessions_failed"] == 0
            and result["sessions_ended"] == result["sessions"])


def _ms(value: float | None) -> str:
    """A figure in ms, or ``-`` where there is none (no word finalized in a phase, no resume)."""
    return "-" if value is None else str(value)


def summary_text(result: dict) -> str:
    m, resume = result["margin_ms"], result["resume_ms"]
    codes = ", ".join(f"{code}: {n}" for code, n in sorted(result["interruptions_by_close_code"].items())) or "none"
    margins = [m[phase]["p95"] for phase in ("before", "during", "after")]
    note = " (-: no word finalized then)" if None in margins else ""
    return (f"{result['sessions']} sessions, {result['words_sent']} words: {result['words_lost']} lost, "
            f"{result['words_duplicated']} duplicated, {result['words_out_of_order']} out of order; "
            f"{result['sessions_interrupted']} interrupted (close codes {codes}), "
            f"{result['sessions_resumed']} resumed (p50 {_ms(resume['p50'])} / max {_ms(resume['max'])} ms), "
            f"{result['sessions_failed']} failed; "
            f"longest caption gap {_ms(result['longest_caption_gap_ms'])} ms; p95 margin "
            f"before {_ms(margins[0])} / during {_ms(margins[1])} / after {_ms(margins[2])} ms{note}")


def replica_spec(cfg: FailoverConfig) -> ReplicaSpec:
    """Each replica's options: its engines get an equal share of the host's cores (at least
    one thread each), as replicas on one host should (docs/deploy.md, "Single host")."""
    engines = cfg.replicas * (cfg.engine_workers or 1)
    return ReplicaSpec(engine=cfg.engine, model_dir=cfg.model_dir, engine_workers=cfg.engine_workers,
                       drain=cfg.drain, startup_timeout_s=cfg.startup_timeout_s,
                       engine_threads=max(1, physical_cores() // engines))


def hold(cfg: FailoverConfig, workdir: Path | None = None) -> int:
    """Start the replicas and HAProxy, print where they are, and keep them until SIGINT/SIGTERM."""
    haproxy = require_haproxy(cfg.haproxy)
    require_model_folder(cfg.engine, cfg.model_dir)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with tempfile.TemporaryDirectory(prefix="replicas-") as tmp:
            folder = Path(workdir) if workdir is not None else Path(tmp)
            with Replicas(replica_spec(cfg), cfg.replicas, folder, haproxy=haproxy) as replicas:
                for k, (server, port) in enumerate(zip(replicas.servers, replicas.ports, strict=True)):
                    print(f"replica r{k + 1}: ws://127.0.0.1:{port}/v1/stream (pid {server.pid})")
                print(f"balancer: {replicas.url} (HAProxy stats socket {replicas.stats_socket}; "
                      "Ctrl-C stops everything)", flush=True)
                stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def run_failover_bench(cfg: FailoverConfig, *, command: str | None = None, workdir: Path | None = None) -> dict:
    """Run the bench; writes ``<out_dir>/<name>.json`` and returns the result."""
    prepare_out_dir(cfg.out_dir, f"{cfg.name}.json")
    haproxy = require_haproxy(cfg.haproxy)
    require_model_folder(cfg.engine, cfg.model_dir)
    corpus = load_corpus(cfg.data)
    with tempfile.TemporaryDirectory(prefix="failover-") as tmp:
        folder = Path(workdir) if workdir is not None else Path(tmp)
        with Replicas(replica_spec(cfg), cfg.replicas, folder, haproxy=haproxy) as replicas:
            records, events = asyncio.run(_run(cfg, replicas, corpus))
            health = asyncio.run(http_get(replicas.url, "/healthz"))
        result = summarize(cfg, records, events)
        result["balancer_healthz_after"] = health[0] if health else None
    result["ok"] = ok(result)
    path = write_result(cfg.name, result, cfg.out_dir, command=command)
    print(summary_text(result))
    print(f"wrote {path}")
    return result


def add_failover_arguments(p: argparse.ArgumentParser) -> None:
    from streampunct.commands.argtypes import (
        choices,
        non_negative_int,
        path_argument,
        positive_float,
        positive_int,
    )
    from streampunct.server.app import DrainMode

    d = FailoverConfig()
    p.add_argument("--replicas", type=positive_int, default=d.replicas, help=f"replicas (default {d.replicas})")
    p.add_argument("--sessions", type=positive_int, default=d.sessions,
                   help=f"concurrent real-time sessions (default {d.sessions})")
    p.add_argument("--engine", default=d.engine, choices=list(BACKENDS),
                   help="replicas' engine backend, or fake (default: onnxruntime)")
    p.add_argument("--model", type=model_folder_argument, default=None, help="model folder (default: the shipped model)")
    p.add_argument("--engine-workers", type=positive_int, default=d.engine_workers,
                   help=f"serve --engine-workers of each replica (default {d.engine_workers})")
    p.add_argument("--drain", choices=choices(DrainMode), default=d.drain,
                   help=f"serve --drain of the replicas (default {d.drain})")
    p.add_argument("--duration-s", type=positive_float, default=d.duration_s,
                   help=f"seconds of real-time speech per session (default {d.duration_s:g})")
    p.add_argument("--wps", type=positive_float, default=d.words_per_second, help="speech rate, words/s")
    p.add_argument("--kill-at-s", type=positive_float, default=d.kill_at_s,
                   help=f"SIGKILL replica 1 at this second (default {d.kill_at_s:g})")
    p.add_argument("--term-at-s", type=positive_float, default=d.term_at_s,
                   help=f"SIGTERM replica 2 at this second (default {d.term_at_s:g})")
    p.add_argument("--restart-killed", action="store_true",
                   help="start the killed replica again on its port (needed with 2 replicas)")
    p.add_argument("--right-context", type=non_negative_int, default=d.right_context)
    p.add_argument("--max-delay-ms", type=non_negative_int, default=d.max_delay_ms)
    p.add_argument("--data", type=path_argument, default=d.data, help="transcript the sessions read")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--haproxy", default=d.haproxy, help="the haproxy binary (default: haproxy on PATH)")
    p.add_argument("--hold", action="store_true",
                   help="only start the replicas and HAProxy, print the balancer's URL and keep them "
                        "until Ctrl-C (no sessions, no failures)")
    p.add_argument("--out-dir", type=path_argument, default=d.out_dir, help="where the JSON goes")
    p.add_argument("--name", type=result_stem, default=d.name, help=f"result file stem (default {d.name})")


def config_from_args(args: argparse.Namespace) -> FailoverConfig:
    return replace(FailoverConfig(), replicas=args.replicas, sessions=args.sessions, engine=args.engine,
                   model_dir=args.model, engine_workers=args.engine_workers, drain=args.drain,
                   duration_s=args.duration_s, words_per_second=args.wps, kill_at_s=args.kill_at_s,
                   term_at_s=args.term_at_s, restart_killed=args.restart_killed,
                   right_context=args.right_context, max_delay_ms=args.max_delay_ms, data=args.data,
                   seed=args.seed, haproxy=args.haproxy, out_dir=args.out_dir, name=args.name)


def run_failover_from_args(args: argparse.Namespace, *, command: str | None = None) -> int:
    from streampunct.errors import InputError

    if args.hold:  # no schedule: any 2 replicas will do
        args.restart_killed = True
    try:
        cfg = config_from_args(args)
    except ValueError as e:
        raise InputError(str(e)) from None
    if args.hold:
        return hold(cfg)
    result = run_failover_bench(cfg, command=command)
    return 0 if result["ok"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.failover_bench", description=__doc__.split("\n")[0])
    add_failover_arguments(p)
    return run_failover_from_args(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(run_module(main, "python -m benchmarks.failover_bench"))
