"""``streampunct evaluate``: accuracy of a model on a word<TAB>LABEL file."""

from __future__ import annotations

import argparse
import json
import sys
import time

NAME = "evaluate"
HELP = "score a model on a labeled word<TAB>LABEL file (offline and/or simulated streaming)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from engines.registry import BACKENDS, StreamCacheMode
    from streampunct.commands.argtypes import (
        add_engine_option,
        choices,
        int_between,
        non_negative_int,
        path_argument,
        positive_int,
    )
    from streampunct.core.options import SessionOptions
    from streampunct.core.wire import DEFAULT_LIMITS
    from streampunct.model import model_folder_argument

    p.add_argument("--model", type=model_folder_argument, default=None, help="model folder (default: the shipped model)")
    p.add_argument("--data", type=path_argument, required=True,
                   help="word<TAB>LABEL file (- for stdin), e.g. data/iwslt2011/test2011")
    p.add_argument("--engine", default="onnxruntime", choices=list(BACKENDS),
                   help="engine backend (default: onnxruntime)")
    add_engine_option(p)
    p.add_argument(
        "--right-context", type=non_negative_int, nargs="+", default=[], metavar="N",
        help="also simulate streaming at these right contexts (words)",
    )
    p.add_argument(
        "--batch-size", type=positive_int, default=1, metavar="N",
        help="windows per engine call in the streaming simulation (default 1: identical to one call "
             "per window for every engine; larger batches change labels of dynamic int8 graphs, "
             "whose activation scales span the batch)",
    )
    p.add_argument(
        "--workers", type=positive_int, default=None, metavar="N",
        help="engines that run the streaming windows side by side (default: one per physical core "
             "for onnxruntime, each single-threaded, 1 for other engines); the labels do not depend "
             "on it",
    )
    p.add_argument(
        "--live", action="store_true",
        help="also score a live stream as the server gets it: ASR-like chunks of 1-4 words at "
             "2.5 words/s with up to 150 ms jitter, the server's default session options unless "
             "--live-right-context / --live-max-delay-ms say otherwise (the server's own rules, "
             "one window per decision: the labels a server gives this schedule)",
    )
    # within what a server takes by default (a session asking for more gets bad_request there)
    p.add_argument("--live-right-context", type=int_between(0, DEFAULT_LIMITS.max_right_context),
                   default=None, metavar="N",
                   help=f"right_context of the live stream (--live; default: the server's, "
                        f"{SessionOptions.right_context})")
    p.add_argument("--live-max-delay-ms", type=int_between(0, DEFAULT_LIMITS.max_delay_ms),
                   default=None, metavar="MS",
                   help=f"max_delay_ms of the live stream (--live; default: the server's, "
                        f"{SessionOptions.max_delay_ms})")
    p.add_argument("--window", type=int, nargs=3, default=None, metavar=("W", "L", "R"),
                   help="override the model's window geometry (offline and streaming): W content tokens "
                        "(at most 510), L + R + two words of context within them")
    p.add_argument("--text", action="store_true",
                   help="--data is punctuated text (e.g. the cased TED dev2010 file), converted to words "
                        "and labels as training converts it (streampunct.text.convert)")
    p.add_argument("--stream-cache", choices=choices(StreamCacheMode), default=StreamCacheMode.AUTO.value,
                   help="streaming simulations with cached left context, as the server runs them "
                        "(auto: when the model folder has a streaming graph and does not say "
                        "\"stream_cache\": false; docs/server.md)")
    p.add_argument("--json", type=path_argument, default=None,
                   help="write all figures here as JSON (whole or not at all; missing folders are made and "
                        "the path is checked before the model runs)")


def run(args: argparse.Namespace) -> int:
    from streampunct.commands.serve import check_worker_count
    from streampunct.core.windowing import MAX_POSITIONS, WindowConfig
    from streampunct.errors import InputError
    from streampunct.model import load_model_info
    from streampunct.text.textfile import output_file
    from streampunct.text.word_labels import read_punctuated_text, read_word_labels

    if not args.live and (args.live_right_context is not None or args.live_max_delay_ms is not None):
        given = "--live-right-context" if args.live_right_context is not None else "--live-max-delay-ms"
        raise InputError(f"{given} sets the live stream's options: add --live")
    if args.workers is not None:
        check_worker_count("--workers", args.workers, "each engine holds its own weights")
    window = None
    if args.window:  # checked before any work: against the model's word length and positions
        try:
            window = WindowConfig(*args.window)
            window.validate_for(load_model_info(args.model).max_word_tokens, MAX_POSITIONS)
        except ValueError as e:
            raise InputError(f"--window {' '.join(map(str, args.window))}: {e}") from None
    data = read_punctuated_text(args.data) if args.text else read_word_labels(args.data)
    if not data.words:
        raise InputError(f"{args.data}: no words to score")
    json_out = None
    if args.json is not None:  # where the figures go, before any work: a wrong path costs no model run
        if not args.json.name:
            raise InputError(f"--json {str(args.json)!r}: give a file name")
        if str(args.json) == "-":  # not a file named "-"
            raise InputError("--json -: the tables already go to stdout; --json names a file")
        json_out = output_file(args.json)
    try:
        results = _evaluate(args, data, window)
        if json_out is not None:
            json_out.file.write(json.dumps(results, indent=2) + "\n")
    except BaseException:
        if json_out is not None:
            json_out.discard()  # what was there stays as it was
        raise
    if json_out is not None:
        json_out.commit()
        print(f"\nwrote {args.json}", file=sys.stderr)
    return 0


def _evaluate(args: argparse.Namespace, data, window) -> dict:
    from engines.registry import engine_threads, load_engine, physical_cores
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.core.options import SessionOptions
    from streampunct.evaluation.accuracy import (
        live_schedule,
        offline_labels,
        schedule_labels,
        score,
        streaming_runs,
    )

    # Several engines of a backend with per-engine threads (ONNX Runtime): one thread each, so
    # N of them use N cores. One thread or two gives the same logits (each window runs alone).
    workers = args.workers or (physical_cores() if engine_threads(args.engine, 1) else 1)
    parallel = workers > 1 and bool(args.right_context)
    options = (engine_threads(args.engine, 1) if parallel else {}) | dict(args.engine_option)  # the user's win
    punct = OfflineDecoder.from_model_dir(args.model, engine=args.engine, window=window, **options)
    extra: list = []
    try:
        for _ in range(workers - 1 if args.right_context else 0):
            extra.append(load_engine(args.engine, punct.info.path, **options))
    except BaseException:
        for e in [punct, *extra]:
            e.close()
        raise
    results: dict = {
        "model": str(punct.info.path if punct.info else args.model),
        "data": str(args.data),
        "n_words": len(data),
        "folded_lines": data.folded,
        "window": punct.window.to_dict(),
        "stream_window": punct.stream_window.to_dict(),
        "engine": args.engine,
        "workers": 1 + len(extra),
    }
    try:
        # one thread for the streaming graph (where an engine has its own), as each worker above
        stream_engine = punct.stream_engine(args.stream_cache, **engine_threads(args.engine, 1)) \
            if (args.right_context or args.live) else None
        results["stream_cache"] = stream_engine is not None
        t0 = time.perf_counter()
        pred = offline_labels(data.words, punct.aligner, punct.window, punct.engine.infer, progress=True)
        secs = time.perf_counter() - t0
        report = score(data.labels, pred)
        print(f"offline  ({len(data)} words, {len(data) / secs:.0f} words/s)")
        print(report.table())
        results["offline"] = report.to_dict() | {"words_per_second": round(len(data) / secs, 1)}
        results["streaming"] = {}
        t0 = time.perf_counter()
        runs = streaming_runs(
            data.words, punct.aligner, punct.stream_window,
            [punct.engine.infer] + [e.infer for e in extra], args.right_context,
            batch_size=args.batch_size, progress=True, stream_engine=stream_engine,
        )
        if args.right_context:
            secs = time.perf_counter() - t0
            print(f"\nstreaming simulation: {len(args.right_context)} right contexts in {secs:.0f} s "
                  f"({1 + len(extra)} engine workers)")
            results["streaming_seconds"] = round(secs, 1)
        for rc in args.right_context:
            run_ = runs[rc]
            rep = score(data.labels, run_.labels)
            print(f"\nstreaming right_context={rc}: overall F1 {rep.overall_f1:.1f} "
                  f"({run_.model_calls} model calls)")
            print(rep.table())
            results["streaming"][str(rc)] = rep.to_dict() | {"model_calls": run_.model_calls}
        if args.live:
            defaults = SessionOptions()
            options = SessionOptions(
                right_context=defaults.right_context if args.live_right_context is None else args.live_right_context,
                max_delay_ms=defaults.max_delay_ms if args.live_max_delay_ms is None else args.live_max_delay_ms)
            t0 = time.perf_counter()
            labels = schedule_labels(live_schedule(data.words), punct.aligner, punct.stream_window,
                                     punct.engine.infer, options, stream_engine=stream_engine)
            rep = score(data.labels, labels)
            print(f"\nlive (chunks of 1-4 words at 2.5 words/s, right_context {options.right_context}, "
                  f"max_delay_ms {options.max_delay_ms}): overall F1 {rep.overall_f1:.1f} "
                  f"({time.perf_counter() - t0:.0f} s)")
            print(rep.table())
            results["live"] = rep.to_dict() | {"right_context": options.right_context,
                                               "max_delay_ms": options.max_delay_ms,
                                               "words_per_second": 2.5, "max_chunk": 4, "jitter_ms": 150}
    finally:
        punct.close()
        for e in extra:
            e.close()
    return results
