"""``bench load``: concurrent real-time sessions against one server, and the SLO search.

The benchmark starts a server in a separate process (``streampunct serve`` on
a model folder, or :mod:`benchmarks.load_server` with a synthetic engine for
``--engine fake``), or targets a running one (``--url``, loopback only). It
then runs a ramp of steps; a step opens N concurrent sessions from one
asyncio loop, and each session streams a real transcript (the words of
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
* words/s finalized against words/s offered;
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
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, astuple, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from benchmarks.common import RESULTS_DIR, machine, percentile, pyplot, write_result

REPO = Path(__file__).resolve().parent.parent

#: Default ramp of concurrent sessions.
DEFAULT_RAMP = (25, 50, 100, 150, 200, 250, 300, 400)

#: Client-side delays above these mean the load generator itself fell behind.
CLIENT_SEND_LAG_P95_MS = 25.0
CLIENT_LOOP_LAG_P99_MS = 50.0


@dataclass(frozen=True)
class LoadBenchConfig:
    """Options of the load benchmark.

    Attributes:
        url: target a running server (``ws://127.0.0.1:PORT/v1/stream``) instead of starting one.
        model_dir: model folder of the server started (None: the shipped model).
        engine: backend (``onnxruntime``, ``tensorrt``, ``torch``), or ``fake``:
            the synthetic engine of :mod:`benchmarks.load_server` (no model needed).
        sessions: the ramp of concurrent sessions, ascending.
        duration_s: real-time streaming per session and step (seconds of speech).
        words_per_second: speech rate of every session.
        max_chunk: ASR chunks carry 1..max_chunk words.
        jitter_ms: a chunk is committed up to this long after its last word was spoken.
        prefill_words: words sent in one message at a session's start (not timed).
        stagger_s: session starts are spread uniformly over this long.
        right_context, max_delay_ms: session options (the latency contract).
        slo_p95_ms: the SLO on the p95 finalize margin.
        target_sessions: the N the project aims at (reported as met or not).
        max_batch, max_wait_ms: batching of the server started (ignored with ``url``).
        max_total_s: the whole benchmark stops starting steps beyond this.
        drain_timeout_s: how long after its last word a session waits for its finals.
        refine_steps: extra steps between the last good and the first bad N.
        connect_timeout_s: handshake timeout per session.
        startup_timeout_s: how long the server may take to load its engine.
        data: the transcript (``word<TAB>LABEL``; labels are ignored).
        seed: chunking, jitter and start times.
        fake_batch_ms, fake_token_us, fake_sleep: cost of the fake engine.
        profile: run the started server under cProfile and report its top functions.
        out_dir, name: where ``<name>.json`` and ``<name>.png`` go.
    """

    url: str | None = None
    model_dir: Path | None = None
    engine: str = "onnxruntime"
    sessions: tuple[int, ...] = DEFAULT_RAMP
    duration_s: float = 30.0
    words_per_second: float = 2.5
    max_chunk: int = 4
    jitter_ms: float = 150.0
    prefill_words: int = 48
    stagger_s: float = 2.0
    right_context: int = 2
    max_delay_ms: int = 1500
    slo_p95_ms: float = 100.0
    target_sessions: int = 150
    max_batch: int = 32
    max_wait_ms: float = 5.0
    max_total_s: float = 540.0
    drain_timeout_s: float = 15.0
    refine_steps: int = 2
    connect_timeout_s: float = 10.0
    startup_timeout_s: float = 180.0
    data: Path = Path("data/iwslt2011/test2011")
    seed: int = 0
    fake_batch_ms: float = 0.0
    fake_token_us: float = 0.0
    fake_sleep: bool = False
    profile: bool = False
    out_dir: Path = RESULTS_DIR
    name: str = "load"

    def __post_init__(self) -> None:
        if not self.sessions or min(self.sessions) < 1:
            raise ValueError("sessions must be a non-empty list of positive counts")
        if self.words_per_second <= 0 or self.duration_s <= 0:
            raise ValueError("words_per_second and duration_s must be positive")
        if self.max_chunk < 1 or self.prefill_words < 0 or self.jitter_ms < 0 or self.stagger_s < 0:
            raise ValueError("max_chunk >= 1, prefill_words, jitter_ms and stagger_s >= 0")
        if self.right_context < 0 or self.max_delay_ms < 0:
            raise ValueError("right_context and max_delay_ms must be >= 0")
        if self.url is not None:
            host = urlsplit(self.url).hostname or ""
            if urlsplit(self.url).scheme != "ws" or host not in ("127.0.0.1", "localhost", "::1"):
                raise ValueError(f"the load bench talks to loopback only (ws://127.0.0.1:PORT/...), not {self.url}")


# -- the exactly-once check ----------------------------------------------------


@dataclass(frozen=True)
class FinalsCheck:
    """What the finals of one stream got wrong (all zero: every word final exactly once).

    Attributes:
        lost: sent words that never got a final.
        duplicated: finals for a word that already had one.
        out_of_order: first finals for a word that came after a final for a later word.
        mismatched: finals whose word differs from the word sent at that index
            (after normalization), or for an index that was never sent.
        finalized: distinct sent words that got a final.
    """

    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    mismatched: int = 0
    finalized: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.mismatched)

    def __add__(self, other: FinalsCheck) -> FinalsCheck:
        return FinalsCheck(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def _final_items(message: object) -> tuple[int, list[str]]:
    """(start, words) of a ``final`` as a protocol object or its JSON dict."""
    if isinstance(message, Mapping):
        words = message["words"]
        start = message["start"]
    else:
        words = message.words  # type: ignore[attr-defined]
        start = message.start  # type: ignore[attr-defined]
    out = []
    for w in words:
        if isinstance(w, Mapping):
            out.append(str(w["w"]))
        elif isinstance(w, str):
            out.append(w)
        else:
            out.append(str(w.w))
    return int(start), out


def check_finals(sent_words: Sequence[str], final_messages: Iterable[object]) -> FinalsCheck:
    """Check the finals of one stream against the words sent, in arrival order.

    ``sent_words`` are the words the client sent (index i = stream word i;
    compared after :func:`~streampunct.text.normalize_word`, so send words
    that normalize to something). ``final_messages`` are ``final`` messages
    (:class:`~streampunct.protocol.Final` or their JSON dicts) in the order
    they arrived. Pure: no clock, no I/O.
    """
    from streampunct.text import normalize_word

    sent = [normalize_word(w) for w in sent_words]
    seen = [0] * len(sent)
    duplicated = out_of_order = mismatched = 0
    highest = -1
    for message in final_messages:
        start, words = _final_items(message)
        for k, word in enumerate(words):
            index = start + k
            if not 0 <= index < len(sent):
                mismatched += 1
                continue
            seen[index] += 1
            if seen[index] > 1:
                duplicated += 1
                continue
            if index < highest:
                out_of_order += 1
            highest = max(highest, index)
            if normalize_word(word) != sent[index]:
                mismatched += 1
    finalized = sum(1 for s in seen if s)
    return FinalsCheck(len(sent) - finalized, duplicated, out_of_order, mismatched, finalized)


# -- transcript and schedule -----------------------------------------------------


def load_corpus(path: Path) -> list[str]:
    """Normalized non-empty words of a ``word<TAB>LABEL`` file (or plain text)."""
    from streampunct.caption import read_transcript
    from streampunct.text import normalize_word

    path = Path(path)
    if not path.exists() and not path.is_absolute() and (REPO / path).exists():
        path = REPO / path
    words = [w for w in (normalize_word(x) for x in read_transcript(path)) if w]
    if not words:
        raise ValueError(f"{path}: no words")
    return words


@dataclass(frozen=True)
class SessionPlan:
    """What one session sends: its words and chunks ``(seconds after its start, first, end)``."""

    words: tuple[str, ...]
    chunks: tuple[tuple[float, int, int], ...]
    prefill: int


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


# -- one session -------------------------------------------------------------------


@dataclass
class SessionOutcome:
    """What the client saw of one session (times from ``loop.time()``)."""

    plan: SessionPlan
    sent_at: np.ndarray
    end_at: float | None = None
    finals: list[tuple[float, int, list[str]]] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    ended_words: int | None = None
    close_code: int | None = None
    send_lag: list[float] = field(default_factory=list)

    @property
    def n_sent(self) -> int:
        return int(np.count_nonzero(~np.isnan(self.sent_at)))


async def run_session(client, plan: SessionPlan, start: float, deadline: float) -> SessionOutcome:
    """Stream ``plan`` on ``client`` from loop time ``start``; read until the server closes."""
    from websockets import ConnectionClosed

    from streampunct.protocol import Ended, Error, Final

    loop = asyncio.get_running_loop()
    out = SessionOutcome(plan, np.full(len(plan.words), np.nan))

    async def send() -> None:
        try:
            for at, a, b in plan.chunks:
                target = start + at
                delay = target - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                now = loop.time()
                out.send_lag.append(now - target)
                out.sent_at[a:b] = now
                await client.send_words(plan.words[a:b])
            out.end_at = loop.time()
            await client.end()
        except ConnectionClosed:
            out.errors["send_on_closed"] += 1

    sender = asyncio.create_task(send())
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                out.errors["drain_timeout"] += 1
                break
            try:
                message = await client.recv(timeout=remaining)
            except ConnectionClosed:
                break
            except TimeoutError:
                out.errors["drain_timeout"] += 1
                break
            except Exception as e:  # a frame the client cannot decode
                out.errors[f"bad_message:{type(e).__name__}"] += 1
                continue
            now = loop.time()
            if isinstance(message, Final):
                out.finals.append((now, message.start, [w.w for w in message.words]))
            elif isinstance(message, Error):
                out.errors[str(message.code)] += 1
            elif isinstance(message, Ended):
                out.ended_words = message.words
    finally:
        if not sender.done():
            sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        try:
            await asyncio.wait_for(client.close(), 2.0)
        except (TimeoutError, Exception):  # noqa: BLE001 (closing is best effort)
            pass
        out.close_code = client.close_code
    if out.close_code not in (None, 1000):
        out.errors[f"close:{out.close_code}"] += 1
    return out


@dataclass(frozen=True)
class SessionTimes:
    """Per measured word of one session: margin and end-to-end latency (seconds)."""

    margin: np.ndarray
    latency: np.ndarray
    final_at: np.ndarray


def analyse_session(
    out: SessionOutcome, right_context: int, max_delay_ms: int
) -> tuple[FinalsCheck, SessionTimes]:
    """The exactly-once check and the timing of the measured (non-prefill) words."""
    n = out.n_sent
    sent = out.sent_at[:n]
    check = check_finals(out.plan.words[:n], ({"start": s, "words": w} for _, s, w in out.finals))
    final_at = np.full(n, np.nan)
    for t, start, words in out.finals:
        lo, hi = max(0, start), min(n, start + len(words))
        if lo < hi:
            seg = final_at[lo:hi]
            seg[np.isnan(seg)] = t
    decidable = sent + max_delay_ms / 1000.0
    if right_context < n:
        decidable[: n - right_context] = np.minimum(decidable[: n - right_context], sent[right_context:])
    if out.end_at is not None:
        decidable = np.minimum(decidable, out.end_at)
    measured = np.arange(n) >= out.plan.prefill
    measured &= ~np.isnan(final_at)
    return check, SessionTimes((final_at - decidable)[measured], (final_at - sent)[measured], final_at[measured])


# -- the server process, /metrics and /proc ------------------------------------------


def _proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (None if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def _machine_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    values = [int(x) for x in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


_ANNOUNCE = re.compile(r"serving (\S+) with (\S+) on (ws://\S+)")


class ServerProcess:
    """A server in a child process, on a free loopback port (``--port 0``).

    The port is read from the line the server prints once its engine is
    ready (``... on ws://127.0.0.1:PORT/v1/stream``). Output goes to a log
    file (never a pipe that could fill up and block the server).
    """

    def __init__(self, cfg: LoadBenchConfig, max_sessions: int, workdir: Path) -> None:
        self.cfg = cfg
        self.log_path = workdir / "server.log"
        self.profile_path = workdir / "server.prof" if cfg.profile else None
        python = [sys.executable]
        if self.profile_path is not None:
            python += ["-m", "cProfile", "-o", str(self.profile_path)]
        common = [
            "--port", "0", "--host", "127.0.0.1",
            "--max-batch", str(cfg.max_batch), "--max-wait-ms", str(cfg.max_wait_ms),
            "--max-sessions", str(max_sessions),
            "--right-context", str(cfg.right_context), "--max-delay-ms", str(cfg.max_delay_ms),
        ]
        if cfg.engine == "fake":
            self.argv = [*python, "-m", "benchmarks.load_server", *common,
                         "--batch-ms", str(cfg.fake_batch_ms), "--token-us", str(cfg.fake_token_us)]
            if cfg.fake_sleep:
                self.argv.append("--sleep")
            if cfg.model_dir is not None:
                self.argv += ["--tokenizer", str(Path(cfg.model_dir) / "tokenizer.json")]
        else:
            self.argv = [*python, "-m", "streampunct.cli", "--log-level", "WARNING", "serve", *common,
                         "--engine", cfg.engine]
            if cfg.model_dir is not None:
                self.argv += ["--model", str(cfg.model_dir)]
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.model: str | None = None
        self.engine: str | None = None

    def start(self) -> str:
        """Start it and wait until it is ready; returns its WebSocket URL."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, env=env
            )
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            match = _ANNOUNCE.search(text)
            if match:
                self.model, self.engine, self.url = match.group(1), match.group(2), match.group(3)
                return self.url
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the server exited with code {self.proc.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server was not ready after {self.cfg.startup_timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float | None:
        return _proc_cpu_seconds(self.proc.pid) if self.alive else None  # type: ignore[union-attr]

    def rss_mb(self) -> float | None:
        return _proc_rss_mb(self.proc.pid) if self.alive else None  # type: ignore[union-attr]

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (graceful shutdown; cProfile writes its file), then SIGKILL if it hangs."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


async def http_get(url: str, path: str, timeout: float = 5.0) -> tuple[int, str] | None:
    """GET ``path`` on the server of a ws:// URL (loopback); None if it cannot be reached."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
                await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split()[1])
                length = None
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                body = await (reader.readexactly(length) if length is not None else reader.read())
            finally:
                writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
        return None
    return status, body.decode("utf-8", errors="replace")


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return out


def metrics_delta(before: Mapping, after: Mapping) -> dict:
    """after - before, sample by sample (counters and histograms over one step)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def histogram(samples: Mapping, name: str) -> dict | None:
    """A histogram's cumulative buckets, sum and count from parsed samples."""
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (sample, labels), value in samples.items()
        if sample == f"{name}_bucket" and "le" in dict(labels)
    )
    if not buckets:
        return None
    return {
        "buckets": buckets,
        "sum": samples.get((f"{name}_sum", ()), 0.0),
        "count": samples.get((f"{name}_count", ()), 0.0),
    }


def histogram_quantile(hist: Mapping, q: float, *, interpolate: bool = True) -> float:
    """Prometheus-style quantile estimate: linear within the bucket that holds it.

    With ``interpolate=False`` the bucket's upper bound (for integer-valued
    histograms such as batch sizes, where "p50 <= 2" says more than "1.6").
    """
    count = hist["count"]
    if count <= 0:
        return math.nan
    rank = q * count
    lower, prev = 0.0, 0.0
    for le, cum in hist["buckets"]:
        if cum >= rank:
            if math.isinf(le):
                return lower
            if cum == prev or not interpolate:
                return le
            return lower + (le - lower) * (rank - prev) / (cum - prev)
        lower, prev = le, cum
    return lower


def _sample(samples: Mapping, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def server_figures(delta: Mapping, wall_s: float) -> dict:
    """Engine batching, engine time and the server's own margin over one step."""
    out: dict = {"words_in": _sample(delta, "streampunct_words_in_total"),
                 "words_finalized": _sample(delta, "streampunct_words_finalized_total")}
    batch = histogram(delta, "streampunct_batch_size")
    if batch and batch["count"] > 0:
        out["engine_calls"] = int(batch["count"])
        out["batch_size"] = {
            "mean": round(batch["sum"] / batch["count"], 2),
            "p50_at_most": histogram_quantile(batch, 0.5, interpolate=False),
            "p95_at_most": histogram_quantile(batch, 0.95, interpolate=False),
            "max_at_most": histogram_quantile(batch, 1.0, interpolate=False),
            "cumulative": {str(int(le)) if not math.isinf(le) else "+Inf": int(c) for le, c in batch["buckets"]},
        }
        out["requests"] = int(batch["sum"])
        if out["requests"]:
            out["words_per_request"] = round(out["words_finalized"] / out["requests"], 2)
    engine = histogram(delta, "streampunct_engine_latency_seconds")
    if engine and engine["count"] > 0:
        out["engine_ms"] = {
            "mean": round(1e3 * engine["sum"] / engine["count"], 2),
            "p50": round(1e3 * histogram_quantile(engine, 0.5), 2),
            "p95": round(1e3 * histogram_quantile(engine, 0.95), 2),
        }
        out["engine_busy"] = round(engine["sum"] / wall_s, 3) if wall_s > 0 else None
    margin = histogram(delta, "streampunct_finalize_margin_seconds")
    if margin and margin["count"] > 0:
        out["server_margin_ms"] = {
            "p50": round(1e3 * histogram_quantile(margin, 0.5), 1),
            "p95": round(1e3 * histogram_quantile(margin, 0.95), 1),
            "p99": round(1e3 * histogram_quantile(margin, 0.99), 1),
        }
    errors = {dict(labels)["code"]: int(v) for (name, labels), v in delta.items()
              if name == "streampunct_errors_total" and v}
    if errors:
        out["errors"] = errors
    rejected = {dict(labels)["reason"]: int(v) for (name, labels), v in delta.items()
                if name == "streampunct_handshakes_rejected_total" and v}
    if rejected:
        out["rejected"] = rejected
    return out


# -- one step ------------------------------------------------------------------------


def _quantiles_ms(values: np.ndarray | Sequence[float]) -> dict:
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return {"p50": None, "p95": None, "p99": None, "max": None, "mean": None}
    return {
        "p50": round(1e3 * percentile(values, 50), 1),
        "p95": round(1e3 * percentile(values, 95), 1),
        "p99": round(1e3 * percentile(values, 99), 1),
        "max": round(1e3 * float(values.max()), 1),
        "mean": round(1e3 * float(values.mean()), 1),
    }


async def _loop_lag_monitor(lags: list[float], stop: asyncio.Event, interval: float = 0.01) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(interval)
        lags.append(loop.time() - t - interval)


async def run_step(
    url: str, n: int, cfg: LoadBenchConfig, corpus: Sequence[str], server: ServerProcess | None, seed: int
) -> dict:
    """N concurrent sessions for one step; returns its figures and the SLO verdict."""
    from streampunct.client import StreamClient

    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    stride = max(1, len(corpus) // n)
    plans = [plan_session(corpus, (i * stride + rng.randrange(stride)) % len(corpus), cfg, rng)
             for i in range(n)]
    errors: Counter = Counter()
    connect_sem = asyncio.Semaphore(32)

    async def connect(i: int):
        async with connect_sem:
            try:
                return await StreamClient.connect(
                    url, open_timeout=cfg.connect_timeout_s,
                    right_context=cfg.right_context, max_delay_ms=cfg.max_delay_ms, partials=False,
                )
            except Exception as e:  # noqa: BLE001 (a refused or failed session is a figure)
                errors[f"connect:{type(e).__name__}"] += 1
                return None

    t_connect = loop.time()
    clients = await asyncio.gather(*(connect(i) for i in range(n)))
    connect_s = loop.time() - t_connect
    connected = [(c, p) for c, p in zip(clients, plans, strict=True) if c is not None]

    before = await http_get(url, "/metrics")
    cpu0 = server.cpu_seconds() if server else None
    machine0 = _machine_jiffies()
    client_cpu0, wall0 = time.process_time(), time.perf_counter()

    stop = asyncio.Event()
    lags: list[float] = []
    monitor = asyncio.create_task(_loop_lag_monitor(lags, stop))
    t0 = loop.time() + 0.2
    plan_end = max((p.chunks[-1][0] for p in plans), default=0.0)
    deadline = t0 + cfg.stagger_s + plan_end + cfg.max_delay_ms / 1000.0 + cfg.drain_timeout_s
    starts = [t0 + rng.uniform(0.0, cfg.stagger_s) for _ in connected]
    outcomes = await asyncio.gather(*(
        run_session(c, p, start, deadline) for (c, p), start in zip(connected, starts, strict=True)
    ))
    stop.set()
    await monitor

    wall = time.perf_counter() - wall0
    client_cpu = time.process_time() - client_cpu0
    cpu1 = server.cpu_seconds() if server else None
    machine1 = _machine_jiffies()
    after = await http_get(url, "/metrics")

    check = FinalsCheck()
    margins, latencies, final_times, send_lag = [], [], [], []
    for out in outcomes:
        c, times = analyse_session(out, cfg.right_context, cfg.max_delay_ms)
        check = check + c
        margins.append(times.margin)
        latencies.append(times.latency)
        final_times.append(times.final_at)
        send_lag.extend(out.send_lag)
        errors.update(out.errors)
        if out.ended_words is not None and out.ended_words != out.n_sent:
            errors["end_count_mismatch"] += 1
    margin = np.concatenate(margins) if margins else np.zeros(0)
    latency = np.concatenate(latencies) if latencies else np.zeros(0)
    finalized_wps = _steady_rate(np.concatenate(final_times) if final_times else np.zeros(0), starts, cfg)

    step: dict = {
        "sessions": n,
        "connected": len(connected),
        "connect_s": round(connect_s, 2),
        "offered_wps": round(n * cfg.words_per_second, 1),
        "words_sent": int(sum(o.n_sent for o in outcomes)),
        "words_timed": int(margin.size),
        "finalized_wps": finalized_wps,
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
        server_part["rss_mb"] = round(server.rss_mb() or 0.0, 1)  # type: ignore[union-attr]
    step["server"] = server_part
    lag = np.asarray(lags)
    step["client"] = {
        "cpu_cores": round(client_cpu / wall, 3),
        "send_lag_ms": _quantiles_ms(np.asarray(send_lag)),
        "loop_lag_ms": _quantiles_ms(lag),
    }
    if machine0 and machine1 and machine1[1] > machine0[1]:
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


def _steady_rate(final_at: np.ndarray, starts: Sequence[float], cfg: LoadBenchConfig) -> float | None:
    """Words finalized per second while every session was streaming (None: no such time).

    The window runs from the last session's first real-time word to the
    first session's last one, so start-up and drain do not dilute the rate.
    """
    if not starts or final_at.size == 0:
        return None
    gap = 1.0 if cfg.prefill_words else 0.0
    # A word is final about min(right_context words, max_delay) after it is spoken.
    shift = min(cfg.right_context / cfg.words_per_second, cfg.max_delay_ms / 1000.0)
    lo = max(starts) + gap + shift + cfg.max_chunk / cfg.words_per_second
    hi = min(starts) + gap + cfg.duration_s
    if hi - lo < 1.0:
        return None
    inside = np.count_nonzero((final_at >= lo) & (final_at < hi))
    return round(inside / (hi - lo), 1)


def slo_failures(step: Mapping, slo_p95_ms: float) -> list[str]:
    """Why a step misses the SLO (empty: it meets it)."""
    reasons = []
    if step["connected"] < step["sessions"]:
        reasons.append(f"{step['sessions'] - step['connected']} sessions could not connect")
    c = step["check"]
    for key in ("lost", "duplicated", "out_of_order", "mismatched"):
        if c[key]:
            reasons.append(f"{c[key]} {key.replace('_', '-')} words")
    p95 = step["margin_ms"]["p95"]
    if p95 is None:
        reasons.append("no word was finalized")
    elif p95 > slo_p95_ms:
        reasons.append(f"p95 finalize margin {p95:.0f} ms > {slo_p95_ms:.0f} ms")
    return reasons


# -- the ramp --------------------------------------------------------------------------


def step_estimate_s(cfg: LoadBenchConfig, n: int) -> float:
    """Rough wall time of a step that keeps up (connects, stagger, speech, last finals)."""
    speech = (1.0 if cfg.prefill_words else 0.0) + cfg.duration_s + cfg.jitter_ms / 1000.0
    return 1.5 + 0.01 * n + cfg.stagger_s + speech + 1.0


def next_refinement(steps: Sequence[Mapping], granularity: int = 5) -> int | None:
    """The N halfway between the largest good N and the smallest bad N above it (None: done)."""
    bad = [s["sessions"] for s in steps if not s["slo_met"]]
    if not bad:
        return None
    hi = min(bad)
    good = [s["sessions"] for s in steps if s["slo_met"] and s["sessions"] < hi]
    lo = max(good, default=0)
    mid = int(round((lo + hi) / 2 / granularity)) * granularity
    if mid <= lo or mid >= hi or hi - lo <= max(granularity, 0.1 * hi):
        return None
    return mid


def best_sessions(steps: Sequence[Mapping]) -> int | None:
    """The largest N that met the SLO below the smallest N that missed it."""
    bad = [s["sessions"] for s in steps if not s["slo_met"]]
    limit = min(bad) if bad else math.inf
    good = [s["sessions"] for s in steps if s["slo_met"] and s["sessions"] < limit]
    return max(good) if good else None


def format_step(s: Mapping) -> str:
    m, e, srv, cl, c = s["margin_ms"], s["latency_ms"], s["server"], s["client"], s["check"]

    def f(x: float | None, spec: str = ".0f") -> str:
        return "-" if x is None else format(x, spec)

    parts = [
        f"N={s['sessions']:<4d} margin p50/p95/p99/max {f(m['p50'])}/{f(m['p95'])}/{f(m['p99'])}/{f(m['max'])} ms",
        f"e2e p50/p95 {f(e['p50'])}/{f(e['p95'])} ms",
        f"{f(s['finalized_wps'])}/{s['offered_wps']:.0f} w/s",
    ]
    if "batch_size" in srv:
        parts.append(f"batch mean {srv['batch_size']['mean']:.1f}")
    if "engine_busy" in srv:
        parts.append(f"engine busy {100 * srv['engine_busy']:.0f}%")
    if "cpu_cores" in srv:
        parts.append(f"server cpu {srv['cpu_cores']:.2f}")
    parts.append(f"client cpu {cl['cpu_cores']:.2f} send-lag p95 {f(cl['send_lag_ms']['p95'])} ms")
    if "other_processes_cores" in s:
        parts.append(f"others {s['other_processes_cores']:.2f} cores")
    parts.append(f"lost {c['lost']} dup {c['duplicated']} ooo {c['out_of_order']} mism {c['mismatched']}")
    if s["errors"]:
        parts.append("errors " + ",".join(f"{k}={v}" for k, v in s["errors"].items()))
    verdict = "SLO met" if s["slo_met"] else "SLO missed: " + "; ".join(s["slo_failures"])
    if cl["behind"]:
        verdict += " [load generator behind schedule]"
    return " | ".join(parts) + " | " + verdict


def _profile_top(path: Path | None, limit: int = 20) -> list[dict] | None:
    """The server main thread's costliest functions (own time), idle waits left out."""
    if path is None or not path.is_file():
        return None
    import pstats

    stats = pstats.Stats(str(path))
    rows = []
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "epoll" in func or "select" in func or func in ("<built-in method time.sleep>",):
            continue  # the event loop waiting for work: idle, not cost
        rows.append({"function": f"{Path(filename).name}:{line}({func})", "calls": nc,
                     "tottime_s": round(tt, 3), "cumtime_s": round(ct, 3)})
    rows.sort(key=lambda r: r["tottime_s"], reverse=True)
    return rows[:limit]


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
        estimate = max(step_estimate_s(cfg, n) + cfg.drain_timeout_s, last_wall)
        if elapsed + estimate > cfg.max_total_s:
            return steps, f"time budget ({cfg.max_total_s:.0f}s) reached before N={n}"
        if server is not None and not server.alive:
            return steps, f"the server exited (code {server.proc.returncode})"  # type: ignore[union-attr]
        print(f"step N={n}: {n} sessions x {cfg.duration_s:.0f}s at {cfg.words_per_second} words/s ...", flush=True)
        t = time.monotonic()
        step = await run_step(url, n, cfg, corpus, server, seed=cfg.seed * 100003 + n)
        last_wall = time.monotonic() - t
        steps.append(step)
        print("  " + format_step(step), flush=True)
        if not step["slo_met"]:
            queue = []  # stop climbing; refine below if asked
        await asyncio.sleep(1.0)  # let the server settle (sessions closed) between steps


def run_load_bench(cfg: LoadBenchConfig, *, command: str | None = None) -> dict:
    """Run the ramp; write ``<name>.json`` and ``<name>.png``; return the payload."""
    started = time.monotonic()
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
                server = ServerProcess(cfg, max_sessions=max(cfg.sessions) + 16, workdir=Path(tmp))
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
        profile = _profile_top(server.profile_path) if server is not None else None
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
    if cfg.profile:
        notes.append("the server ran under cProfile (slower than normal)")
    payload = {
        "server": {
            "url": url if cfg.url else None,
            "started": cfg.url is None,
            "engine": (server.engine if server else None) or cfg.engine,
            "model": server.model if server else None,
            "model_dir": str(cfg.model_dir) if cfg.model_dir else None,
            "healthz": health[1].strip() if health and health[0] == 200 else None,
        },
        "config": {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
                   for k, v in asdict(cfg).items()},
        "slo": {"p95_margin_ms": cfg.slo_p95_ms, "lost_words": 0, "duplicated_words": 0},
        "max_sessions_meeting_slo": best,
        "target_sessions": cfg.target_sessions,
        "target_met": best is not None and best >= cfg.target_sessions,
        "stopped": stopped,
        "steps": steps,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "total_s": round(time.monotonic() - started, 1),
        "notes": notes,
    }
    if profile is not None:
        payload["server_profile_top"] = profile
    path = write_result(cfg.name, payload, cfg.out_dir, command=command)
    png = plot_load(payload, Path(cfg.out_dir) / f"{cfg.name}.png")
    print(summary_text(payload))
    print(f"wrote {path}" + (f" and {png}" if png else ""))
    return payload


def summary_text(payload: Mapping) -> str:
    best = payload["max_sessions_meeting_slo"]
    slo = payload["slo"]["p95_margin_ms"]
    target = payload["target_sessions"]
    largest_run = max((s["sessions"] for s in payload["steps"]), default=0)
    if payload["target_met"]:
        verdict = "met"
    elif largest_run < target and all(s["slo_met"] for s in payload["steps"]):
        verdict = f"not tested (largest N run: {largest_run})"
    else:
        verdict = "NOT met"
    lines = [
        f"largest N meeting the SLO (p95 finalize margin <= {slo:.0f} ms, no lost/duplicated words): "
        f"{best if best is not None else 'none'}; target {target}: {verdict} "
        f"({payload['stopped']}; {payload['total_s']:.0f}s)",
    ]
    lines += [f"note: {n}" for n in payload["notes"]]
    return "\n".join(lines)


def plot_load(payload: Mapping, path: Path) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    steps = sorted(payload["steps"], key=lambda s: s["sessions"])
    if not steps:
        return None
    n = [s["sessions"] for s in steps]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, style in (("p50", "o-"), ("p95", "s-"), ("p99", "^--")):
        values = [s["margin_ms"][key] for s in steps]
        ax1.plot(n, [max(v, 1.0) if v is not None else np.nan for v in values], style, label=f"margin {key}")
    slo = payload["slo"]["p95_margin_ms"]
    ax1.axhline(slo, color="red", linestyle=":", label=f"SLO p95 <= {slo:.0f} ms")
    for s in steps:
        if not s["slo_met"]:
            ax1.axvline(s["sessions"], color="gray", alpha=0.25, linewidth=6)
    best = payload["max_sessions_meeting_slo"]
    if best is not None:
        ax1.axvline(best, color="green", linestyle="--", label=f"largest N meeting SLO: {best}")
    ax1.set_yscale("log")
    ax1.set_xlabel("concurrent sessions")
    ax1.set_ylabel("finalize margin (ms, log; floor 1 ms)")
    ax1.set_title("final after decidable (gray: SLO missed)")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    ax2.plot(n, [s["offered_wps"] for s in steps], "k:", label="offered words/s")
    ax2.plot(n, [s["finalized_wps"] or np.nan for s in steps], "o-", label="finalized words/s")
    ax2.set_xlabel("concurrent sessions")
    ax2.set_ylabel("words/s")
    ax2.grid(alpha=0.3)
    ax3 = ax2.twinx()
    ax3.plot(n, [s["server"].get("cpu_cores", np.nan) for s in steps], "s--", color="tab:red",
             label="server CPU (cores)")
    ax3.plot(n, [s["client"]["cpu_cores"] for s in steps], "^--", color="tab:purple",
             label="load generator CPU (cores)")
    ax3.plot(n, [s["server"].get("engine_busy", np.nan) for s in steps], "d:", color="tab:green",
             label="engine busy (fraction)")
    ax3.plot(n, [s.get("other_processes_cores", np.nan) for s in steps], "x:", color="gray",
             label="other processes CPU (cores)")
    ax3.set_ylabel("cores / fraction")
    ax3.set_ylim(bottom=0)
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax3.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    srv = payload["server"]
    ax2.set_title(f"throughput and CPU ({srv.get('engine')}, {srv.get('model') or 'external server'})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- command line ------------------------------------------------------------------------


def add_load_arguments(p: argparse.ArgumentParser) -> None:
    d = LoadBenchConfig()
    p.add_argument("--url", default=None,
                   help="target a running server (ws://127.0.0.1:PORT/v1/stream) instead of starting one")
    p.add_argument("--model", type=Path, default=None, help="model folder (default: the shipped model)")
    p.add_argument("--engine", default=d.engine,
                   help="onnxruntime, tensorrt, torch, or fake (synthetic engine, no model needed)")
    p.add_argument("--sessions", type=int, nargs="+", default=list(d.sessions), metavar="N",
                   help="ramp of concurrent sessions (default: %(default)s)")
    p.add_argument("--duration", type=float, default=d.duration_s,
                   help="seconds of real-time speech per session and step (default: %(default)s)")
    p.add_argument("--wps", type=float, default=d.words_per_second, help="words/s per session (default: %(default)s)")
    p.add_argument("--max-chunk", type=int, default=d.max_chunk, help="ASR chunks of 1..N words (default: %(default)s)")
    p.add_argument("--jitter-ms", type=float, default=d.jitter_ms, help="chunk commit jitter (default: %(default)s)")
    p.add_argument("--prefill", type=int, default=d.prefill_words,
                   help="untimed words sent at each session's start (default: %(default)s)")
    p.add_argument("--right-context", type=int, default=d.right_context)
    p.add_argument("--max-delay-ms", type=int, default=d.max_delay_ms)
    p.add_argument("--slo-p95-ms", type=float, default=d.slo_p95_ms, help="SLO on the p95 finalize margin")
    p.add_argument("--target", type=int, default=d.target_sessions, help="N to report as met or not")
    p.add_argument("--max-batch", type=int, default=d.max_batch, help="server batching (started server only)")
    p.add_argument("--max-wait-ms", type=float, default=d.max_wait_ms, help="server batching (started server only)")
    p.add_argument("--max-total-s", type=float, default=d.max_total_s,
                   help="no step starts that would end after this (default: %(default)s)")
    p.add_argument("--refine", type=int, default=d.refine_steps,
                   help="extra steps between the last good and first bad N (default: %(default)s)")
    p.add_argument("--data", type=Path, default=d.data, help="transcript (default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--fake-batch-ms", type=float, default=d.fake_batch_ms, help="--engine fake: cost per call")
    p.add_argument("--fake-token-us", type=float, default=d.fake_token_us, help="--engine fake: cost per token")
    p.add_argument("--fake-sleep", action="store_true", help="--engine fake: idle instead of burning CPU")
    p.add_argument("--profile", action="store_true", help="run the started server under cProfile")
    p.add_argument("--out-dir", type=Path, default=d.out_dir)
    p.add_argument("--name", default=d.name, help="result file stem (default: %(default)s)")


def config_from_args(args: argparse.Namespace) -> LoadBenchConfig:
    return LoadBenchConfig(
        url=args.url, model_dir=args.model, engine=args.engine, sessions=tuple(sorted(set(args.sessions))),
        duration_s=args.duration, words_per_second=args.wps, max_chunk=args.max_chunk,
        jitter_ms=args.jitter_ms, prefill_words=args.prefill, right_context=args.right_context,
        max_delay_ms=args.max_delay_ms, slo_p95_ms=args.slo_p95_ms, target_sessions=args.target,
        max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_total_s=args.max_total_s,
        refine_steps=args.refine, data=args.data, seed=args.seed, fake_batch_ms=args.fake_batch_ms,
        fake_token_us=args.fake_token_us, fake_sleep=args.fake_sleep, profile=args.profile,
        out_dir=args.out_dir, name=args.name,
    )


def run_load_from_args(args: argparse.Namespace, *, command: str | None = None) -> int:
    from streampunct.errors import InputError

    try:
        cfg = config_from_args(args)
    except ValueError as e:
        raise InputError(str(e)) from None
    if cfg.url is None and cfg.engine != "fake":
        from streampunct.model import DEFAULT_MODEL_DIR

        model = cfg.model_dir or DEFAULT_MODEL_DIR
        if not Path(model).is_dir():
            raise InputError(f"no model folder at {model}: pass --model DIR, --url, or --engine fake")
    try:
        run_load_bench(cfg, command=command)
    except RuntimeError as e:
        raise InputError(str(e)) from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.load_bench", description="streaming load benchmark")
    add_load_arguments(p)
    args = p.parse_args(argv)
    return run_load_from_args(args, command="python -m benchmarks.load_bench " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main())
