"""Tokens/s of the torch serving backend (``engines.torch_backend``) on a model folder, and
the device it ran on.

Whole windows (the calls ``serve --engine torch`` makes: B windows of T tokens, no
padding) and cached calls (``infer_stream``: B rows of ``--stream-new`` new tokens
against ``--stream-past`` cached ones; tokens/s counts the new tokens). Latencies
are the engine's own calls, numpy in to numpy out (host-device copies included),
after warm-up; tokens/s uses the median. ``--annotate`` adds the same device record
to other result files, e.g. a ``bench load`` JSON measured with ``--engine torch``::

    python -m benchmarks.torch_engine_bench --model models/default --device cuda \\
        --out benchmarks/results/torch_gpu/engine_default.json
    python -m benchmarks.torch_engine_bench --device cuda --annotate load_torch_default.json

``scripts/gpu_torch_bench.sh`` runs both, with ``bench load``, on a lent GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import machine, prepare_out_file, run_module
from benchmarks.engine_bench import (
    BenchSettings,
    _stream_feed,
    _time_shape,
    _token_ids,
    _vocab_size,
)
from streampunct.model import model_folder_argument


def device_record(engine_or_device: Any) -> dict[str, Any]:
    """torch's version, its CUDA, and the device (GPU name, capability, memory) of an engine
    (its ``device``) or of a device name such as ``cuda``."""
    import torch

    device = getattr(engine_or_device, "device", None)
    if device is None:
        name = str(engine_or_device)
        device = torch.device("cuda" if name == "auto" and torch.cuda.is_available() else
                              "cpu" if name == "auto" else name)
    record: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(device)}
    if device.type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(device)
        record.update(name=props.name, capability=f"{props.major}.{props.minor}",
                      memory_gib=round(props.total_memory / 2**30, 1),
                      multiprocessors=props.multi_processor_count)
    else:
        record["name"] = machine()["cpu"]
    return record


def _stats(batch: int, tokens: int, lat: list[float]) -> dict[str, Any]:
    median = statistics.median(lat)
    return {"batch": batch, "tokens_per_s": round(tokens / median, 1),
            "latency_ms_median": round(1e3 * median, 3),
            "latency_ms_p90": round(1e3 * float(np.percentile(lat, 90)), 3), "runs": len(lat)}


def run_torch_engine_bench(model_dir: str | Path, *, device: str = "auto", precision: str = "auto",
                           batch_sizes: Sequence[int] = (1, 8, 32, 128), seq_len: int = 128,
                           stream_batch_sizes: Sequence[int] = (8, 32, 128), stream_new: int = 8,
                           stream_past: int = 60, settings: BenchSettings | None = None) -> dict[str, Any]:
    """Measure (see module doc); returns the report."""
    from engines.registry import load_engine

    model_dir = Path(model_dir)
    settings = settings or BenchSettings()
    engine = load_engine("torch", model_dir, device=device, precision=precision)
    vocab = _vocab_size(model_dir)
    rng = np.random.default_rng(settings.seed)
    whole, cached = [], []
    try:
        for batch in batch_sizes:
            ids = _token_ids(rng, vocab, (batch, seq_len))
            mask = np.ones_like(ids)
            lat = _time_shape({"torch": lambda i=ids, m=mask: engine.infer(i, m)}, settings)["torch"]
            whole.append({**_stats(batch, batch * seq_len, lat), "seq_len": seq_len})
        for batch in stream_batch_sizes:
            feed = _stream_feed(rng, vocab, batch, stream_new, stream_past, engine.stream_shape)
            lat = _time_shape({"stream": lambda f=feed: engine.infer_stream(f)}, settings)["stream"]
            cached.append({**_stats(batch, batch * stream_new, lat), "new_tokens": stream_new,
                           "cached_tokens": stream_past})
        spec = engine.io_spec()
        report = {
            "benchmark": "torch_engine",
            "model_dir": str(model_dir),
            "artifact": spec.artifact,
            "precision": spec.precision,
            "encoder": engine.encoder_config.get("model_type"),
            "layers": engine.stream_shape[0],
            "device": device_record(engine),
            "machine": machine(),
            "settings": {**settings.__dict__},
            "whole_windows": whole,
            "cached_calls": cached,
        }
    finally:
        engine.close()
    return report


def annotate(paths: Sequence[Path], record: dict[str, Any]) -> None:
    """Add ``record`` as ``"device"`` to each JSON result file (each rewritten whole or not at all)."""
    from streampunct.text.textfile import write_text_atomically

    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["device"] = record
        write_text_atomically(path, json.dumps(data, indent=2) + "\n")


def summary(report: dict[str, Any]) -> str:
    dev = report["device"]
    lines = [f"{report['model_dir']} ({report['artifact']}, {report['encoder']} x{report['layers']}) "
             f"in torch {report['precision']} on {dev['name']}"]
    lines += [f"  whole {r['batch']:>4}x{r['seq_len']}: {r['tokens_per_s']:>10.0f} tokens/s "
              f"(median {r['latency_ms_median']:.2f} ms)" for r in report["whole_windows"]]
    lines += [f"  cached {r['batch']:>3}x{r['new_tokens']}+{r['cached_tokens']}: {r['tokens_per_s']:>10.0f} "
              f"new tokens/s (median {r['latency_ms_median']:.2f} ms)" for r in report["cached_calls"]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from streampunct.commands.argtypes import non_negative_float, non_negative_int, positive_int
    from streampunct.text.textfile import write_text_atomically

    p = argparse.ArgumentParser(prog="python -m benchmarks.torch_engine_bench", description=__doc__.split("\n")[0])
    p.add_argument("--model", type=model_folder_argument, default=Path("models/default"), help="model folder (default: %(default)s)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    p.add_argument("--precision", default="auto", help="auto, fp32 or fp16 (default: %(default)s)")
    p.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 8, 32, 128], metavar="B")
    p.add_argument("--seq-len", type=positive_int, default=128, metavar="T")
    p.add_argument("--stream-batch-sizes", type=positive_int, nargs="+", default=[8, 32, 128], metavar="B")
    p.add_argument("--stream-new", type=positive_int, default=8, metavar="T", help="new tokens per cached call")
    p.add_argument("--stream-past", type=non_negative_int, default=60, metavar="C",
                   help="cached tokens per cached call")
    p.add_argument("--min-seconds", type=non_negative_float, default=1.0,
                   help="time each shape at least this long (0: only the minimum runs)")
    p.add_argument("--out", type=Path, default=None, help="write the report here (JSON)")
    p.add_argument("--annotate", type=Path, nargs="+", default=None, metavar="JSON",
                   help="only add the --device's record to these result files")
    args = p.parse_args(argv)
    if args.out is not None and not args.annotate:
        prepare_out_file(args.out, p)  # a wrong path fails now, not after the timings
    from engines.base import EngineError

    try:
        if args.annotate:
            annotate(args.annotate, device_record(args.device))
            print(f"added the device record to {', '.join(map(str, args.annotate))}")
            return 0
        report = run_torch_engine_bench(
            args.model, device=args.device, precision=args.precision, batch_sizes=args.batch_sizes,
            seq_len=args.seq_len, stream_batch_sizes=args.stream_batch_sizes, stream_new=args.stream_new,
            stream_past=args.stream_past, settings=BenchSettings(min_seconds=args.min_seconds))
    except (EngineError, OSError, ValueError) as e:
        print(f"torch_engine_bench: {e}", file=sys.stderr)
        return 2
    report["command"] = "python -m benchmarks.torch_engine_bench " + " ".join(sys.argv[1:] if argv is None else argv)
    print(summary(report))
    if args.out is not None:
        write_text_atomically(args.out, json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_module(main, "python -m benchmarks.torch_engine_bench"))
