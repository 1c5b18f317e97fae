"""``bench flood``: one client pushes a long stream as fast as the socket takes it; server memory.

The server's input backpressure (docs/server.md, "Bounded resources") should
hold such a client to the speed of the engine, with the backlog bounded and
nothing lost. This benchmark starts the same child server as ``bench load``
(:class:`~benchmarks.server_under_test.ServerProcess`, the real engine by
default), warms it with one short session, then opens one session with the
server's default options and sends ``words`` words of a transcript (repeated
as needed) in ``message_words``-word messages, each sent as soon as
websockets' ``send`` returns, then ``end``, while a second task reads every
message. The server's RSS (psutil) is sampled every ``sample_s`` seconds.

It reports the RSS when the server was ready, after the warm-up, its peak
during the flood and at the end, the growth (peak minus warm), the
exactly-once check of the finals (:func:`~benchmarks.load_finals.check_finals`),
the close, the wall time and words/s, and the server's ``/metrics`` over the
flood (input pauses, engine calls, tokens per word).

``--unique`` pushes words never seen before instead of the transcript
(:func:`unique_words`: 12-20 random letters, about 10 sub-tokens each): every
word is tokenized and offered to the server's word cache, the worst case for
what a flood leaves behind. ``--idle-s`` lets the server idle that long after
the warm-up before the flood (so that ``rss_mb.warm``, the RSS before the
flood, is taken as the one after it), keeps sampling that long after the
flood with no session open, and reports the RSS at the end of it
(``rss_mb.idle``) and what stayed (``stayed_mb``: idle minus warm).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import string
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    check_non_negative,
    check_positive,
    prepare_out_dir,
    publish,
    result_stem,
    run_failed,
)
from benchmarks.load_bench import load_corpus
from benchmarks.load_clients import closing_client
from benchmarks.load_finals import check_finals
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

#: The server of ``bench flood``: the server's default session options and batching; a fake
#: engine that costs something, so that the backlog builds up.
FLOOD_SERVER = ServerUnderTest(fake_batch_ms=2.0, fake_token_us=10.0)
#: The server's flags of ``bench flood``; its JSON ``config`` also has the fake engine's costs.
FLOOD_SERVER_FLAGS = ("model_dir", "engine")


@dataclass(frozen=True)
class FloodConfig:
    """Options of the flood benchmark.

    Attributes:
        server: the server started (``engine="fake"``: the synthetic engine, at
            :data:`FLOOD_SERVER`'s cost unless told otherwise).
        words: words the client pushes.
        message_words: words per ``words`` message.
        warmup_words: words of the warm-up session (sent at once, then ``end``).
        sample_s: RSS sampling period.
        timeout_s: the flood must end within this (else the run fails).
        idle_s: seconds idle, no session open, before the flood (after the warm-up) and after it (sampled).
        unique: push unique random words (:func:`unique_words`) instead of the transcript.
        seed: randomness of the unique words.
        data: transcript (repeated to ``words``; the warm-up session's words either way).
        out_dir, name: where ``<name>.json`` and ``<name>.png`` go.
    """

    server: ServerUnderTest = FLOOD_SERVER
    words: int = 200_000
    message_words: int = 1000
    warmup_words: int = 5000
    sample_s: float = 0.25
    timeout_s: float = 900.0
    idle_s: float = 0.0
    unique: bool = False
    seed: int = 0
    data: Path = Path("data/iwslt2011/test2011")
    out_dir: Path = RESULTS_DIR
    name: str = "flood"

    def __post_init__(self) -> None:
        if self.words < 1 or self.message_words < 1 or self.warmup_words < 0:
            raise ValueError("words and message_words must be >= 1, warmup_words >= 0")
        # `not x > 0`, not `x <= 0`: NaN is refused too
        check_positive(sample_s=self.sample_s, timeout_s=self.timeout_s)
        check_non_negative(idle_s=self.idle_s)

    def to_json(self) -> dict:
        """The ``config`` of the JSON: the server's fields and the bench's, side by side."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "server"}
        server = self.server.to_json(FLOOD_SERVER_FLAGS + ("fake_batch_ms", "fake_token_us"))
        return json_ready({**server, **own})


def stream_words(corpus: list[str], n: int) -> list[str]:
    """The first ``n`` words of ``corpus`` repeated end to end."""
    if not corpus:
        raise ValueError("empty transcript")
    reps = -(-n // len(corpus))
    return (corpus * reps)[:n]


def unique_words(n: int, seed: int = 0, min_len: int = 12, max_len: int = 20) -> list[str]:
    """``n`` distinct words of ``min_len``-``max_len`` random lowercase letters: words no
    vocabulary has, so each splits into many sub-tokens (about 10 with the shipped
    WordPiece tokenizer) and each is new to the server's word cache."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(min_len, max_len)))
        if word not in seen:
            seen.add(word)
            out.append(word)
    return out


async def push(url: str, words: list[str], message_words: int) -> dict:
    """One session: send ``words`` as fast as the socket takes them, then ``end``; read
    everything. Returns the finals check, the close and the timings."""
    from streampunct.client.stream_client import open_client
    from streampunct.core.wire import Ended, Error, Final

    finals: list[Final] = []
    errors: list[str] = []
    ended: int | None = None
    t0 = time.perf_counter()
    sent_at = None
    async with closing_client(await open_client(url)) as client:  # a failed connection: one ConnectError

        async def send() -> float:
            for k in range(0, len(words), message_words):
                await client.send_words(words[k : k + message_words])
            await client.end()
            return time.perf_counter() - t0

        async def read() -> None:
            nonlocal ended
            async for message in client:
                if isinstance(message, Final):
                    finals.append(message)
                elif isinstance(message, Error):
                    errors.append(f"{message.code}: {message.message}")
                elif isinstance(message, Ended):
                    ended = message.words

        reader = asyncio.create_task(read())
        sent_at = await send()
        await reader
        close_code = client.close_code
    wall = time.perf_counter() - t0
    check = check_finals(words, finals)
    return {
        "check": asdict(check), "ok": check.ok and ended == len(words) and not errors, "ended_words": ended,
        "errors": errors, "close_code": close_code, "final_messages": len(finals),
        "send_s": round(sent_at, 2), "wall_s": round(wall, 2),
        "words_per_s": round(len(words) / wall, 1),
    }


async def _sample_rss(server: ServerProcess, period: float, out: list[tuple[float, float]],
                      stop: asyncio.Event) -> None:
    t0 = time.perf_counter()
    while not stop.is_set():
        rss = server.rss_mb()
        if rss is not None:
            out.append((round(time.perf_counter() - t0, 2), round(rss, 2)))
        try:
            await asyncio.wait_for(stop.wait(), period)
        except TimeoutError:
            pass


async def _flood(cfg: FloodConfig, server: ServerProcess, url: str, words: list[str],
                 warmup: list[str]) -> dict:
    rss_ready = server.rss_mb()
    if cfg.warmup_words:
        warm = await push(url, warmup, cfg.message_words)
        if not warm["ok"]:
            raise RuntimeError(f"the warm-up session failed: {warm}")
    await asyncio.sleep(1.0)
    rss_warmup_end = server.rss_mb()
    if cfg.idle_s:
        await asyncio.sleep(cfg.idle_s)
    rss_warm = server.rss_mb()
    before = await http_get(url, "/metrics")
    samples: list[tuple[float, float]] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_rss(server, cfg.sample_s, samples, stop))
    t0 = time.perf_counter()
    try:
        result = await asyncio.wait_for(push(url, words, cfg.message_words), cfg.timeout_s)
        flood_s = time.perf_counter() - t0
        await asyncio.sleep(1.0)
        rss_end = server.rss_mb()
        after = await http_get(url, "/metrics")
        if cfg.idle_s:
            await asyncio.sleep(max(0.0, cfg.idle_s - (time.perf_counter() - t0 - flood_s)))
    finally:
        stop.set()
        await sampler
    rss_idle = server.rss_mb() if cfg.idle_s else None
    figures = {}
    if before and after:
        delta = metrics_delta(parse_metrics(before[1]), parse_metrics(after[1]))
        figures = server_figures(delta, result["wall_s"])
        for name in ("streampunct_input_paused_total", "streampunct_slow_reader_closes_total",
                     "streampunct_allocator_trims_total"):
            figures[name.removeprefix("streampunct_")] = sum(
                v for (sample, _), v in delta.items() if sample == name)
    peak = max([r for _, r in samples] + [rss_end or 0.0])
    return {
        **result,
        "rss_mb": {"ready": rss_ready, "warmup_end": rss_warmup_end, "warm": rss_warm, "peak": peak,
                   "end": rss_end, "idle": rss_idle},
        "growth_mb": round(peak - (rss_warm or 0.0), 2),
        "stayed_mb": None if rss_idle is None else round(rss_idle - (rss_warm or 0.0), 2),
        "flood_s": round(flood_s, 2),
        "rss_samples": samples,
        "server": figures,
    }


def run_flood_bench(cfg: FloodConfig, *, command: str | None = None) -> dict:
    prepare_out_dir(cfg.out_dir, f"{cfg.name}.json", f"{cfg.name}.png")
    corpus = load_corpus(cfg.data)
    words = unique_words(cfg.words, cfg.seed) if cfg.unique else stream_words(corpus, cfg.words)
    warmup = stream_words(corpus, cfg.warmup_words) if cfg.warmup_words else []
    with tempfile.TemporaryDirectory(prefix="streampunct-flood-") as tmp:
        server = ServerProcess(cfg.server, max_sessions=4, workdir=Path(tmp))
        try:
            url = server.start()
            print(f"server ready at {url} ({server.engine}, {server.model}); pid {server.pid}; "
                  f"pushing {len(words)} {'unique ' if cfg.unique else ''}words in {cfg.message_words}-word "
                  "messages", flush=True)
            result = asyncio.run(_flood(cfg, server, url, words, warmup))
            result["server_model"], result["server_engine"] = server.model, server.engine
        finally:
            code = server.stop()
        result["server_exit_code"] = code
    payload = {"config": cfg.to_json(), **result}
    publish(cfg.name, payload, cfg.out_dir, command=command, plot=plot_flood, summary=summary_text)
    return payload


def summary_text(p: dict) -> str:
    c, r = p["check"], p["rss_mb"]
    idle = ""
    if r.get("idle") is not None:
        idle = (f"\nafter {p['config']['idle_s']:.0f} s idle: RSS {r['idle']:.1f} MB, "
                f"{p['stayed_mb']:+.1f} MB against the warm server")
    unique = "unique " if p["config"].get("unique") else ""
    return (
        f"flood: {p['config']['words']} {unique}words in {p['config']['message_words']}-word messages, "
        f"{p['server_engine']} ({p['server_model']}): {p['wall_s']} s ({p['words_per_s']} words/s), "
        f"end says {p['ended_words']} words, close {p['close_code']}\n"
        f"finals: finalized {c['finalized']}, lost {c['lost']}, duplicated {c['duplicated']}, "
        f"out of order {c['out_of_order']}, mismatched {c['mismatched']}\n"
        f"server RSS MB: ready {r['ready']:.1f}, warm {r['warm']:.1f}, peak {r['peak']:.1f}, "
        f"end {r['end']:.1f}; growth (peak - warm) {p['growth_mb']:.1f} MB; "
        f"input paused {p['server'].get('input_paused_total', 'n/a')} times" + idle
    )


def plot_flood(p: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    t = [s[0] for s in p["rss_samples"]]
    rss = [s[1] for s in p["rss_samples"]]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(t, rss, label="server RSS")
    ax.axhline(p["rss_mb"]["warm"], color="gray", ls="--", label="after warm-up")
    if p.get("flood_s") is not None and p["config"].get("idle_s"):
        ax.axvspan(p["flood_s"], t[-1] if t else p["flood_s"], color="gray", alpha=0.15, label="idle")
    ax.set_xlabel("seconds into the flood")
    ax.set_ylabel("MB")
    ax.set_title(f"one client pushing {p['config']['words']} words: +{p['growth_mb']:.1f} MB peak")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def add_flood_arguments(p: argparse.ArgumentParser) -> None:
    from streampunct.commands.argtypes import (
        non_negative_float,
        non_negative_int,
        path_argument,
        positive_float,
        positive_int,
    )

    d = FloodConfig()
    p.add_argument("--words", type=positive_int, default=d.words, help="words pushed (default %(default)s)")
    p.add_argument("--message-words", type=positive_int, default=d.message_words,
                   help="words per message (default %(default)s)")
    p.add_argument("--warmup-words", type=non_negative_int, default=d.warmup_words,
                   help="words of the warm-up session (default %(default)s)")
    p.add_argument("--timeout-s", type=positive_float, default=d.timeout_s,
                   help="limit on the flood (default %(default)s)")
    p.add_argument("--idle-s", type=non_negative_float, default=d.idle_s,
                   help="seconds the server idles, no session open, after the warm-up and after the flood "
                        "(sampled); the RSS before and after are taken alike (default %(default)s)")
    p.add_argument("--unique", action="store_true",
                   help="push unique random words (12-20 letters, ~10 sub-tokens each) instead of the transcript")
    p.add_argument("--seed", type=int, default=d.seed, help="randomness of --unique words")
    p.add_argument("--data", type=path_argument, default=d.data, help="transcript, repeated as needed")
    p.add_argument("--out-dir", type=path_argument, default=d.out_dir)
    p.add_argument("--name", type=result_stem, default=d.name, help="result file stem (default %(default)s)")
    add_server_arguments(p.add_argument_group("the server started"), d.server, FLOOD_SERVER_FLAGS)


def config_from_args(args: argparse.Namespace) -> FloodConfig:
    return FloodConfig(
        server=server_from_args(args, FLOOD_SERVER), words=args.words, message_words=args.message_words,
        warmup_words=args.warmup_words, timeout_s=args.timeout_s, idle_s=args.idle_s, unique=args.unique,
        seed=args.seed, data=args.data, out_dir=args.out_dir, name=args.name,
    )


def run_flood_from_args(args: argparse.Namespace, *, command: str | None = None) -> int:
    from streampunct.client.stream_client import ConnectError
    from streampunct.errors import InputError

    cfg = bench_config(config_from_args, args)
    try:
        payload = run_flood_bench(cfg, command=command)
    except TimeoutError:  # the flood did not end in time: it measured nothing
        return run_failed("flood", f"the flood did not end within --timeout-s {cfg.timeout_s:g} s")
    except RuntimeError as e:
        raise InputError(f"flood failed: {e}") from None
    except ConnectError as e:  # its one session could not connect: nothing measured, as bench load
        return run_failed("flood", str(e))
    failure = run_failure(payload)
    return run_failed("flood", failure) if failure else 0


def run_failure(payload: dict) -> str | None:
    """Why the flood failed (None: every word came back once, ended, no error)."""
    if payload["ok"]:
        return None
    c = payload["check"]
    errors = "; ".join(payload["errors"][:3]) or "none"
    return (f"the flood failed: finalized {c['finalized']} of {payload['config']['words']} words, lost {c['lost']}, "
            f"duplicated {c['duplicated']}, out of order {c['out_of_order']}, mismatched {c['mismatched']}; "
            f"end says {payload['ended_words']} words; close {payload['close_code']}; errors {errors}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.flood_bench", description="one client floods a server")
    add_flood_arguments(p)
    return run_flood_from_args(p.parse_args(argv), command="python -m benchmarks.flood_bench " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    from benchmarks.common import run_module

    raise SystemExit(run_module(main, "python -m benchmarks.flood_bench"))
