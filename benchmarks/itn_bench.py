"""``bench itn``: written numbers, dates, times and money as a live client gets them.

Each sentence of ``data/itn_phrases.tsv`` (spoken sentence, and how a style
guide writes it: the file's header says which conventions) is one live
stream to a server in this process, started with the ITN grammars (in a
worker process, as ``serve --itn-grammars on`` runs them): ASR-like
chunks of 1..4 words at 2.5 words/s with jitter
(:func:`streampunct.evaluation.accuracy.live_schedule`), then ``end``, at the
server's default session options plus ``itn``. A sentence passes when its
finals' ``text``, joined, equals the expected written sentence, token for
token, once the marks the punctuation model adds (a trailing ``,`` ``.``
``?``) are set aside on both sides (and case, with ``--capitalize``). The
report gives the share that pass (by category) and every failure.

The same schedules are streamed again with ``itn`` off: the finals' words
and marks must be identical (written forms only change ``text``).

Stream against offline: each sentence is also written by the offline decoder
(``punctuate --itn``: whole-text windows, same model, grammars and
``capitalize``), and the stream's text must read the same once the marks are
set aside and sentence-start capitals are lowered on both sides (marks and the
sentence starts that follow them may differ between the two decoders; written
forms and learned case may not). ``--capitalize`` streams with ``capitalize``,
as a captioning client does.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.common import RESULTS_DIR, percentile, prepare_out_dir, write_result
from streampunct.core.options import SessionOptions
from streampunct.model import model_folder_argument

if TYPE_CHECKING:
    from streampunct.server.app import ServerRuntime


@dataclass(frozen=True)
class ItnBenchConfig:
    """Options of ``bench itn`` (see the module docstring)."""

    data: Path = Path("data/itn_phrases.tsv")
    model_dir: Path | None = None
    engine: str = "onnxruntime"
    itn_cache: Path | None = None
    words_per_second: float = 2.5
    max_chunk: int = 4
    jitter_ms: float = 150.0
    right_context: int = SessionOptions.right_context
    max_delay_ms: int = SessionOptions.max_delay_ms
    parallel: int = 40
    capitalize: bool = False
    seed: int = 0
    out_dir: Path = RESULTS_DIR
    name: str = "itn_phrases"


@dataclass(frozen=True)
class PhraseCase:
    category: str
    spoken: str
    written: str


def read_phrases(path: Path) -> list[PhraseCase]:
    """``category<TAB>spoken<TAB>written`` lines; ``#`` lines are comments."""
    from streampunct.errors import InputError

    if not path.is_file():
        raise InputError(f"--data {path}: no such file")
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not all(f.strip() for f in fields):
            raise InputError(f"{path}:{number}: expected category<TAB>spoken<TAB>written")
        cases.append(PhraseCase(*(f.strip() for f in fields)))
    if not cases:
        raise InputError(f"{path}: no phrases")
    return cases


def _unmarked(token: str) -> str:
    """``token`` without the trailing mark the punctuation model may add."""
    return token[:-1] if token[-1] in ",.?" else token


def comparable(text: str) -> list[str]:
    """The tokens of ``text`` without the trailing mark the punctuation model may add."""
    return [core for core in map(_unmarked, text.split()) if core]


def expected_tokens(text: str, capitalize: bool) -> list[str]:
    """What the expected written sentence is compared on: :func:`comparable` tokens, in lower
    case with ``capitalize`` (the expected sentences are lower case; the forms' digits and
    symbols still count)."""
    return [t.lower() for t in comparable(text)] if capitalize else comparable(text)


def written_tokens(text: str) -> list[str]:
    """:func:`comparable` tokens with each sentence's first letter lowered: what the stream and
    the offline decoder must agree on (written forms and learned case, not marks)."""
    out, start = [], True
    for token in text.split():
        core = _unmarked(token)
        if core:
            out.append(core[:1].lower() + core[1:] if start else core)
        start = token[-1] in ".?"
    return out


async def _stream(url: str, events, options: SessionOptions, itn: bool):
    from streampunct.client.stream_client import StreamClient, Transcript

    client = await StreamClient.connect(url, right_context=options.right_context,
                                        max_delay_ms=options.max_delay_ms, itn=itn,
                                        capitalize=options.capitalize)
    transcript = Transcript()

    async def receive() -> None:
        async for message in client:
            transcript.apply(message)

    receiver = asyncio.create_task(receive())
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for event in events:
        if event.kind == "words":
            await asyncio.sleep(max(0.0, t0 + event.time - loop.time()))
            await client.send_words(list(event.words))
    await client.end()
    await receiver
    return transcript


async def _stream_all(url: str, schedules, options: SessionOptions, itn: bool, parallel: int):
    gate = asyncio.Semaphore(parallel)

    async def one(events):
        async with gate:
            return await _stream(url, events, options, itn)

    return await asyncio.gather(*(one(events) for events in schedules))


class TimedNormalizer:
    """A normalizer that counts its calls and the time they take (on the server's writing threads)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.seconds: list[float] = []

    def phrases(self, words, *, first=0, until=None):
        t0 = time.perf_counter()
        try:
            return self.inner.phrases(words, first=first, until=until)
        finally:
            self.seconds.append(time.perf_counter() - t0)


def _server_config(cfg: ItnBenchConfig):
    from streampunct.server.app import ServerConfig

    return ServerConfig(host="127.0.0.1", port=0, model_dir=cfg.model_dir, engine=cfg.engine,
                        itn_cache=cfg.itn_cache, max_sessions=cfg.parallel + 8)


async def _serve_and_stream(cfg: ItnBenchConfig, schedules, options, runtime) -> tuple[list, list]:
    import logging

    from streampunct.server.app import serve

    # its sessions' INFO lines (opened, config, closed: several per sentence) would bury the
    # figures; a server the other benches start logs at WARNING too
    server_log = logging.getLogger("streampunct.server")
    level = server_log.level
    server_log.setLevel(max(logging.WARNING, server_log.getEffectiveLevel()))
    server = await serve(_server_config(cfg), runtime)
    try:
        await server.wait_ready()
        on = await _stream_all(server.url, schedules, options, True, cfg.parallel)
        off = await _stream_all(server.url, schedules, options, False, cfg.parallel)
    finally:
        await server.shutdown()
        server_log.setLevel(level)
    return on, off


def _offline_decoder(cfg: ItnBenchConfig, runtime: ServerRuntime | None):
    """The offline decoder of ``cfg``'s model folder, or (an injected ``runtime``) of its engine."""
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.core.windowing import WindowConfig

    if runtime is None:
        return OfflineDecoder.from_model_dir(cfg.model_dir, engine=cfg.engine)
    return OfflineDecoder(runtime.engine_factory(), runtime.aligner, runtime.window or WindowConfig(),
                          case_margin=runtime.case_margin)


def run_itn_bench(cfg: ItnBenchConfig, command: str | None = None, *, runtime: ServerRuntime | None = None,
                  write: bool = True) -> dict:
    """Stream every phrase with ``itn`` on and off, and write it offline; ``runtime`` goes to
    :func:`streampunct.server.app.serve` (None: ``cfg``'s model folder; tests inject an
    engine and a normalizer)."""
    from streampunct.api import Punctuator
    from streampunct.evaluation.accuracy import live_schedule
    from streampunct.server.app import ServerRuntime
    from streampunct.text.normalize import normalize_words
    from streampunct.text.written_form import WrittenForms

    if write:
        prepare_out_dir(cfg.out_dir, f"{cfg.name}.json")
    cases = read_phrases(cfg.data)
    from streampunct.text.itn import available, grammar_cache

    if cfg.itn_cache is not None and available():  # a file, a folder it cannot make: here, not in a worker
        grammar_cache(Path(cfg.itn_cache))
    options = SessionOptions(right_context=cfg.right_context, max_delay_ms=cfg.max_delay_ms,
                             capitalize=cfg.capitalize)
    schedules = [live_schedule(normalize_words(c.spoken.split()), words_per_second=cfg.words_per_second,
                               max_chunk=cfg.max_chunk, jitter_ms=cfg.jitter_ms, seed=cfg.seed + k)
                 for k, c in enumerate(cases)]
    print(f"itn: {len(cases)} sentences, up to {cfg.parallel} streams at a time, right_context "
          f"{options.right_context}, max_delay_ms {options.max_delay_ms}, capitalize {options.capitalize}",
          flush=True)
    decoder = _offline_decoder(cfg, runtime)  # as punctuate --itn writes each sentence (below)
    if runtime is None:
        runtime = ServerRuntime.from_model(_server_config(cfg))
    workers = None
    normalizer = runtime.normalizer
    if normalizer is None:  # as serve --itn-grammars on: the grammars in a worker process
        from streampunct.text.itn import ProcessNormalizer

        normalizer = workers = ProcessNormalizer(cfg.itn_cache)
        workers.start()
    timed = TimedNormalizer(normalizer)
    runtime = replace(runtime, normalizer=timed)
    t0 = time.perf_counter()
    try:
        on, off = asyncio.run(_serve_and_stream(cfg, schedules, options, runtime))
        wall_s = time.perf_counter() - t0
        writer = Punctuator(decoder, name="offline", written=WrittenForms(normalizer=normalizer))
        offline = [writer.punctuate(case.spoken, capitalize=cfg.capitalize, itn=True) for case in cases]
    finally:
        decoder.close()
        if workers is not None:
            workers.close()

    total, passed = Counter(), Counter()
    failures, changed, held, unlike = [], [], 0, []
    for case, with_itn, without, written in zip(cases, on, off, offline, strict=True):
        got = " ".join(text for _, _, text in with_itn.texts if text)
        if written_tokens(got) != written_tokens(written):
            unlike.append({"category": case.category, "spoken": case.spoken, "stream": got, "offline": written})
        held += sum(1 for _, _, text in with_itn.texts if not text)
        total[case.category] += 1
        if expected_tokens(got, cfg.capitalize) == expected_tokens(case.written, cfg.capitalize):
            passed[case.category] += 1
        else:
            failures.append({"category": case.category, "spoken": case.spoken, "expected": case.written,
                             "got": got})
        if with_itn.final_words != without.final_words:
            changed.append(case.spoken)
    n, ok = sum(total.values()), sum(passed.values())
    result = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
        "sentences": n, "passed": ok, "share": round(ok / n, 4), "wall_s": round(wall_s, 1),
        "by_category": {c: {"sentences": total[c], "passed": passed[c]} for c in total},
        "words_and_marks_identical": not changed, "sentences_with_other_words_or_marks": changed,
        "same_as_offline": n - len(unlike), "same_as_offline_share": round((n - len(unlike)) / n, 4),
        "unlike_offline": unlike,
        "finals_with_empty_text": held, "failures": failures,
        "itn_calls": len(timed.seconds),
        "itn_call_ms": {q: round(1000 * percentile(timed.seconds, p), 2) for q, p in
                        (("p50", 50), ("p95", 95), ("max", 100))} if timed.seconds else None,
        "itn_total_s": round(sum(timed.seconds), 2),
    }
    print(f"written form as expected: {ok}/{n} sentences ({100 * ok / n:.1f}%); words and marks identical "
          f"with itn on and off: {'yes' if not changed else f'no, {len(changed)} sentences differ'}")
    if timed.seconds:
        print(f"ITN (off the event loop): {len(timed.seconds)} calls, p50 {result['itn_call_ms']['p50']} ms, "
              f"p95 {result['itn_call_ms']['p95']} ms, max {result['itn_call_ms']['max']} ms, "
              f"{result['itn_total_s']} s in all")
    for c in total:
        print(f"  {c:9s} {passed[c]:3d}/{total[c]}")
    for f in failures:
        print(f"  FAIL [{f['category']}] {f['spoken']!r}\n       expected {f['expected']!r}\n       got      {f['got']!r}")
    print(f"written as offline writes it (marks aside): {n - len(unlike)}/{n} sentences "
          f"({100 * (n - len(unlike)) / n:.1f}%)")
    for u in unlike:
        print(f"  UNLIKE [{u['category']}] stream  {u['stream']!r}\n       offline {u['offline']!r}")
    if write:
        path = write_result(cfg.name, result, cfg.out_dir, command=command)
        print(f"wrote {path}")
    return result


def add_itn_arguments(p: argparse.ArgumentParser) -> None:
    from engines.registry import BACKENDS
    from streampunct.commands.argtypes import (
        non_negative_int,
        path_argument,
        positive_float,
        positive_int,
    )

    d = ItnBenchConfig()
    p.add_argument("--data", type=path_argument, default=d.data,
                   help="category<TAB>spoken<TAB>written sentences (default: %(default)s)")
    p.add_argument("--model", type=model_folder_argument, default=None, help="model folder (default: the shipped model)")
    p.add_argument("--engine", default=d.engine, choices=list(BACKENDS), help="engine backend (default: %(default)s)")
    p.add_argument("--itn-cache", type=path_argument, default=None, help="compiled grammars (default: ~/.cache/streampunct/itn)")
    p.add_argument("--wps", type=positive_float, default=d.words_per_second, help="words/s (default: %(default)s)")
    p.add_argument("--right-context", type=non_negative_int, default=d.right_context,
                   help="session right_context (default: the server's, %(default)s)")
    p.add_argument("--max-delay-ms", type=non_negative_int, default=d.max_delay_ms,
                   help="session max_delay_ms (default: the server's, %(default)s)")
    p.add_argument("--parallel", type=positive_int, default=d.parallel,
                   help="sentences streamed at a time (default: %(default)s)")
    p.add_argument("--capitalize", action="store_true",
                   help="stream (and write offline) with capitalize: sentence starts, I and learned case")
    p.add_argument("--out-dir", type=path_argument, default=RESULTS_DIR, help="where the JSON goes (default: %(default)s)")


def run_itn_from_args(args: argparse.Namespace, command: str | None = None) -> int:
    cfg = ItnBenchConfig(data=args.data, model_dir=args.model, engine=args.engine, itn_cache=args.itn_cache,
                         words_per_second=args.wps, right_context=args.right_context,
                         max_delay_ms=args.max_delay_ms, parallel=args.parallel, capitalize=args.capitalize,
                         out_dir=args.out_dir)
    result = run_itn_bench(cfg, command=command)
    return 0 if result["words_and_marks_identical"] else 1
