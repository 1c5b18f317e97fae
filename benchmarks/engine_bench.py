"""``bench engine``: tokens/s of each backend and precision across batch sizes and lengths.

Each (backend, precision) maps to an artifact of the model folder
(``model.onnx``, ``model.int8.onnx``, ``model.fp16.plan``, ...); missing
artifacts and backends that cannot load here are reported as skipped, not
errors. Inputs are random in-vocabulary token ids without padding, so
tokens/s counts every position. All engines are loaded together and, per
shape, timed in interleaved rounds (one call each per round) after warm-up
calls, until ``min_runs`` rounds and ``min_seconds`` per engine have passed;
tokens/s uses the median latency. Interleaving keeps comparisons between
backends/precisions fair on a shared machine whose load varies.

A folder that holds only a streaming graph (``stream_artifact``, no artifact above;
``models/base``) is timed as the server runs it, as if ``--stream-past P`` were given
with P the cached tokens the server keeps for it (:func:`implied_stream_past`), and
says so in one line.

Library use: :func:`run_engine_bench`; command line ``streampunct bench engine``
(options: :func:`add_engine_arguments`) or::

    python -m benchmarks.engine_bench --model models/default --precisions fp32 int8
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    machine,
    prepare_out_dir,
    prepare_out_file,
    pyplot,
    run_module,
    write_result,
)
from engines.base import ArtifactError, EngineError
from engines.model_meta import read_model_meta
from engines.registry import available_backends, load_engine
from streampunct.model import model_folder_argument

#: (backend, precision) -> artifact file name in the model folder.
ARTIFACTS: dict[tuple[str, str], str] = {
    ("onnxruntime", "fp32"): "model.onnx",
    ("onnxruntime", "int8"): "model.int8.onnx",
    ("onnxruntime", "int4"): "model.int4.onnx",
    ("onnxruntime", "fp16"): "model.fp16.onnx",
    ("tensorrt", "fp32"): "model.fp32.plan",
    ("tensorrt", "fp16"): "model.fp16.plan",
    ("tensorrt", "int8"): "model.int8.plan",
}
BENCH_BACKENDS = ("onnxruntime", "tensorrt")


@dataclass(frozen=True)
class BenchSettings:
    """How long to measure each shape.

    Attributes:
        warmup: untimed calls first.
        min_runs, max_runs: timed calls per shape (bounds).
        min_seconds: keep timing until this much time has passed (within max_runs).
        seed: seed of the random token ids.
    """

    warmup: int = 2
    min_runs: int = 3
    max_runs: int = 50
    min_seconds: float = 1.0
    seed: int = 0


def _vocab_size(model_dir: Path) -> int:
    path = model_dir / "tokenizer.json"
    if path.is_file():
        from tokenizers import Tokenizer

        return int(Tokenizer.from_file(str(path)).get_vocab_size())
    return 100


def _token_ids(rng: np.random.Generator, vocab: int, shape: tuple[int, ...]) -> np.ndarray:
    """Random in-vocabulary token ids, the special and unused ids of real vocabularies skipped."""
    return rng.integers(1000 if vocab > 2000 else 4, vocab, size=shape, dtype=np.int64)


def _stream_feed(rng: np.random.Generator, vocab: int, batch: int, new: int, past: int,
                 cache_shape: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """A streaming graph's inputs: ``batch`` rows of ``new`` tokens against ``past`` cached ones
    (random keys and values of the graph's (layers, heads, head_dim)), no padding."""
    layers, heads, head_dim = cache_shape
    return {"input_ids": _token_ids(rng, vocab, (batch, new)),
            "position_ids": np.tile(np.arange(past, past + new, dtype=np.int64), (batch, 1)),
            "attention_mask": np.ones((batch, past + new), np.int64),
            "past_kv": (rng.standard_normal((layers, 2, batch, heads, past, head_dim)) * 0.5).astype(np.float16)}


def _host() -> dict[str, Any]:
    from engines.ort_engine import physical_cores

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "physical_cores": physical_cores(), "python": platform.python_version()}


def _time_shape(calls: Mapping[Any, Callable[[], Any]], settings: BenchSettings) -> dict[Any, list[float]]:
    """Latencies of every call (an engine on one batch), timed in interleaved rounds so that
    load from other processes hits all engines alike."""
    for call in calls.values():
        for _ in range(settings.warmup):
            call()
    latencies: dict[Any, list[float]] = {key: [] for key in calls}
    started = time.perf_counter()
    rounds = 0
    while rounds < settings.max_runs and (
        rounds < settings.min_runs
        or time.perf_counter() - started < settings.min_seconds * len(calls)
    ):
        for key, call in calls.items():
            t0 = time.perf_counter()
            call()
            latencies[key].append(time.perf_counter() - t0)
        rounds += 1
    return latencies


def format_table(results: Sequence[Mapping[str, Any]], batch_sizes: Sequence[int],
                 seq_lens: Sequence[int]) -> str:
    """Rows backend/precision, columns batch x seq, cells tokens/s."""
    shapes = [(b, t) for b in batch_sizes for t in seq_lens]
    cells: dict[tuple[str, tuple[int, int]], float] = {}
    rows: list[str] = []
    for r in results:
        row = f"{r['backend']}/{r['precision']}"
        if row not in rows:
            rows.append(row)
        cells[(row, (r["batch"], r["seq_len"]))] = r["tokens_per_s"]
    header = f"{'tokens/s':<20}" + "".join(f"{f'{b}x{t}':>10}" for b, t in shapes)
    lines = [header, "-" * len(header)]
    for row in rows:
        values = (cells.get((row, shape)) for shape in shapes)
        lines.append(f"{row:<20}" + "".join(f"{v:>10.0f}" if v else f"{'-':>10}" for v in values))
    return "\n".join(lines)


def run_engine_bench(
    model_dir: str | Path,
    backends: Sequence[str] | None = None,
    precisions: Sequence[str] = ("fp32", "int8"),
    batch_sizes: Sequence[int] = (1, 8, 32),
    seq_lens: Sequence[int] = (64, 128, 256),
    out_json: str | Path | None = None,
    *,
    engine_options: Mapping[str, Mapping[str, Any]] | None = None,
    settings: BenchSettings | None = None,
    print_table: bool = True,
    command: str | None = None,
) -> dict[str, Any]:
    """Measure tokens/s for every available (backend, precision) and shape.

    ``backends`` defaults to those installed among onnxruntime and tensorrt;
    ``engine_options`` maps a backend to its load options (e.g.
    ``{"onnxruntime": {"intra_op_threads": 2}}``). Returns (and writes to
    ``out_json`` when given) ``{"model_dir", "host", "machine", "settings", "results",
    "skipped"}``; each result has backend, precision, artifact, batch,
    seq_len, tokens_per_s, latency_ms_median, latency_ms_p90, runs.
    """
    model_dir = Path(model_dir)
    settings = settings or BenchSettings()
    backends = list(backends) if backends is not None else [
        b for b in BENCH_BACKENDS if b in available_backends()
    ]
    vocab = _vocab_size(model_dir)
    rng = np.random.default_rng(settings.seed)
    results: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    engines: dict[tuple[str, str], Any] = {}
    try:
        for backend in backends:
            for precision in precisions:
                artifact = ARTIFACTS.get((backend, precision))
                if artifact is None or not (model_dir / artifact).is_file():
                    skipped.append({"backend": backend, "precision": precision,
                                    "reason": f"no {artifact or 'artifact'} in {model_dir}"})
                    continue
                try:
                    engines[(backend, precision)] = load_engine(
                        backend, model_dir, artifact=artifact,
                        **dict((engine_options or {}).get(backend, {})),
                    )
                except EngineError as e:
                    skipped.append({"backend": backend, "precision": precision, "reason": str(e)})
        for batch in batch_sizes:
            for seq in seq_lens:
                fits = {}
                for key, engine in engines.items():
                    spec = engine.io_spec()
                    if (spec.max_batch and batch > spec.max_batch) or (spec.max_len and seq > spec.max_len):
                        skipped.append({"backend": key[0], "precision": key[1],
                                        "reason": f"{batch}x{seq} exceeds the engine's profile"})
                    else:
                        fits[key] = engine
                ids = _token_ids(rng, vocab, (batch, seq))
                mask = np.ones_like(ids)
                calls = {key: (lambda e=engine, i=ids, m=mask: e.infer(i, m)) for key, engine in fits.items()}
                for (backend, precision), lat in _time_shape(calls, settings).items():
                    median = statistics.median(lat)
                    results.append({
                        "backend": backend,
                        "precision": precision,
                        "artifact": ARTIFACTS[(backend, precision)],
                        "batch": batch,
                        "seq_len": seq,
                        "tokens_per_s": batch * seq / median,
                        "latency_ms_median": 1e3 * median,
                        "latency_ms_p90": 1e3 * float(np.percentile(lat, 90)),
                        "runs": len(lat),
                    })
    finally:
        for engine in engines.values():
            engine.close()
    report = {
        "benchmark": "engine",
        "command": command,
        "model_dir": str(model_dir),
        "host": _host(),
        "machine": machine(),
        "settings": asdict(settings),
        "engine_options": {k: dict(v) for k, v in (engine_options or {}).items()},
        "results": results,
        "skipped": skipped,
    }
    if print_table:
        print(format_table(results, batch_sizes, seq_lens))
        for s in skipped:
            print(f"skipped {s['backend']}/{s['precision']}: {s['reason']}")
    if out_json is not None:
        _write_json(report, out_json)
    return report


def run_stream_bench(
    model_dir: str | Path,
    batch_sizes: Sequence[int],
    new_lens: Sequence[int],
    past: int,
    *,
    engine_options: Mapping[str, Any] | None = None,
    settings: BenchSettings | None = None,
    print_table: bool = True,
    command: str | None = None,
) -> dict[str, Any]:
    """The folder's streaming graph (``stream_artifact``) on ONNX Runtime, as the server's windows
    call it with cached left context: each row encodes ``new`` tokens (``new_lens``) against
    ``past`` cached tokens. Each result has batch, new, past, ms per call, and the call's cost
    per row against one row alone (what padding rows into one call saves). Raises
    :class:`~engines.base.EngineError` when the folder has no streaming graph."""
    model_dir = Path(model_dir)
    settings = settings or BenchSettings()
    artifact = read_model_meta(model_dir).stream_artifact
    if not artifact:
        raise EngineError(f"{model_dir} has no streaming graph (no stream_artifact in its model metadata)")
    engine = load_engine("onnxruntime", model_dir, artifact=artifact, **dict(engine_options or {}))
    vocab = _vocab_size(model_dir)
    rng = np.random.default_rng(settings.seed)
    results: list[dict[str, Any]] = []
    try:
        for new in new_lens:
            alone = None
            for batch in batch_sizes:
                feed = _stream_feed(rng, vocab, batch, new, past, engine.stream_shape)
                (lat,) = _time_shape({"stream": lambda feed=feed: engine.infer_stream(feed)}, settings).values()
                ms = 1e3 * statistics.median(lat)
                alone = ms if batch == 1 else alone
                results.append({"artifact": artifact, "batch": batch, "new": new, "past": past,
                                "latency_ms_median": round(ms, 3),
                                "latency_ms_p90": round(1e3 * float(np.percentile(lat, 90)), 3),
                                "ms_per_row": round(ms / batch, 3),
                                "per_row_vs_alone": round(ms / batch / alone, 3) if alone else None,
                                "runs": len(lat)})
    finally:
        engine.close()
    report = {"benchmark": "engine_stream", "command": command, "model_dir": str(model_dir),
              "host": _host(), "machine": machine(), "settings": asdict(settings),
              "engine_options": dict(engine_options or {}), "results": results}
    if print_table:
        print(f"{artifact}: ms per call (per row against one row alone), {past} cached tokens")
        for r in results:
            ratio = f" ({r['per_row_vs_alone']:.2f}x)" if r["per_row_vs_alone"] is not None else ""
            print(f"  {r['batch']:3d} x {r['new']:3d} new tokens: {r['latency_ms_median']:8.2f} ms{ratio}")
    return report


def _write_json(report: Mapping[str, Any], out_json: str | Path) -> None:
    """The report as ``out_json``, with the time and commit every result file records
    (:func:`benchmarks.common.write_result`); says where."""
    out_json = prepare_out_file(out_json)
    path = write_result(out_json.stem, dict(report), out_json.parent, command=report.get("command"))
    print(f"wrote {path}")


_REPO = Path(__file__).resolve().parents[1]


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``streampunct bench engine`` (and ``python -m benchmarks.engine_bench``);
    a backend or precision that does not exist, or a number out of range, is a usage error."""
    from engines.base import PRECISIONS
    from engines.registry import BACKENDS
    from streampunct.commands.argtypes import non_negative_float, non_negative_int, positive_int

    parser.add_argument("--model", type=model_folder_argument, default=_REPO / "models" / "default",
                        help="model folder (default: the shipped models/default)")
    parser.add_argument("--backends", nargs="+", default=None, metavar="NAME", choices=list(BACKENDS),
                        help=f"any of {', '.join(BACKENDS)} (default: every installed one of onnxruntime, "
                             "tensorrt)")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), metavar="P", choices=list(PRECISIONS),
                        help=f"any of {', '.join(PRECISIONS)} (default: all)")
    parser.add_argument("--batch-sizes", nargs="+", type=positive_int, default=[1, 8, 32], metavar="B")
    parser.add_argument("--seq-lens", nargs="+", type=positive_int, default=[64, 128, 256], metavar="T")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="onnxruntime intra-op threads (default: physical cores)")
    parser.add_argument("--spinning", action="store_true",
                        help="let onnxruntime threads busy-wait (ORT's own default; off in streampunct)")
    parser.add_argument("--min-seconds", type=non_negative_float, default=1.0,
                        help="time each shape for at least this long (0: only the minimum runs; default 1.0)")
    parser.add_argument("--decode-data", type=Path, default=_REPO / "data" / "iwslt2011" / "test2011",
                        help="word<TAB>LABEL transcript for the offline decode throughput "
                             "(labels unused; default: data/iwslt2011/test2011); 'none' skips it")
    parser.add_argument("--decode-batch", type=positive_int, default=32,
                        help="batch size of the offline decode and its engine ceiling (default 32)")
    parser.add_argument("--stream-past", type=non_negative_int, default=None, metavar="P",
                        help="time the folder's streaming graph instead, as the server's windows call "
                             "it: --seq-lens new tokens a row against P cached tokens (batch 1 "
                             "first: the per-row cost of padded calls against a row alone)")
    parser.add_argument("--out-json", type=Path, default=_REPO / "benchmarks" / "results" / "engine.json",
                        help="result file (default: benchmarks/results/engine.json)")


def too_long(seq_lens: Sequence[int], past: int | None) -> str | None:
    """Why a ``--seq-lens`` value cannot run (None: all can): the encoders have
    :data:`~streampunct.core.windowing.MAX_POSITIONS` positions (512), and a longer row
    fails deep in the engine; with ``--stream-past``, the new tokens and the cached ones share them."""
    from streampunct.core.windowing import MAX_POSITIONS

    longest = max(seq_lens)
    if past is None and longest > MAX_POSITIONS:
        return (f"--seq-lens {longest} is longer than the model's {MAX_POSITIONS} positions "
                f"(at most {MAX_POSITIONS} tokens a row)")
    if past is not None and longest + past > MAX_POSITIONS:
        return (f"--seq-lens {longest} with --stream-past {past} is {longest + past} tokens, more than the "
                f"model's {MAX_POSITIONS} positions (new + cached at most {MAX_POSITIONS})")
    return None


def implied_stream_past(model_dir: str | Path, backends: Sequence[str] | None = None,
                        precisions: Sequence[str] | None = None) -> tuple[str, int] | None:
    """``(streaming graph, P)`` when ``model_dir`` holds only a streaming graph: its
    ``stream_artifact`` and none of the whole-window :data:`ARTIFACTS`, so that the sweep
    would measure nothing, while the server runs that graph with cached left context.
    P is the number of tokens the server's cache keeps for the folder (its
    ``stream_cache_tokens``, else the streaming window's left context, within the window's
    positions: :func:`streampunct.core.stream_cache.new_cache`). None when the folder has a
    whole-window artifact or no streaming graph, when ``backends`` leave out onnxruntime
    (which runs streaming graphs here), or when the graph's precision (its sidecar's) is
    not among ``precisions``."""
    from engines.model_meta import has_model_meta
    from engines.sidecar import read_sidecar
    from streampunct.core.stream_cache import new_cache
    from streampunct.errors import ModelError
    from streampunct.model import load_model_info

    model_dir = Path(model_dir)
    if backends is not None and "onnxruntime" not in backends:
        return None
    if not has_model_meta(model_dir) or any((model_dir / name).is_file() for name in ARTIFACTS.values()):
        return None
    try:
        info = load_model_info(model_dir)
    except ModelError:  # the sweep reports what is wrong with the folder
        return None
    artifact = info.meta.stream_artifact
    if not artifact or not (model_dir / artifact).is_file():
        return None
    if precisions is not None:
        try:
            precision = read_sidecar(model_dir / artifact).precision
        except ArtifactError:
            precision = None  # unknown: not filtered
        if precision is not None and precision not in precisions:
            return None
    # the capacity of a session's cache, as the server makes it (the layout does not change it)
    past = new_cache((1, 1, 1), info.stream_window, info.meta.stream_cache_tokens).capacity
    return artifact, past


def run_engine_from_args(args: argparse.Namespace, *, command: str | None = None) -> int:
    """Run the benchmark from parsed :func:`add_engine_arguments` options."""
    from streampunct.errors import InputError

    if (why := too_long(args.seq_lens, args.stream_past)) is not None:  # before any engine loads
        raise InputError(why)
    if not Path(args.model).is_dir():
        raise InputError(f"no model folder at {args.model}: pass --model DIR")
    stream_past = args.stream_past
    if stream_past is None and (implied := implied_stream_past(args.model, args.backends,
                                                               args.precisions)) is not None:
        artifact, stream_past = implied
        print(f"{args.model} holds only its streaming graph {artifact}: timing it as the server runs it, "
              f"against the {stream_past} tokens its cache keeps (as with --stream-past {stream_past})",
              flush=True)
        if (why := too_long(args.seq_lens, stream_past)) is not None:
            raise InputError(why)
    decode = str(args.decode_data) != "none"
    if decode and stream_past is None and not Path(args.decode_data).is_file():  # not after the sweep
        raise InputError(f"--decode-data {args.decode_data}: no such file (none: skip the offline decode)")
    if args.out_json is not None:  # a wrong path fails now, not after the timings
        out = Path(args.out_json)
        prepare_out_dir(out.parent, out.name, out.with_suffix(".png").name)
    ort_options: dict[str, Any] = {}
    if args.threads is not None:
        ort_options["intra_op_threads"] = args.threads
    if args.spinning:
        ort_options["allow_spinning"] = True
    options = {"onnxruntime": ort_options} if ort_options else None
    if stream_past is not None:
        if stream_past < 0:
            raise SystemExit("--stream-past must be >= 0")
        report = run_stream_bench(args.model, sorted(set(args.batch_sizes) | {1}), args.seq_lens, stream_past,
                                  engine_options=ort_options, settings=BenchSettings(min_seconds=args.min_seconds),
                                  command=command)
        report["stream_past_implied"] = args.stream_past is None  # chosen by implied_stream_past
        if args.out_json is not None:
            _write_json(report, args.out_json)
        return 0
    report = run_engine_bench(
        args.model, args.backends, args.precisions, args.batch_sizes, args.seq_lens, None,
        engine_options=options, settings=BenchSettings(min_seconds=args.min_seconds), command=command,
    )
    if not report["results"]:  # every backend and precision skipped (above): nothing measured, nothing written
        print("error: nothing was measured (every backend and precision was skipped)", file=sys.stderr)
        return 1
    if decode:
        report["offline_decode"] = _offline_decode(args.model, args.decode_data, args.decode_batch,
                                                   ort_options)
    if args.out_json is not None:
        _write_json(report, args.out_json)
        plot_engine(report, Path(args.out_json).with_suffix(".png"))
    return 0


def plot_engine(report: Mapping[str, Any], png: Path) -> Path | None:
    """Bar chart of tokens/s per shape, one bar per backend/precision (needs matplotlib)."""
    plt = pyplot()
    if plt is None:
        return None
    results = report["results"]
    shapes = sorted({(r["batch"], r["seq_len"]) for r in results})
    kinds = sorted({(r["backend"], r["precision"]) for r in results})
    speed = {(r["backend"], r["precision"], r["batch"], r["seq_len"]): r["tokens_per_s"] for r in results}
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / len(kinds)
    for k, (backend, precision) in enumerate(kinds):
        xs = [i + k * width for i in range(len(shapes))]
        ys = [speed.get((backend, precision, b, t), 0.0) for b, t in shapes]
        ax.bar(xs, ys, width, label=f"{backend} {precision}")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))])
    ax.set_xticklabels([f"{b}x{t}" for b, t in shapes])
    ax.set_xlabel("batch x sequence length (tokens)")
    ax.set_ylabel("tokens/s")
    host = report.get("host", {})
    ax.set_title(f"engine speed ({host.get('physical_cores', '?')} cores, {Path(report['model_dir']).name})")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)
    print(f"wrote {png}")
    return png


def _offline_decode(model_dir: Path, data: Path, batch: int, ort_options: Mapping[str, Any]) -> dict:
    """Offline decode words/s vs the engine ceiling (default artifact, same batch), printed."""
    from benchmarks.decode_throughput import measure_decode_throughput
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.text.word_labels import read_word_labels

    words = read_word_labels(data).words
    punct = OfflineDecoder.from_model_dir(model_dir, **dict(ort_options))
    try:
        r = measure_decode_throughput(punct.engine, punct.aligner, punct.window, words,
                                      batch_size=batch)
    finally:
        punct.close()
    r["data"] = str(data)
    print(f"offline decode ({r['words']} words, W={r['window']['size']} L={r['window']['left']} "
          f"R={r['window']['right']}, batch {batch}): {r['decode_words_per_s']:.0f} words/s; "
          f"engine ceiling {r['engine_ceiling_tokens_per_s']:.0f} "
          f"tokens/s / overlap {r['overlap_factor']:.2f} -> ideal {r['ideal_decode_words_per_s']:.0f} "
          f"words/s; ratio {r['ratio_to_ideal']:.2f} (target >= 0.8)")
    return r


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_engine_arguments(parser)
    args = parser.parse_args(argv)
    if (why := too_long(args.seq_lens, args.stream_past)) is not None:
        parser.error(why)
    if args.out_json is not None:
        prepare_out_file(args.out_json, parser)
    return run_engine_from_args(args, command="python -m benchmarks.engine_bench " + " ".join(argv or sys.argv[1:]))


if __name__ == "__main__":
    raise SystemExit(run_module(main, "python -m benchmarks.engine_bench"))
