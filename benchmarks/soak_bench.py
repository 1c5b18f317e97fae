"""``bench soak``: reconnecting real-time sessions against one server for a long time, and its memory.

A leak that costs a few kilobytes per session, or per window, never shows in
a 30-second load step. This benchmark starts the same child server as
``bench load`` (:class:`~benchmarks.server_under_test.ServerProcess`), keeps
``sessions`` real-time sessions open for ``duration_s`` (default 30 min), each
streaming ``session_s`` seconds of transcript (the load bench's
:func:`~benchmarks.load_bench.plan_session` and
:func:`~benchmarks.load_clients.run_session`), ending, and reconnecting at
once, and samples the server's RSS (psutil) every ``sample_s`` seconds. It
reports RSS after a warm-up, its least-squares slope in MB/hour
(:func:`~benchmarks.soak_report.rss_trend`), every session's exactly-once
check, and the server's ``/metrics`` over the run, as JSON and PNG.

``--tracemalloc`` runs the server under
:mod:`benchmarks.server_tracemalloc`: a snapshot when the warm-up ends,
another at the end of the run, and the source lines whose memory grew most
between them go into the JSON (``tracemalloc_growth``), with glibc's heap
figures at both snapshots and the RSS before and after a ``malloc_trim(0)``
at the end (``native``): memory that the heap holds free, not a leak, shows there.

The server trims its allocator itself (``BatcherConfig.trim_interval_s``): the
JSON's ``allocator`` has the trims over the run and their cost, from ``/metrics``.
With trims every few seconds the RSS is a saw tooth: it is sampled every
second (``--sample-s``, default 1) so that a slope is not an alias of the teeth.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    check_non_negative,
    check_positive,
    count_text,
    machine,
    prepare_out_dir,
    publish,
    result_stem,
    run_failed,
)
from benchmarks.load_bench import (
    LoadBenchConfig,
    analyse_session,
    load_corpus,
    plan_session,
)
from benchmarks.load_clients import run_session
from benchmarks.load_finals import FinalsCheck
from benchmarks.load_metrics import metrics_delta, parse_metrics, server_figures
from benchmarks.server_under_test import (
    ServerProcess,
    ServerUnderTest,
    add_server_arguments,
    bench_config,
    http_get,
    json_ready,
    server_from_args,
)
from benchmarks.soak_report import plot_soak, rss_trend, summary_text

#: The server's flags of ``bench soak``; its JSON ``config`` also has the startup timeout.
SOAK_SERVER_FLAGS = ("model_dir", "engine", "right_context", "max_delay_ms", "max_batch", "max_wait_ms",
                     "fake_batch_ms", "fake_token_us", "fake_sleep", "engine_options")


@dataclass(frozen=True)
class SoakConfig:
    """Options of the soak benchmark.

    Attributes:
        server: the server started (:class:`~benchmarks.server_under_test.ServerUnderTest`;
            ``engine="fake"``: the synthetic engine); its ``right_context`` and ``max_delay_ms``
            are also the sessions' options.
        sessions: sessions open at a time.
        duration_s: how long the soak runs (no session starts that would end after it).
        session_s: seconds of real-time speech per session, then ``end`` and a new session.
        words_per_second: speech rate of every session.
        sample_s: RSS sampling period.
        warmup_s: samples before this are left out of the slope (None: a fifth
            of the duration, at most 300 s).
        tracemalloc: run the server under tracemalloc and report its top allocation growth.
        data, seed: transcript and randomness.
        out_dir, name: where ``<name>.json`` and ``<name>.png`` go.
    """

    server: ServerUnderTest = ServerUnderTest()
    sessions: int = 20
    duration_s: float = 1800.0
    session_s: float = 60.0
    words_per_second: float = 2.5
    sample_s: float = 1.0
    warmup_s: float | None = None
    tracemalloc: bool = False
    data: Path = Path("data/iwslt2011/test2011")
    seed: int = 0
    out_dir: Path = RESULTS_DIR
    name: str = "soak"

    def __post_init__(self) -> None:
        if self.sessions < 1:
            raise ValueError(f"sessions must be >= 1, not {self.sessions}")
        # `not x > 0`, not `x <= 0`: NaN is refused too
        check_positive(duration_s=self.duration_s, session_s=self.session_s, sample_s=self.sample_s,
                       words_per_second=self.words_per_second)
        if self.warmup_s is not None:
            check_non_negative(warmup_s=self.warmup_s)
        if self.session_s >= self.duration_s:
            raise ValueError(f"session_s must be shorter than duration_s (got session_s {self.session_s:g}, "
                             f"duration_s {self.duration_s:g})")
        if self.duration_s < min_duration_s(self.session_s):
            raise ValueError(f"duration_s must be at least {min_duration_s(self.session_s):g} s for session_s "
                             f"{self.session_s:g}, or no session may start (got duration_s {self.duration_s:g})")
        if self.warmup_s is not None and self.warmup_s >= self.duration_s:
            raise ValueError(f"warmup_s must be shorter than duration_s (got warmup_s {self.warmup_s:g}, "
                             f"duration_s {self.duration_s:g})")
        self.load_config()  # what every session plans with: refused now, not inside the sessions

    @property
    def effective_warmup_s(self) -> float:
        return self.warmup_s if self.warmup_s is not None else min(300.0, self.duration_s / 5)

    def load_config(self) -> LoadBenchConfig:
        """The load bench's view: one session's plan (and the same server)."""
        return LoadBenchConfig(server=self.server, sessions=(self.sessions,), duration_s=self.session_s,
                               words_per_second=self.words_per_second, data=self.data, seed=self.seed)

    def to_json(self) -> dict:
        """The ``config`` of the JSON: the server's fields and the bench's, side by side."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "server"}
        server = self.server.to_json(SOAK_SERVER_FLAGS + ("startup_timeout_s",))
        return json_ready({**server, **own})


@dataclass
class SoakTotals:
    """What all sessions of the soak saw."""

    sessions_completed: int = 0
    words_sent: int = 0
    check: FinalsCheck = field(default_factory=FinalsCheck)
    errors: Counter = field(default_factory=Counter)


def min_duration_s(session_s: float) -> float:
    """The shortest soak in which every slot starts a session (:func:`_session_loop`): its spread
    start (up to ``min(session_s, 10)``), the 3 s kept for the last finals, and the shortest
    session it starts (``min(session_s, 5)``)."""
    return min(session_s, 10.0) + 3.0 + min(session_s, 5.0)


async def _session_loop(
    url: str, cfg: SoakConfig, corpus: Sequence[str], end_at: float, totals: SoakTotals, rng: random.Random
) -> None:
    """One slot: sessions back to back until ``end_at`` (the last one shorter, to end in time)."""
    from streampunct.client.stream_client import StreamClient

    loop = asyncio.get_running_loop()
    load_cfg = cfg.load_config()
    drain_s = load_cfg.max_delay_ms / 1000.0 + load_cfg.drain_timeout_s
    await asyncio.sleep(rng.uniform(0.0, min(cfg.session_s, 10.0)))  # spread reconnections
    while True:
        remaining = end_at - loop.time() - 3.0  # prefill gap, jitter, last finals
        if remaining < min(cfg.session_s, 5.0):
            return
        plan_cfg = load_cfg if remaining >= cfg.session_s else replace(load_cfg, duration_s=remaining)
        plan = plan_session(corpus, rng.randrange(len(corpus)), plan_cfg, rng)
        try:
            client = await StreamClient.connect(
                url, open_timeout=load_cfg.connect_timeout_s, right_context=load_cfg.right_context,
                max_delay_ms=load_cfg.max_delay_ms, partials=False,
            )
        except Exception as e:  # noqa: BLE001 (a refused session is a finding, not a crash)
            totals.errors[f"connect:{type(e).__name__}"] += 1
            await asyncio.sleep(1.0)
            continue
        start = loop.time() + 0.05
        out = await run_session(client, plan, start, start + plan.chunks[-1][0] + drain_s)
        check, _ = analyse_session(out, load_cfg.right_context, load_cfg.max_delay_ms)
        totals.check = totals.check + check
        totals.errors.update(out.errors)
        totals.words_sent += out.n_sent
        totals.sessions_completed += 1


async def _sample_rss(
    server: ServerProcess, every: float, t0: float, stop: asyncio.Event, samples: list[tuple[float, float]],
    on_warm: tuple[float, asyncio.Event] | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    while True:
        rss = server.rss_mb()
        now = loop.time() - t0
        if rss is not None:
            samples.append((round(now, 2), round(rss, 2)))
        if on_warm is not None and now >= on_warm[0] and not on_warm[1].is_set():
            on_warm[1].set()
        try:
            await asyncio.wait_for(stop.wait(), every)
            return
        except TimeoutError:
            pass


async def _soak(cfg: SoakConfig, server: ServerProcess, url: str, corpus: Sequence[str]) -> dict:
    loop = asyncio.get_running_loop()
    totals = SoakTotals()
    samples: list[tuple[float, float]] = []
    stop, warm = asyncio.Event(), asyncio.Event()
    t0 = loop.time()
    before = await http_get(url, "/metrics")
    sampler = asyncio.create_task(
        _sample_rss(server, cfg.sample_s, t0, stop, samples, (cfg.effective_warmup_s, warm))
    )
    if cfg.tracemalloc:
        warm_task = asyncio.create_task(warm.wait())
        warm_task.add_done_callback(  # the baseline snapshot, once warm (not when cancelled at the end)
            lambda t: None if t.cancelled() else server.signal(signal.SIGUSR1)
        )
    rng = random.Random(cfg.seed)
    slots = [random.Random(rng.random()) for _ in range(cfg.sessions)]
    await asyncio.gather(*(_session_loop(url, cfg, corpus, t0 + cfg.duration_s, totals, r) for r in slots))
    await asyncio.sleep(min(cfg.sample_s, 2.0))  # one sample with every session closed
    stop.set()
    await sampler
    wall = loop.time() - t0
    after = await http_get(url, "/metrics")
    figures: dict = {}
    trims: dict = {}
    if before and after and before[0] == 200 and after[0] == 200:
        delta = metrics_delta(parse_metrics(before[1]), parse_metrics(after[1]))
        figures = server_figures(delta, wall)
        trims = allocator_figures(delta)
    return {"totals": totals, "samples": samples, "wall_s": round(wall, 1), "server_figures": figures,
            "allocator": trims, "warm": warm.is_set()}


def allocator_figures(delta: dict) -> dict:
    """The server's allocator trims over the run (``streampunct_allocator_*`` of ``/metrics``)."""
    def total(name: str) -> float:
        return sum(v for (sample, _), v in delta.items() if sample == name)

    n = total("streampunct_allocator_trims_total")
    seconds = total("streampunct_allocator_trim_seconds_total")
    return {"trims": n, "trim_seconds": round(seconds, 3), "trim_ms_mean": round(1000 * seconds / n, 2) if n else None}


def _wait_for_file(path: Path, timeout: float) -> dict | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file():
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                pass
        time.sleep(0.2)
    return None


def run_failure(payload: dict) -> str | None:
    """Why a soak measured nothing (None: it did): no session completed, or none finalized a word."""
    totals = payload["totals"]
    errors = count_text(totals["errors"])
    if not totals["sessions_completed"]:
        if not totals["errors"]:  # none tried: a session starts only with min(session_s, 5) + 3 s left
            return "no session completed: none started (--duration too short for a session)"
        return f"no session completed (errors {errors})"
    if not totals["check"]["finalized"]:
        return f"every session failed: no word was finalized (errors {errors})"
    return None


def run_soak_bench(cfg: SoakConfig, *, command: str | None = None) -> dict:
    """Run the soak; write ``<name>.json`` and ``<name>.png``; return the payload."""
    started = time.monotonic()
    prepare_out_dir(cfg.out_dir, f"{cfg.name}.json", f"{cfg.name}.png")
    corpus = load_corpus(cfg.data)
    where = machine()
    print(f"bench soak on {where['cpu'] or 'unknown CPU'} ({where['cores']} cores): {cfg.sessions} sessions "
          f"for {cfg.duration_s:.0f}s, {cfg.session_s:.0f}s each", flush=True)
    notes: list[str] = []
    growth = None
    with tempfile.TemporaryDirectory(prefix="streampunct-soak-") as tmp:
        growth_path = Path(tmp) / "tracemalloc.json"
        wrapper = ["-m", "benchmarks.server_tracemalloc", "--trim", str(growth_path)] if cfg.tracemalloc else []
        server = ServerProcess(cfg.server, max_sessions=cfg.sessions + 16, workdir=Path(tmp), wrapper=wrapper)
        try:
            url = server.start()
            print(f"server ready at {url} ({server.engine}, {server.model}); pid {server.pid}", flush=True)
            result = asyncio.run(_soak(cfg, server, url, corpus))
            if cfg.tracemalloc and result["warm"] and server.signal(signal.SIGUSR1):
                growth = _wait_for_file(growth_path, 120.0)
        finally:
            rc = server.stop()
        if rc not in (0, None, -signal.SIGTERM):
            notes.append(f"server exit code {rc}; log tail:\n{server.log_tail()}")
        if cfg.tracemalloc and growth is None:
            growth = _wait_for_file(growth_path, 1.0)  # written at exit
    if cfg.tracemalloc:
        notes.append("the server ran under tracemalloc: RSS is higher and grows with its traces")
    trend = rss_trend(result["samples"], cfg.effective_warmup_s)
    if trend["slope_mb_per_h"] is None:
        notes.append("too few samples after warm-up for a slope (run longer or shorten --warmup)")
    totals: SoakTotals = result["totals"]
    payload = {
        "server": {"engine": server.engine or cfg.server.engine, "model": server.model,
                   "model_dir": str(cfg.server.model_dir) if cfg.server.model_dir else None},
        "config": cfg.to_json(),
        "rss": trend,
        "totals": {"sessions_completed": totals.sessions_completed, "words_sent": totals.words_sent,
                   "check": asdict(totals.check), "errors": dict(sorted(totals.errors.items()))},
        "server_figures": result["server_figures"],
        "allocator": result["allocator"],
        "samples": result["samples"],
        "wall_s": result["wall_s"],
        "total_s": round(time.monotonic() - started, 1),
        "notes": notes,
    }
    if growth is not None:
        payload["tracemalloc_growth"] = growth
    if run_failure(payload) is None:  # a soak that measured nothing writes nothing (as bench load)
        publish(cfg.name, payload, cfg.out_dir, command=command, plot=plot_soak, summary=summary_text)
    return payload


# -- command line ------------------------------------------------------------------------


def add_soak_arguments(p: argparse.ArgumentParser) -> None:
    from streampunct.commands.argtypes import (
        non_negative_float,
        path_argument,
        positive_float,
        positive_int,
    )

    d = SoakConfig()
    p.add_argument("--sessions", type=positive_int, default=d.sessions,
                   help="sessions open at a time (default: %(default)s)")
    p.add_argument("--duration", type=positive_float, default=d.duration_s,
                   help="seconds to run (default: %(default)s)")
    p.add_argument("--session-s", type=positive_float, default=d.session_s,
                   help="seconds of speech per session before it ends and reconnects (default: %(default)s)")
    p.add_argument("--wps", type=positive_float, default=d.words_per_second,
                   help="words/s per session (default: %(default)s)")
    p.add_argument("--sample-s", type=positive_float, default=d.sample_s,
                   help="RSS sampling period (default: %(default)s)")
    p.add_argument("--warmup", type=non_negative_float, default=None,
                   help="seconds left out of the slope (default: a fifth of --duration, at most 300)")
    p.add_argument("--tracemalloc", action="store_true",
                   help="run the server under tracemalloc and report its top allocation growth")
    p.add_argument("--data", type=path_argument, default=d.data, help="transcript (default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--out-dir", type=path_argument, default=d.out_dir)
    p.add_argument("--name", type=result_stem, default=d.name, help="result file stem (default: %(default)s)")
    add_server_arguments(p.add_argument_group("the server started"), d.server, SOAK_SERVER_FLAGS)


def config_from_args(args: argparse.Namespace) -> SoakConfig:
    server = server_from_args(args)
    try:
        return SoakConfig(
            server=server, sessions=args.sessions, duration_s=args.duration, session_s=args.session_s,
            words_per_second=args.wps, sample_s=args.sample_s, warmup_s=args.warmup, tracemalloc=args.tracemalloc,
            data=args.data, seed=args.seed, out_dir=args.out_dir, name=args.name,
        )
    except ValueError as e:  # SoakConfig's checks name its fields: the user gave the options
        raise ValueError(re.sub(r"\b(duration_s|session_s|warmup_s)\b", lambda m: _SOAK_FLAGS[m.group(1)],
                                str(e))) from None


#: SoakConfig's fields that its command line names otherwise.
_SOAK_FLAGS = {"duration_s": "--duration", "session_s": "--session-s", "warmup_s": "--warmup"}


def run_soak_from_args(args: argparse.Namespace, *, command: str | None = None) -> int:
    from streampunct.errors import InputError

    cfg = bench_config(config_from_args, args)
    try:
        payload = run_soak_bench(cfg, command=command)
    except RuntimeError as e:
        raise InputError(str(e)) from None
    failure = run_failure(payload)
    return run_failed("soak", failure) if failure else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak_bench", description="server memory soak")
    add_soak_arguments(p)
    return run_soak_from_args(p.parse_args(argv), command="python -m benchmarks.soak_bench " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    from benchmarks.common import run_module

    raise SystemExit(run_module(main, "python -m benchmarks.soak_bench"))
