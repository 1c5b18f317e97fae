"""``bench load``: concurrent real-time sessions against one server, and the SLO search.

The benchmark starts a server in a separate process (``streampunct serve`` on
a model folder, or ``streampunct serve --engine fake``, a synthetic engine that
needs no model), or targets a running one (``--url``, loopback only). It
then runs a ramp of steps; a step opens N concurrent sessions from one
asyncio loop (or from ``--client-processes`` loops: :mod:`benchmarks.load_clients`), and each session streams a real transcript (the words of
``data/iwslt2011/test2011``, labels stripped, each session from its own
offset) at a real-time word rate in ASR-like chunks of 1..``max_chunk`` words
with commit jitter, then sends ``end``. Each session first sends a
``prefill`` of words in one message (as a client joining a talk in progress
would) so that measured windows carry a steady-state left context; prefill
words are checked but not timed.

Per word the client records the send time, the time the latency contract
made it decidable (the send time of the ``right_context``-th later word, its
send time + ``max_delay_ms``, or the ``end``, whichever came first) and the
arrival of its final. Reported per step:

* finalize margin (final arrival - decidable) and end-to-end latency
  (final arrival - send), p50/p95/p99/max;
* words/s finalized against words/s offered (N x wps): of the words sent while every
  session was streaming (:func:`steady_window`), the share finalized in time, times the
  offered rate, so a step counts the finals of the words it offered and never more;
* :func:`check_finals`: every word finalized exactly once, in order, and
  echoed back as sent (lost, duplicated, out-of-order, mismatched);
* errors by code, sessions that failed to connect;
* server side (scraped from ``/metrics`` before and after the step):
  engine batch sizes, engine call time and the fraction of the step the
  engine was busy, the server's own margin histogram; the server process'
  CPU (``/proc``) and the whole machine's, so that other load shows;
* the load generator's own overhead: how late chunks went out against their
  schedule, event-loop lag, and its CPU. When it fell behind, the step says
  so: its margins then include client-side delay.

With ``--itn on`` every session asks for ``itn`` (the started server loads
the ITN grammars: ``serve --itn-grammars on``, in ``--itn-workers``
processes); with ``--itn both`` every step runs twice on the same server and
schedule, ``itn`` off and then on, and reports the difference of the p95
finalize margins (on - off): the ITN acceptance's "within 10 ms of off, in
one sitting".

The SLO (default: p95 finalize margin <= 100 ms, no lost, duplicated,
out-of-order or mismatched word, every session connected) is checked per
step; the ramp stops at the first step that breaks it, optionally refines
between the last good and the first bad N, and reports the largest N that
met it, with the curve as JSON and PNG. The whole run is bounded by
``max_total_s``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from benchmarks.common import (
    REPO,
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
from benchmarks.load_clients import ClientOptions, SessionOutcome, SessionPlan, make_clients
from benchmarks.load_finals import FinalsCheck, check_finals
from benchmarks.load_metrics import metrics_delta, parse_metrics, server_figures
from benchmarks.load_report import format_step, plot_load, profile_top, summary_text, target_verdict
from benchmarks.load_search import best_sessions, next_refinement, slo_failures
from benchmarks.server_under_test import (
    SERVER_FLAGS,
    ServerProcess,
    ServerUnderTest,
    add_server_arguments,
    bench_config,
    http_get,
    json_ready,
    machine_cpu_busy,
    server_from_args,
)
from streampunct.core.latency import decidable_times
from streampunct.errors import InputError

#: Default ramp of concurrent sessions.
DEFAULT_RAMP = (25, 50, 100, 150, 200, 250, 300, 400)

#: ``--itn``: sessions without ITN, with it, or each step both ways (off, then on).
ITN_MODES = ("off", "on", "both")

#: The server's flags and ``config`` fields of ``bench load``: all but ``itn_grammars`` (``--itn`` says).
LOAD_SERVER_FIELDS = SERVER_FLAGS + ("startup_timeout_s",)

#: Sessions one load-generator loop drives by default (a quarter of a core on an H200 host).
SESSIONS_PER_CLIENT = 1000

#: Client-side delays above these mean the load generator itself fell behind.
CLIENT_SEND_LAG_P95_MS = 25.0
CLIENT_LOOP_LAG_P99_MS = 50.0


@dataclass(frozen=True)
class LoadBenchConfig:
    """Options of the load benchmark.

    Attributes:
        url: target a running server (``ws://127.0.0.1:PORT/v1/stream``) instead of starting one.
        server: the server started (:class:`~benchmarks.server_under_test.ServerUnderTest`: model,
            engine or ``fake``, batching, engine workers, stream cache, ITN workers, fake engine
            costs, cProfile, startup timeout); its ``right_context`` and ``max_delay_ms`` are also
            what every session asks for (the latency contract), with ``url`` too.
        sessions: the ramp of concurrent sessions, ascending.
        duration_s: real-time streaming per session and step (seconds of speech).
        words_per_second: speech rate of every session.
        max_chunk: ASR chunks carry 1..max_chunk words.
        jitter_ms: a chunk is committed up to this long after its last word was spoken.
        prefill_words: words sent in one message at a session's start (not timed).
        stagger_s: session starts are spread uniformly over this long.
        slo_p95_ms: the SLO on the p95 finalize margin.
        target_sessions: the N the project aims at (reported as met or not).
        max_total_s: the whole benchmark stops starting steps beyond this.
        drain_timeout_s: how long after its last word a session waits for its finals.
        refine_steps: extra steps between the last good and the first bad N.
        connect_timeout_s: handshake timeout per session.
        data: the transcript (``word<TAB>LABEL``; labels are ignored).
        seed: chunking, jitter and start times.
        itn: ``off``, ``on`` (sessions ask for ``itn``; the started server loads the
            grammars) or ``both`` (each step with ``itn`` off, then on; the step's
            figures are the ``on`` run's, with the ``off`` run under ``itn_off``).
        out_dir, name: where ``<name>.json`` and ``<name>.png`` go.
        sample_profile: sample the started server's stacks with py-spy for most of each step
            and add where its CPU went (:mod:`benchmarks.cpu_profile`) to the step's figures.
        client_processes: processes the sessions of a step are spread over
            (:mod:`benchmarks.load_clients`): one loop drives about a thousand real-time
            sessions at a quarter of a core, so a GPU tier's thousands need several.
            0 (default): one per started thousand sessions of the step
            (:func:`client_processes_for`).
    """

    url: str | None = None
    server: ServerUnderTest = ServerUnderTest()
    sessions: tuple[int, ...] = DEFAULT_RAMP
    duration_s: float = 30.0
    words_per_second: float = 2.5
    max_chunk: int = 4
    jitter_ms: float = 150.0
    prefill_words: int = 48
    stagger_s: float = 2.0
    slo_p95_ms: float = 100.0
    target_sessions: int = 150
    max_total_s: float = 540.0
    drain_timeout_s: float = 15.0
    refine_steps: int = 2
    connect_timeout_s: float = 10.0
    data: Path = Path("data/iwslt2011/test2011")
    seed: int = 0
    itn: str = "off"
    out_dir: Path = RESULTS_DIR
    name: str = "load"
    sample_profile: bool = False
    client_processes: int = 0

    def __post_init__(self) -> None:
        if self.client_processes < 0:
            raise ValueError(f"client_processes must be >= 0 (0: one per thousand sessions), "
                             f"got {self.client_processes}")
        if self.itn not in ITN_MODES:
            raise ValueError(f"itn must be one of {', '.join(ITN_MODES)}, not {self.itn!r}")
        if not self.sessions or min(self.sessions) < 1:
            raise ValueError("sessions must be a non-empty list of positive counts")
        # `not x > 0`, not `x <= 0`: NaN is refused too (and inf, which no schedule can hold)
        check_positive(words_per_second=self.words_per_second, duration_s=self.duration_s,
                       slo_p95_ms=self.slo_p95_ms, max_total_s=self.max_total_s,
                       drain_timeout_s=self.drain_timeout_s, connect_timeout_s=self.connect_timeout_s)
        if self.max_chunk < 1 or self.prefill_words < 0:
            raise ValueError("max_chunk must be >= 1 and prefill_words >= 0")
        check_non_negative(jitter_ms=self.jitter_ms, stagger_s=self.stagger_s)
        if self.target_sessions < 1 or self.refine_steps < 0:
            raise ValueError(f"target_sessions must be >= 1 and refine_steps >= 0, not {self.target_sessions} "
                             f"and {self.refine_steps}")
        if self.url is not None:
            host = urlsplit(self.url).hostname or ""
            if urlsplit(self.url).scheme != "ws" or host not in ("127.0.0.1", "localhost", "::1"):
                raise ValueError(f"the load bench talks to loopback only (ws://127.0.0.1:PORT/...), not {self.url}")

    @property
    def right_context(self) -> int:
        """What every session asks for (the server's, :attr:`server`)."""
        return self.server.right_context

    @property
    def max_delay_ms(self) -> int:
        """What every session asks for (the server's, :attr:`server`)."""
        return self.server.max_delay_ms

    def started_server(self) -> ServerUnderTest:
        """The server to start: :attr:`server`, with the ITN grammars when sessions ask for ``itn``."""
        return replace(self.server, itn_grammars=self.server.itn_grammars or self.itn != "off")

    def to_json(self) -> dict:
        """The ``config`` of the JSON: the server's fields and the bench's, side by side."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "server"}
        return json_ready({"url": own.pop("url"), **self.server.to_json(LOAD_SERVER_FIELDS), **own})


def client_processes_for(cfg: LoadBenchConfig, n: int) -> int:
    """The load-generator processes of a step of ``n`` sessions: ``cfg.client_processes``, or
    (0) one per started :data:`SESSIONS_PER_CLIENT`, at most one per core."""
    if cfg.client_processes:
        return cfg.client_processes
    return max(1, min(os.cpu_count() or 1, -(-n // SESSIONS_PER_CLIENT)))


def step_estimate_s(cfg: LoadBenchConfig, n: int) -> float:
    """Rough wall time of a step that keeps up (connects, stagger, speech, last finals)."""
    speech = (1.0 if cfg.prefill_words else 0.0) + cfg.duration_s + cfg.jitter_ms / 1000.0
    return 1.5 + 0.01 * n + cfg.stagger_s + speech + 1.0


def load_corpus(path: Path) -> list[str]:
    """Normalized non-empty words of a ``word<TAB>LABEL`` file (or plain text)."""
    from streampunct.client.caption_input import read_transcript
    from streampunct.text.normalize import normalize_word

    path = Path(path)
    if not path.exists() and not path.is_absolute() and (REPO / path).exists():
        path = REPO / path
    words = [w for w in (normalize_word(x) for x in read_transcript(path)) if w]
    if not words:
        raise InputError(f"{path}: no words to stream")
    return words


def plan_session(
    corpus: Sequence[str], offset: int, cfg: LoadBenchConfig, rng: random.Random
) -> SessionPlan:
    """Words from ``offset`` (wrapping), a prefill chunk, then real-time ASR-like chunks.

    Real-time word ``k`` is spoken at ``gap + (k + 1) / wps``; a chunk is
    committed when its last word was spoken plus a random jitter, never
    before the previous chunk.
    """
    n_rt = max(1, int(round(cfg.duration_s * cfg.words_per_second)))
    total = cfg.prefill_words + n_rt
    words = tuple(corpus[(offset + k) % len(corpus)] for k in range(total))
    chunks: list[tuple[float, int, int]] = []
    gap = 0.0
    if cfg.prefill_words:
        chunks.append((0.0, 0, cfg.prefill_words))
        gap = 1.0
    i, last_t = cfg.prefill_words, 0.0
    while i < total:
        j = min(total, i + rng.randint(1, cfg.max_chunk))
        t = gap + (j - cfg.prefill_words) / cfg.words_per_second + rng.uniform(0.0, cfg.jitter_ms / 1000.0)
        last_t = max(last_t, t)
        chunks.append((last_t, i, j))
        i = j
    return SessionPlan(words, tuple(chunks), cfg.prefill_words)


@dataclass(frozen=True)
class SessionTimes:
    """Per measured word of one session: margin and end-to-end latency (seconds)."""

    margin: np.ndarray
    latency: np.ndarray
    final_at: np.ndarray


def first_final_times(out: SessionOutcome) -> np.ndarray:
    """Per sent word of one session, the arrival of its first final (NaN: none came)."""
    n = out.n_sent
    final_at = np.full(n, np.nan)
    for t, start, words in out.finals:
        lo, hi = max(0, start), min(n, start + len(words))
        if lo < hi:
            seg = final_at[lo:hi]
            seg[np.isnan(seg)] = t
    return final_at


def analyse_session(
    out: SessionOutcome, right_context: int, max_delay_ms: int
) -> tuple[FinalsCheck, SessionTimes]:
    """The exactly-once check and the timing of the measured (non-prefill) words."""
    n = out.n_sent
    sent = out.sent_at[:n]
    check = check_finals(out.plan.words[:n], ({"start": s, "words": w} for _, s, w in out.finals))
    final_at = first_final_times(out)
    decidable = decidable_times(sent, right_context, max_delay_ms, [] if out.end_at is None else [(n, out.end_at)])
    measured = np.arange(n) >= out.plan.prefill
    measured &= ~np.isnan(final_at)
    return check, SessionTimes((final_at - decidable)[measured], (final_at - sent)[measured], final_at[measured])


def _quantiles_ms(values: np.ndarray | Sequence[float]) -> dict:
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return {"p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {
        "p50": round(1e3 * float(p50), 1),
        "p95": round(1e3 * float(p95), 1),
        "p99": round(1e3 * float(p99), 1),
        "max": round(1e3 * float(values.max()), 1),
        "mean": round(1e3 * float(values.mean()), 1),
    }


async def run_step(
    url: str, n: int, cfg: LoadBenchConfig, corpus: Sequence[str], server: ServerProcess | None, seed: int,
    *, itn: bool = False,
) -> dict:
    """N concurrent sessions (asking for ``itn`` or not) for one step; returns its figures and the
    SLO verdict."""
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    stride = max(1, len(corpus) // n)
    plans = [plan_session(corpus, (i * stride + rng.randrange(stride)) % len(corpus), cfg, rng)
             for i in range(n)]
    options = ClientOptions(cfg.right_context, cfg.max_delay_ms, itn=itn, connect_timeout_s=cfg.connect_timeout_s)
    clients = make_clients(url, plans, options, client_processes_for(cfg, n))
    try:
        joined = await clients.connect()
        errors: Counter = Counter(joined.errors)
        connect_s = joined.seconds
        connected = [p for p, ok in zip(plans, joined.mask, strict=True) if ok]

        before = await http_get(url, "/metrics")
        cpu0 = server.cpu_seconds() if server else None
        loop_cpu0 = server.loop_cpu_seconds() if server else None
        machine0 = machine_cpu_busy()
        parent_cpu0, wall0 = time.process_time(), time.perf_counter()

        sampler = None
        if cfg.sample_profile and server is not None and server.pid is not None:
            from benchmarks.cpu_profile import py_spy_command

            stacks = cfg.out_dir / f"{cfg.name}_N{n}{'_itn' if itn else ''}.stacks"
            cfg.out_dir.mkdir(parents=True, exist_ok=True)
            # from the stagger's end over most of the speech: the steady state of the step
            sampler = await asyncio.create_subprocess_exec(
                *py_spy_command(server.pid, 0.8 * cfg.duration_s, stacks),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        t0 = loop.time() + 0.2
        plan_end = max((p.chunks[-1][0] for p in plans), default=0.0)
        deadline = t0 + cfg.stagger_s + plan_end + cfg.max_delay_ms / 1000.0 + cfg.drain_timeout_s
        starts = [t0 + rng.uniform(0.0, cfg.stagger_s) for _ in connected]
        ran = await clients.run(starts, deadline)
    finally:
        clients.close()
    outcomes, lags = ran.outcomes, ran.lags
    sampled = None
    if sampler is not None:
        from benchmarks.cpu_profile import read_collapsed

        _, err = await sampler.communicate()
        if sampler.returncode == 0 and stacks.is_file():
            sampled = read_collapsed(stacks.read_text().splitlines())
            stacks.unlink()
        else:
            errors["py-spy"] += 1
            print(f"  py-spy failed ({sampler.returncode}): {err.decode(errors='replace').strip()[-300:]}")

    wall = time.perf_counter() - wall0
    # the client's CPU: its sessions' loops, and this process's own when they ran elsewhere
    client_cpu = ran.cpu_s + (time.process_time() - parent_cpu0 if clients.processes > 1 else 0.0)
    # the loops' interval inside the whole's (read after it at the start, before it here), so
    # that the loops' share cannot exceed the whole by the time between the two reads
    loop_cpu1 = server.loop_cpu_seconds() if server else None
    cpu1 = server.cpu_seconds() if server else None
    machine1 = machine_cpu_busy()
    after = await http_get(url, "/metrics")

    check = FinalsCheck()
    margins, latencies, send_lag = [], [], []
    for out in outcomes:
        c, times = analyse_session(out, cfg.right_context, cfg.max_delay_ms)
        check = check + c
        margins.append(times.margin)
        latencies.append(times.latency)
        send_lag.extend(out.send_lag)
        errors.update(out.errors)
        if out.ended_words is not None and out.ended_words != out.n_sent:
            errors["end_count_mismatch"] += 1
    margin = np.concatenate(margins) if margins else np.zeros(0)
    latency = np.concatenate(latencies) if latencies else np.zeros(0)
    offered_wps = round(n * cfg.words_per_second, 1)
    window = steady_window(outcomes, cfg)
    finalized_wps = None
    if window is not None and window["words_offered"]:
        finalized_wps = round(offered_wps * window["words_finalized"] / window["words_offered"], 1)

    step: dict = {
        "sessions": n,
        "itn": itn,
        "connected": len(connected),
        "client_processes": clients.processes,
        "connect_s": round(connect_s, 2),
        "offered_wps": offered_wps,
        "words_sent": int(sum(o.n_sent for o in outcomes)),
        "words_timed": int(margin.size),
        "finalized_wps": finalized_wps,
        "window": window,
        "margin_ms": _quantiles_ms(margin),
        "latency_ms": _quantiles_ms(latency),
        "early_finals": int(np.count_nonzero(margin < -1e-3)),
        "check": asdict(check),
        "errors": dict(sorted(errors.items())),
        "wall_s": round(wall, 1),
    }
    server_part: dict = {}
    if before and after and before[0] == 200 and after[0] == 200:
        try:
            server_part = server_figures(metrics_delta(parse_metrics(before[1]), parse_metrics(after[1])), wall)
        except ValueError as e:
            server_part = {"metrics_error": str(e)}
    if cpu0 is not None and cpu1 is not None:
        server_part["cpu_cores"] = round((cpu1 - cpu0) / wall, 3)
        # the server's CPU (all threads and workers) over the step per timed word: the sessions'
        # prefill is finalized in the step too, so its CPU is in the figure but its words are not
        # (the figure all comparisons in the docs use); per word the server finalized in the
        # step (its /metrics), prefill included, beside it
        server_part["cpu_ms_per_word"] = round(1000.0 * (cpu1 - cpu0) / margin.size, 3) if margin.size else None
        if server_part.get("words_finalized"):
            server_part["cpu_ms_per_finalized_word"] = round(
                1000.0 * (cpu1 - cpu0) / server_part["words_finalized"], 3)
        server_part["rss_mb"] = round(server.rss_mb() or 0.0, 1)  # type: ignore[union-attr]
    if loop_cpu0 is not None and loop_cpu1 is not None and margin.size:
        # the event loops' share (main threads): what limits a server whose model runs elsewhere
        server_part["loop_cpu_ms_per_word"] = round(1000.0 * (loop_cpu1 - loop_cpu0) / margin.size, 3)
    if sampled is not None:
        server_part["cpu_profile"] = sampled.to_json(cpu_ms_per_word=server_part.get("cpu_ms_per_word"))
    step["server"] = server_part
    lag = np.asarray(lags)
    step["client"] = {
        "cpu_cores": round(client_cpu / wall, 3),
        "send_lag_ms": _quantiles_ms(np.asarray(send_lag)),
        "loop_lag_ms": _quantiles_ms(lag),
    }
    if machine1[1] > machine0[1]:
        cores = os.cpu_count() or 1
        busy = cores * (machine1[0] - machine0[0]) / (machine1[1] - machine0[1])
        step["machine_busy_cores"] = round(busy, 2)
        others = busy - step["client"]["cpu_cores"] - server_part.get("cpu_cores", 0.0)
        step["other_processes_cores"] = round(max(0.0, others), 2)
    send_p95 = step["client"]["send_lag_ms"]["p95"] or 0.0
    loop_p99 = step["client"]["loop_lag_ms"]["p99"] or 0.0
    step["client"]["behind"] = send_p95 > CLIENT_SEND_LAG_P95_MS or loop_p99 > CLIENT_LOOP_LAG_P99_MS
    reasons = slo_failures(step, cfg.slo_p95_ms)
    step["slo_met"] = not reasons
    step["slo_failures"] = reasons
    return step


#: A window shorter than this says nothing about a rate (``finalized_wps`` is then None).
MIN_WINDOW_S = 1.0


def steady_window(outcomes: Sequence[SessionOutcome], cfg: LoadBenchConfig) -> dict | None:
    """The words the step offered while every session was streaming, and how many of them the
    server finalized in time (None: no such period of :data:`MIN_WINDOW_S`).

    The window runs on the clients' send times, from the last session's first real-time chunk
    to the first session's last chunk (the ``end`` follows it; its flush is never inside), as the
    sessions actually sent them. Its words are the real-time words sent in it (the prefill is
    before it); a word counts as finalized when its first final arrived by the window's end +
    ``max_delay_ms`` (by then the contract had decided every word of the window) + the SLO's
    p95 bound. So a step counts the finals of the words it offered, never those of words sent
    before or after the window, and ``words_finalized <= words_offered`` always; a server that
    falls behind leaves the last words of the window unfinalized by then.
    """
    per: list[tuple[np.ndarray, np.ndarray]] = []
    firsts, lasts = [], []
    for out in outcomes:
        n, prefill = out.n_sent, out.plan.prefill
        if n <= prefill:
            return None  # a session that sent no real-time word: no period with every session streaming
        sent = out.sent_at[:n]
        firsts.append(float(sent[prefill]))
        lasts.append(float(sent[n - 1]))
        per.append((sent[prefill:], first_final_times(out)[prefill:]))
    if not per:
        return None
    lo, hi = max(firsts), min(lasts)
    if hi - lo < MIN_WINDOW_S:
        return None
    until = hi + (cfg.max_delay_ms + cfg.slo_p95_ms) / 1000.0
    offered = finalized = 0
    for sent, final_at in per:
        inside = (sent >= lo) & (sent <= hi)
        offered += int(np.count_nonzero(inside))
        finalized += int(np.count_nonzero(inside & (final_at <= until)))  # NaN (no final): not finalized
    return {"s": round(hi - lo, 2), "words_offered": offered, "words_finalized": finalized,
            "finalized_by_s": round(until - hi, 3)}


async def _ramp(cfg: LoadBenchConfig, url: str, corpus: Sequence[str], server: ServerProcess | None,
                started: float) -> tuple[list[dict], str]:
    steps: list[dict] = []
    ramp = sorted(set(cfg.sessions))
    queue = list(ramp)
    refinements = 0
    last_wall = 0.0
    while True:
        if queue:
            n = queue.pop(0)
        elif refinements < cfg.refine_steps and (mid := next_refinement(steps)) is not None:
            n, refinements = mid, refinements + 1
        else:
            return steps, "ramp done" if all(s["slo_met"] for s in steps) else "SLO missed"
        elapsed = time.monotonic() - started
        # A step that misses the SLO may also wait out the drain timeout.
        estimate = max((step_estimate_s(cfg, n) + cfg.drain_timeout_s) * (2 if cfg.itn == "both" else 1), last_wall)
        if elapsed + estimate > cfg.max_total_s:
            return steps, f"time budget ({cfg.max_total_s:.0f}s) reached before N={n}"
        if server is not None and not server.alive:
            return steps, f"the server exited (code {server.proc.returncode})"  # type: ignore[union-attr]
        t = time.monotonic()
        step = await _itn_step(url, n, cfg, corpus, server)
        last_wall = time.monotonic() - t
        steps.append(step)
        if not step["slo_met"]:
            queue = []  # stop climbing; refine below if asked
        await asyncio.sleep(1.0)  # let the server settle (sessions closed) between steps


async def _itn_step(url: str, n: int, cfg: LoadBenchConfig, corpus: Sequence[str],
                    server: ServerProcess | None) -> dict:
    """One step at ``cfg.itn``; with ``both``, the same schedule with itn off, then on."""
    seed = cfg.seed * 100003 + n
    runs = {"off": (False,), "on": (True,), "both": (False, True)}[cfg.itn]
    done: dict[bool, dict] = {}
    for itn in runs:
        if done:
            await asyncio.sleep(1.0)  # let the server settle (sessions closed) between runs
        print(f"step N={n}: {n} sessions x {cfg.duration_s:.0f}s at {cfg.words_per_second} words/s"
              f"{', itn' if itn else ''} ...", flush=True)
        done[itn] = await run_step(url, n, cfg, corpus, server, seed=seed, itn=itn)
        print("  " + format_step(done[itn]), flush=True)
        profile = done[itn].get("server", {}).get("cpu_profile")
        if profile:
            print("  where the server's CPU went: " + ", ".join(
                f"{k} {100 * v:.0f}%" for k, v in sorted(profile["shares"].items(), key=lambda kv: -kv[1])
                if v >= 0.005), flush=True)
    if len(done) == 1:
        return done[runs[0]]
    on, off = done[True], done[False]
    step = dict(on, itn_off=off)
    step["slo_met"] = on["slo_met"] and off["slo_met"]
    step["slo_failures"] = on["slo_failures"] + [f"itn off: {r}" for r in off["slo_failures"]]
    step["itn_p95_margin_delta_ms"] = _delta(on["margin_ms"]["p95"], off["margin_ms"]["p95"])
    print(f"  itn on - off at N={n}: p95 finalize margin {_signed(step['itn_p95_margin_delta_ms'])} ms "
          f"({off['margin_ms']['p95']} -> {on['margin_ms']['p95']} ms)", flush=True)
    return step


def _delta(on: float | None, off: float | None) -> float | None:
    return None if on is None or off is None else round(on - off, 1)


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}"


def itn_comparison(steps: Sequence[dict]) -> list[dict]:
    """Per step run both ways (``--itn both``): the p95 finalize margins off and on, and on - off."""
    return [{"sessions": s["sessions"], "p95_margin_ms_off": s["itn_off"]["margin_ms"]["p95"],
             "p95_margin_ms_on": s["margin_ms"]["p95"], "delta_ms": s["itn_p95_margin_delta_ms"]}
            for s in steps if "itn_off" in s]


def _healthz_fields(health) -> dict:
    """The fields of a ``/healthz`` answer (``(status, body)``; ``{}`` when it was not a 200 with JSON)."""
    if not health or health[0] != 200:
        return {}
    try:
        fields = json.loads(health[1])
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}


def run_failure(payload: dict) -> str | None:
    """Why a run measured nothing (None: it measured something): no step ran, no session of any
    step connected, or none finalized a word. A run whose steps miss the SLO is a result, not this."""
    steps = [run for s in payload["steps"] for run in (s, s.get("itn_off")) if run is not None]
    if not steps:
        return f"no step ran: {payload['stopped']}"
    errors: Counter = Counter()
    for s in steps:
        errors.update(s["errors"])
    where = payload["server"]["url"] or "the started server"
    if not any(s["connected"] for s in steps):
        return (f"no session could connect to {where} ({sum(s['sessions'] for s in steps)} tried; "
                f"errors {count_text(errors)})")
    if not any(s["check"]["finalized"] for s in steps):
        return f"every session failed: no word was finalized by {where} (errors {count_text(errors)})"
    return None


def run_load_bench(cfg: LoadBenchConfig, *, command: str | None = None) -> dict:
    """Run the ramp; write ``<name>.json`` and ``<name>.png`` (not when it measured nothing:
    :func:`run_failure`); return the payload."""
    started = time.monotonic()
    prepare_out_dir(cfg.out_dir, f"{cfg.name}.json", f"{cfg.name}.png")
    corpus = load_corpus(cfg.data)
    load_before = os.getloadavg()
    where = machine()
    print(f"bench load on {where['cpu'] or 'unknown CPU'} ({where['cores']} cores), load average "
          f"{load_before[0]:.2f}; {len(corpus)} transcript words", flush=True)
    server: ServerProcess | None = None
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="streampunct-load-") as tmp:
        try:
            if cfg.url is None:
                server = ServerProcess(cfg.started_server(), max_sessions=max(cfg.sessions) + 16, workdir=Path(tmp))
                print(f"starting the server: {' '.join(server.argv[1:])}", flush=True)
                url = server.start()
                print(f"server ready at {url} ({server.engine}, {server.model}) after "
                      f"{time.monotonic() - started:.1f}s", flush=True)
            else:
                url = cfg.url
            health = asyncio.run(http_get(url, "/healthz"))
            steps, stopped = asyncio.run(_ramp(cfg, url, corpus, server, started))
        finally:
            rc = server.stop() if server is not None else None
        if server is not None and rc not in (0, None, -signal.SIGTERM):
            notes.append(f"server exit code {rc}; log tail:\n{server.log_tail()}")
        profile = profile_top(server.profile_path) if server is not None else None
    best = best_sessions(steps)
    behind = [s["sessions"] for s in steps if s["client"]["behind"]]
    if behind:
        notes.append(
            f"the load generator fell behind its schedule at N={behind} (send lag p95 > "
            f"{CLIENT_SEND_LAG_P95_MS:.0f} ms or loop lag p99 > {CLIENT_LOOP_LAG_P99_MS:.0f} ms): "
            "those margins include client-side delay"
        )
    busy = [s for s in steps if s.get("other_processes_cores", 0.0) > 0.3]
    if busy:
        notes.append(
            "other processes used CPU during the run (up to "
            f"{max(s['other_processes_cores'] for s in busy):.2f} cores): figures are pessimistic"
        )
    if cfg.server.profile:
        notes.append("the server ran under cProfile (slower than normal)")
    healthz = _healthz_fields(health)
    payload = {
        "server": {
            "url": url if cfg.url else None,
            "started": cfg.url is None,
            # a server given by --url says its own (its /healthz); the bench's --engine is not its
            "engine": (server.engine if server else healthz.get("engine")) or cfg.server.engine,
            "model": server.model if server else healthz.get("model"),
            "model_dir": str(cfg.server.model_dir) if cfg.server.model_dir else None,
            "healthz": health[1].strip() if health and health[0] == 200 else None,
        },
        "config": cfg.to_json(),
        "slo": {"p95_margin_ms": cfg.slo_p95_ms, "lost_words": 0, "duplicated_words": 0},
        "max_sessions_meeting_slo": best,
        "target_sessions": cfg.target_sessions,
        "target_met": target_verdict(steps, best, cfg.target_sessions),  # None: not tested
        "stopped": stopped,
        "steps": steps,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "total_s": round(time.monotonic() - started, 1),
        "notes": notes,
    }
    if profile is not None:
        payload["server_profile_top"] = profile
    if cfg.itn == "both":
        payload["itn_comparison"] = itn_comparison(steps)
        for row in payload["itn_comparison"]:
            notes.append(f"itn on - off at N={row['sessions']}: p95 finalize margin {_signed(row['delta_ms'])} ms "
                         f"({row['p95_margin_ms_off']} ms off, {row['p95_margin_ms_on']} ms on)")
    if run_failure(payload) is None:
        publish(cfg.name, payload, cfg.out_dir, command=command, plot=plot_load, summary=summary_text)
    else:  # measured nothing: shown, but no file (a published one stays), and its caller says why
        print(summary_text(payload))
    return payload


# -- command line ------------------------------------------------------------------------


def add_load_arguments(p: argparse.ArgumentParser) -> None:
    from streampunct.commands.argtypes import (
        non_negative_float,
        non_negative_int,
        path_argument,
        positive_float,
        positive_int,
    )

    d = LoadBenchConfig()
    p.add_argument("--url", default=None,
                   help="target a running server (ws://127.0.0.1:PORT/v1/stream) instead of starting one")
    p.add_argument("--sessions", type=positive_int, nargs="+", default=list(d.sessions), metavar="N",
                   help="ramp of concurrent sessions (default: %(default)s)")
    p.add_argument("--duration", type=positive_float, default=d.duration_s,
                   help="seconds of real-time speech per session and step (default: %(default)s)")
    p.add_argument("--wps", type=positive_float, default=d.words_per_second,
                   help="words/s per session (default: %(default)s)")
    p.add_argument("--max-chunk", type=positive_int, default=d.max_chunk,
                   help="ASR chunks of 1..N words (default: %(default)s)")
    p.add_argument("--jitter-ms", type=non_negative_float, default=d.jitter_ms,
                   help="chunk commit jitter (default: %(default)s)")
    p.add_argument("--prefill", type=non_negative_int, default=d.prefill_words,
                   help="untimed words sent at each session's start (default: %(default)s)")
    p.add_argument("--slo-p95-ms", type=positive_float, default=d.slo_p95_ms, help="SLO on the p95 finalize margin")
    p.add_argument("--target", type=positive_int, default=d.target_sessions, help="N to report as met or not")
    p.add_argument("--max-total-s", type=positive_float, default=d.max_total_s,
                   help="no step starts that would end after this (default: %(default)s)")
    p.add_argument("--refine", type=non_negative_int, default=d.refine_steps,
                   help="extra steps between the last good and first bad N (default: %(default)s)")
    p.add_argument("--data", type=path_argument, default=d.data, help="transcript (default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--itn", choices=ITN_MODES, default=d.itn,
                   help="sessions ask for itn (on; the started server loads the ITN grammars), or each step "
                        "runs with itn off and then on and reports on - off of the p95 finalize margin "
                        "(both) (default: %(default)s)")
    p.add_argument("--out-dir", type=path_argument, default=d.out_dir)
    p.add_argument("--name", type=result_stem, default=d.name, help="result file stem (default: %(default)s)")
    p.add_argument("--sample-profile", action="store_true",
                   help="sample the started server with py-spy during each step and report where its CPU "
                        "went per finalized word (needs py-spy, in the dev extra)")
    p.add_argument("--client-processes", type=non_negative_int, default=d.client_processes, metavar="P",
                   help="spread each step's sessions over P load-generator processes (default 0: one "
                        "per started thousand sessions of the step; one drives about a thousand real-time "
                        "sessions at a quarter of a core)")
    add_server_arguments(p.add_argument_group("the server started (not with --url)"), d.server, SERVER_FLAGS)


def config_from_args(args: argparse.Namespace) -> LoadBenchConfig:
    return LoadBenchConfig(
        url=args.url, server=server_from_args(args), sessions=tuple(sorted(set(args.sessions))),
        duration_s=args.duration, words_per_second=args.wps, max_chunk=args.max_chunk,
        jitter_ms=args.jitter_ms, prefill_words=args.prefill, slo_p95_ms=args.slo_p95_ms,
        target_sessions=args.target, max_total_s=args.max_total_s, refine_steps=args.refine, data=args.data,
        seed=args.seed, itn=args.itn, out_dir=args.out_dir, name=args.name, sample_profile=args.sample_profile,
        client_processes=args.client_processes,
    )


def run_load_from_args(args: argparse.Namespace, *, command: str | None = None) -> int:
    from streampunct.errors import InputError

    cfg = bench_config(config_from_args, args, url_allowed=True)
    try:
        payload = run_load_bench(cfg, command=command)
    except RuntimeError as e:
        raise InputError(str(e)) from None
    failure = run_failure(payload)  # missing the SLO is a result (0); measuring nothing is not (1)
    return run_failed("load", failure) if failure else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.load_bench", description="streaming load benchmark")
    add_load_arguments(p)
    args = p.parse_args(argv)
    return run_load_from_args(args, command="python -m benchmarks.load_bench " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    from benchmarks.common import run_module

    raise SystemExit(run_module(main, "python -m benchmarks.load_bench"))
