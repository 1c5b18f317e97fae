"""``bench live``: accuracy as users get it, through a real server at real-time pace.

A labelled file is cut into ``sessions`` consecutive segments. Each segment
is one live stream, sent at the same time as the others to a server started
as a child process (or ``--url``): ASR-like chunks of 1..4 words at 2.5
words/s with jitter (:func:`streampunct.evaluation.accuracy.live_schedule`), then a
``flush`` and an ``end``, with the server's default session options unless
told otherwise. The finals are scored against the gold labels (overall
micro F1, the same scorer as ``evaluate``).

With ``--partials`` the sessions ask for partials and, as a streaming ASR
does, send each chunk first as interim hypotheses (its first word 200 ms
before the commit, the whole chunk 100 ms before; ``--no-hypotheses``: only
the committed words' partials). The report then gives the interim stability
of what the clients saw (:mod:`benchmarks.partial_stability`): the share of
words whose last partial equals their final, and the visible changes per 100
words. Hypotheses never change finals, so F1 is the same with or without them.

The same schedules are then played through the simulation
(:func:`streampunct.evaluation.accuracy.schedule_labels`, the server's own
``StreamState``, one window per decision) with the same model, and the
report gives both F1s, their label agreement and the words where they
differ. Windows follow the schedule, not the load. With padded engine calls
(``--batch-rows padded``) a dynamic int8 engine's activation scales span each call,
so other streams move about 0.6% of the labels; with ``--batch-rows exact``
(the server's default) the server runs such windows alone (and pads those of
graphs with static activation scales, the shipped default's streaming graph),
and the two differ only where the
schedule the server saw was not the one planned (a chunk that reached it a
few ms late, next to a word's delay bound).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from benchmarks.common import (
    RESULTS_DIR,
    RunFailed,
    check_non_negative,
    check_positive,
    count_text,
    prepare_out_dir,
    result_stem,
    run_failed,
    write_result,
)
from benchmarks.load_clients import closing_client
from benchmarks.server_under_test import (
    ServerProcess,
    ServerUnderTest,
    add_server_arguments,
    bench_config,
    json_ready,
    server_from_args,
)

#: The server of ``bench live``: its stream cache is also the simulation's.
LIVE_SERVER = ServerUnderTest(stream_cache="auto")
#: The server's flags of ``bench live`` (its JSON ``config`` has the same fields).
LIVE_SERVER_FLAGS = ("model_dir", "engine", "right_context", "max_delay_ms", "batch_rows", "stream_cache")


@dataclass(frozen=True)
class LiveBenchConfig:
    """Options of ``bench live`` (see the module docstring).

    ``server`` is the child server (:class:`~benchmarks.server_under_test.ServerUnderTest`):
    its model, engine and stream cache are also the simulation's, and its ``right_context`` and
    ``max_delay_ms`` the sessions' options (with ``url`` too).
    """

    server: ServerUnderTest = LIVE_SERVER
    data: Path = Path("data/iwslt2011/test2011")
    text: bool = False
    sessions: int = 60
    words_per_second: float = 2.5
    max_chunk: int = 4
    jitter_ms: float = 150.0
    url: str | None = None
    partials: bool = False  # sessions ask for partials; the stability of what they show is reported
    hypotheses: bool = True  # with partials: send each chunk as interim hypotheses before committing it
    capitalize: bool | None = None  # the sessions' capitalize (None: the server's default)
    seed: int = 0
    out_dir: Path = RESULTS_DIR
    name: str | None = None

    def __post_init__(self) -> None:
        if self.sessions < 1:
            raise ValueError(f"sessions must be >= 1, not {self.sessions}")
        if self.max_chunk < 1:
            raise ValueError(f"max_chunk must be >= 1, not {self.max_chunk}")
        check_positive(words_per_second=self.words_per_second)  # NaN fails too
        check_non_negative(jitter_ms=self.jitter_ms)

    @property
    def result_name(self) -> str:
        """The result file stem: ``name``, else ``live_`` and the data set's name
        (``live_test2011`` for the default data, ``live_swda_val`` for ``--text`` on
        ``swda_val_cased.txt`` or for ``cache/swda_val.tsv``)."""
        stem = self.data.stem.removesuffix("_cased") if self.text else self.data.stem
        return self.name or f"live_{stem}"

    def to_json(self) -> dict:
        """The ``config`` of the JSON: the server's fields and the bench's, side by side."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "server"}
        return json_ready({**self.server.to_json(LIVE_SERVER_FLAGS), **own})


def segments(n_words: int, sessions: int) -> list[tuple[int, int]]:
    """``sessions`` consecutive ``[start, end)`` spans covering ``n_words`` (sizes differ by <= 1);
    never more spans than words (``bench live`` refuses more sessions first: :func:`check_sessions_fit`)."""
    sessions = max(1, min(sessions, n_words))
    bounds = np.linspace(0, n_words, sessions + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def check_sessions_fit(cfg: LiveBenchConfig, n_words: int) -> None:
    """InputError (a usage error, status 2) when ``cfg.sessions`` is more than the file's words:
    each session streams its own consecutive segment of at least one word, so a file of
    ``n_words`` words holds at most ``n_words`` sessions. Refused rather than run with fewer, so
    that the sessions a result reports are always the sessions asked for."""
    if cfg.sessions > n_words:
        from streampunct.errors import InputError

        raise InputError(
            f"--sessions {cfg.sessions}: {cfg.data} has {n_words} words and each session streams its own "
            f"segment of at least one of them, so this file holds at most {n_words} sessions: pass "
            f"--sessions {n_words} or fewer, or a longer --data")


def with_hypotheses(events) -> list:
    """``events`` with interim hypotheses before each chunk, as a streaming ASR sends them:
    the chunk's first word 200 ms before its commit, the whole chunk 100 ms before (never
    before the previous event). Hypothesis events have kind ``"hypothesis"``."""
    from streampunct.evaluation.accuracy import Event

    out, last_t = [], 0.0
    for event in events:
        if event.kind == "words":
            out.append(Event(max(last_t, event.time - 0.2), event.words[:1], kind="hypothesis"))
            out.append(Event(max(last_t, event.time - 0.1), event.words, kind="hypothesis"))
        out.append(event)
        last_t = event.time
    return out


async def stream_schedule(url: str, events, options, *, partials: bool = False,
                          capitalize: bool | None = None):
    """Send ``events`` at their times (from now) on one session; return its Transcript and,
    with ``partials``, the final and partial messages in the order received."""
    from streampunct.client.stream_client import Transcript, open_client
    from streampunct.core.wire import Final, Partial

    client = await open_client(url, right_context=options.right_context,  # a failure: one ConnectError
                               max_delay_ms=options.max_delay_ms, partials=partials or None,
                               capitalize=capitalize)
    transcript = Transcript()
    seen: list = []

    async def receive() -> None:
        async for message in client:
            transcript.apply(message)
            if partials and isinstance(message, Final | Partial):
                seen.append(message)

    async with closing_client(client):  # interrupted (Ctrl-C): aborted, so the server stops at once
        receiver = asyncio.create_task(receive())
        try:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for event in events:
                await asyncio.sleep(max(0.0, t0 + event.time - loop.time()))
                if event.kind == "words":
                    await client.send_words(list(event.words))
                elif event.kind == "hypothesis":
                    await client.send_hypothesis(list(event.words))
                elif event.kind == "flush":
                    await client.flush()
            await client.end()  # after the flush: every word is already decided, so no mark is forced
            await receiver
        finally:
            receiver.cancel()
    return transcript, seen


async def _run_sessions(url: str, schedules, options, *, partials: bool = False,
                        capitalize: bool | None = None) -> list:
    """Each schedule's ``(transcript, seen)``, or the error its session failed with (it could not
    connect, its stream broke): a project error or an OSError; any other keeps its traceback."""
    from streampunct.errors import StreampunctError

    outcomes = await asyncio.gather(*(stream_schedule(url, events, options, partials=partials, capitalize=capitalize)
                                      for events in schedules), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, StreampunctError | OSError):
            raise outcome
    return outcomes


def read_live_data(cfg: LiveBenchConfig):
    """The words and gold labels to stream: a ``word<TAB>LABEL`` file, or with ``text``
    punctuated text converted as training converts it."""
    from streampunct.errors import InputError
    from streampunct.text.word_labels import read_punctuated_text, read_word_labels

    data = read_punctuated_text(cfg.data) if cfg.text else read_word_labels(cfg.data)
    if not data.words:
        raise InputError(f"{cfg.data}: no words to stream")
    return data


def run_live_bench(cfg: LiveBenchConfig, command: str | None = None) -> dict:
    from benchmarks.partial_stability import partial_stability, total
    from engines.registry import engine_threads
    from streampunct.client.stream_client import Transcript, check_url
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.evaluation.accuracy import live_schedule, schedule_labels, score

    if cfg.url is not None:
        check_url(cfg.url)  # a malformed --url: one line, before 60 sessions try it
    prepare_out_dir(cfg.out_dir, f"{cfg.result_name}.json")
    data = read_live_data(cfg)
    check_sessions_fit(cfg, len(data.words))
    spans = segments(len(data.words), cfg.sessions)
    options = cfg.server.session_options()
    schedules = [live_schedule(data.words[a:b], words_per_second=cfg.words_per_second, max_chunk=cfg.max_chunk,
                               jitter_ms=cfg.jitter_ms, seed=cfg.seed + k) for k, (a, b) in enumerate(spans)]
    speech_s = max(events[-1].time for events in schedules)
    print(f"live: {len(data.words)} words in {len(spans)} sessions of ~{len(data.words) // len(spans)} words "
          f"({speech_s:.0f} s of speech each), right_context {options.right_context}, "
          f"max_delay_ms {options.max_delay_ms}", flush=True)

    server = None
    url = cfg.url
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if url is None:
            server = ServerProcess(cfg.server, max_sessions=len(spans) + 8, workdir=Path(tmp))
            url = server.start()
        try:
            sent = [with_hypotheses(events) for events in schedules] if cfg.partials and cfg.hypotheses else schedules
            outcomes = asyncio.run(_run_sessions(url, sent, options, partials=cfg.partials,
                                                 capitalize=cfg.capitalize))
        finally:
            if server is not None:
                server.stop()
    wall_s = time.perf_counter() - t0
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if len(failed) == len(outcomes):  # nothing came through the server: no result, no simulation
        kinds = count_text(Counter(type(e).__name__ for e in failed))
        raise RunFailed(f"every session failed ({len(failed)} tried; {kinds}): {failed[0]}")
    if failed:
        print(f"{len(failed)} of {len(outcomes)} sessions failed: {failed[0]}", flush=True)
    # a failed session's words are lost
    runs = [(Transcript(), []) if isinstance(o, BaseException) else o for o in outcomes]
    transcripts = [transcript for transcript, _ in runs]

    lost = sum((b - a) - len(t.words) for t, (a, b) in zip(transcripts, spans, strict=True))
    mismatched = sum(t.words != data.words[a:b] for t, (a, b), o in zip(transcripts, spans, outcomes, strict=True)
                     if not isinstance(o, BaseException))  # a failed session's words count as lost only
    served = [label for t in transcripts for label in t.labels]
    result: dict = {"config": cfg.to_json(),
                    "n_words": len(data.words), "sessions": len(spans), "speech_s": round(speech_s, 1),
                    "wall_s": round(wall_s, 1), "lost_words": lost, "mismatched_sessions": mismatched,
                    "failed_sessions": len(failed),
                    "session_failures": dict(Counter(type(e).__name__ for e in failed))}
    if not lost and not mismatched:
        result["server"] = score(data.labels, served).to_dict()
        line = f"through the server: overall F1 {result['server']['overall_f1']:.2f}"
        if cfg.partials:
            stability = total([partial_stability(seen) for _, seen in runs])
            result["interim_stability"] = stability.to_dict()
            line += "; " + format_stability(stability)
        print(line, flush=True)
    else:
        print(f"through the server: {lost} words lost, {mismatched} sessions with other words: not scored")

    if cfg.capitalize and not lost and not mismatched:
        result["text_checks"] = stream_against_offline(cfg, data.words, spans, transcripts)

    punct = OfflineDecoder.from_model_dir(cfg.server.model_dir, engine=cfg.server.engine)
    try:
        stream_engine = punct.stream_engine(cfg.server.stream_cache, **engine_threads(cfg.server.engine, 1))
        result["stream_cache"] = stream_engine is not None
        simulated = [label for events in schedules
                     for label in schedule_labels(events, punct.aligner, punct.stream_window, punct.engine.infer,
                                                  options, stream_engine=stream_engine)]
    finally:
        punct.close()
    result["simulation"] = score(data.labels, simulated).to_dict()
    if len(served) == len(simulated):
        result["label_agreement"] = round(float(np.mean(np.asarray(served) == np.asarray(simulated))), 5)
        differ = disagreements(data.words, served, simulated, limit=None)
        result["disagreements_total"] = len(differ)
        result["disagreements"] = differ[:DISAGREEMENTS_LISTED]
    print(f"simulation of the same schedules: overall F1 {result['simulation']['overall_f1']:.2f}"
          + (f"; label agreement {100 * result['label_agreement']:.2f}%" if "label_agreement" in result else ""))
    path = write_result(cfg.result_name, result, cfg.out_dir, command=command)
    print(f"wrote {path}")
    return result


def stream_against_offline(cfg: LiveBenchConfig, words, spans, transcripts) -> dict:
    """Capitals after a word with no mark and spacing faults (:mod:`benchmarks.text_checks`) in the
    finals' ``text`` of each session, against the offline decoder's text of the same words."""
    from benchmarks.text_checks import check_sessions, compare_capitals_by_session
    from streampunct.api import Punctuator

    # each session apart: a session's first word opens a sentence, while the one before ends
    # with a flush (its last word takes no forced mark)
    stream_texts = [[text for _, _, text in t.texts] for t in transcripts]
    offline_model = Punctuator.load(cfg.server.model_dir, engine=cfg.server.engine)
    try:
        offline_texts = [[offline_model.punctuate(words[a:b], capitalize=True)] for a, b in spans]
    finally:
        offline_model.close()
    stream, offline = check_sessions(stream_texts), check_sessions(offline_texts)
    both = compare_capitals_by_session(stream_texts, offline_texts)
    print(f"text: capitals after a word with no mark per 1000 words: stream "
          f"{stream.capitals_per_1000:.2f}, offline {offline.capitals_per_1000:.2f}; spacing faults: stream "
          f"{stream.spacing_faults}, offline {offline.spacing_faults}"
          + (f"; written by one side only: stream {both['stream_only_per_1000_words']:.2f}, offline "
             f"{both['offline_only_per_1000_words']:.2f} per 1000 words" if both else ""), flush=True)
    return {"stream": stream.to_dict(), "offline": offline.to_dict(), "one_side_only": both}


def format_stability(stability) -> str:
    """``interim: last partial = final for 97.1% of 11900 shown words, 3.2 changes per 100 words``."""
    if stability.last_partial_accuracy is None:
        return "interim: no words shown in partials"
    return (f"interim: last partial = final for {stability.last_partial_accuracy:.1f}% of "
            f"{stability.words_shown} shown words, {stability.changes_per_100_words:.1f} changes per 100 words "
            f"({stability.changes_in_partials} in partials, {stability.changes_at_final} at the final)")


DISAGREEMENTS_LISTED = 50  # the JSON lists the first 50; ``disagreements_total`` counts all


def disagreements(words, served, simulated, limit: int | None = DISAGREEMENTS_LISTED) -> list[dict]:
    """The first ``limit`` (all with None) words whose label through the server differs
    from the simulation's: index, word, both label names."""
    from streampunct.labels import LABELS

    return [{"index": k, "word": words[k], "server": LABELS[a], "simulation": LABELS[b]}
            for k, (a, b) in enumerate(zip(served, simulated, strict=True)) if a != b][:limit]


def add_live_arguments(p: argparse.ArgumentParser) -> None:
    from streampunct.commands.argtypes import path_argument, positive_float, positive_int

    d = LiveBenchConfig()
    p.add_argument("--data", type=path_argument, default=d.data, help="word<TAB>LABEL file (default: %(default)s)")
    p.add_argument("--text", action="store_true",
                   help="--data is punctuated text (cased or not), converted as training converts it, "
                        "e.g. ../shared/data/cased_spoken/swda_val_cased.txt")
    p.add_argument("--sessions", type=positive_int, default=d.sessions,
                   help="parallel live streams (default: %(default)s)")
    p.add_argument("--wps", type=positive_float, default=d.words_per_second, help="words/s (default: %(default)s)")
    p.add_argument("--url", default=None, help="a running server instead of a child one (sessions send their own options)")
    p.add_argument("--partials", action="store_true",
                   help="sessions ask for partials and send each chunk as interim hypotheses first; reports the "
                        "interim stability (last partial = final, visible changes per 100 words) next to F1")
    p.add_argument("--no-hypotheses", dest="hypotheses", action="store_false",
                   help="with --partials: send no interim hypotheses (only the committed words' partials)")
    p.add_argument("--capitalize", action=argparse.BooleanOptionalAction, default=None,
                   help="the sessions' capitalize (default: the server's); with it on, case counts for stability")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--out-dir", type=path_argument, default=d.out_dir)
    p.add_argument("--name", type=result_stem, default=None,
                   help="result file stem (default: live_ and the data set's name, e.g. live_test2011)")
    add_server_arguments(p.add_argument_group("the child server (not with --url) and the simulation"), d.server,
                         LIVE_SERVER_FLAGS, helps={
                             "model_dir": "model folder of the server and the simulation (default: the shipped model)",
                             "engine": "engine backend of the server and the simulation (default: %(default)s)",
                             "batch_rows": "serve --batch-rows of the child server (default: the server's, exact); "
                                           "'exact' runs dynamic int8 windows alone and pads others, so the "
                                           "server gives the simulation's labels",
                             "stream_cache": "serve --stream-cache of the child server, and the simulation's "
                                             "(default: %(default)s)"})


def run_live_from_args(args: argparse.Namespace, command: str | None = None) -> int:
    def config_from_args(args: argparse.Namespace) -> LiveBenchConfig:
        return LiveBenchConfig(server=server_from_args(args, LIVE_SERVER), data=args.data, text=args.text,
                               sessions=args.sessions, words_per_second=args.wps, url=args.url,
                               partials=args.partials, hypotheses=args.hypotheses, capitalize=args.capitalize,
                               seed=args.seed, out_dir=args.out_dir, name=args.name)

    # a bad value is a one-line InputError; the simulation needs the model folder even with --url
    cfg = bench_config(config_from_args, args)
    try:
        result = run_live_bench(cfg, command=command)
    except RunFailed as e:
        return run_failed("live", str(e))
    if result["lost_words"] or result["mismatched_sessions"]:
        failed = f"{result['failed_sessions']} sessions failed, " if result["failed_sessions"] else ""
        return run_failed("live", f"{failed}{result['lost_words']} words lost, {result['mismatched_sessions']} "
                                  "sessions with other words than sent: not scored")
    return 0
