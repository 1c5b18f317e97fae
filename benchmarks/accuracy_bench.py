"""``bench accuracy``: F1 against latency, offline and streaming.

For a labeled file, scores the offline double-overlap decoder and simulated
streams (the real StreamState, words arriving at a fixed speech rate) over a
sweep of ``right_context`` values (no delay bound) and of ``max_delay_ms``
values (no right-context trigger). Each point carries the mean and p95 latency
in words and in seconds; a PNG plots overall F1 against mean latency.

The streams run as the server serves them: ``stream_cache`` is the server's
``--stream-cache`` (``auto``, the default: cached left context where the model
folder has a streaming graph and does not switch it off; ``off``: whole
windows, each encoding its left context). They are simulated by
:func:`streampunct.evaluation.accuracy.streaming_runs`, as ``streampunct
evaluate --right-context`` simulates them, so a right context scores the same
here and there.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS_DIR, percentile, prepare_out_dir, pyplot, write_result


@dataclass(frozen=True)
class AccuracyBenchConfig:
    """Options of the accuracy benchmark.

    Attributes:
        model_dir: model folder (None: the shipped model).
        data: labeled ``word<TAB>LABEL`` file.
        right_contexts: right-context sweep (words).
        delays_ms: max-delay sweep (milliseconds).
        words_per_second: simulated speech rate.
        engine: engine backend.
        stream_cache: the streams' cached left context, as ``serve --stream-cache``
            (``auto``, ``on`` or ``off``: whole windows).
        out_dir: where JSON and PNG go.
        name: result file stem.
    """

    model_dir: Path | None = None
    data: Path = Path("data/iwslt2011/test2011")
    right_contexts: Sequence[int] = (0, 1, 2, 4, 8)
    delays_ms: Sequence[int] = (400, 800, 1600, 3200)
    words_per_second: float = 2.5
    engine: str = "onnxruntime"
    stream_cache: str = "auto"
    out_dir: Path = RESULTS_DIR
    name: str = "accuracy"


def _point(kind: str, setting: int | None, report, lat_words, lat_s, secs: float) -> dict:
    return {
        "mode": kind,
        "setting": setting,
        "overall_f1": round(report.overall_f1, 2),
        "macro_f1": round(report.macro_f1, 2),
        "per_class_f1": {k: round(v[2], 2) for k, v in report.per_class.items()},
        "latency_words_mean": round(float(np.mean(lat_words)), 3) if len(lat_words) else 0.0,
        "latency_words_p95": round(percentile(lat_words, 95), 3) if len(lat_words) else 0.0,
        "latency_s_mean": round(float(np.mean(lat_s)), 3) if len(lat_s) else 0.0,
        "latency_s_p95": round(percentile(lat_s, 95), 3) if len(lat_s) else 0.0,
        "wall_s": round(secs, 1),
    }


def run_accuracy_bench(cfg: AccuracyBenchConfig, *, command: str | None = None) -> dict:
    from engines.registry import engine_threads
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.errors import InputError
    from streampunct.evaluation.accuracy import offline_labels, streaming_runs
    from streampunct.evaluation.scores import evaluate
    from streampunct.text.word_labels import read_word_labels

    prepare_out_dir(cfg.out_dir, f"{cfg.name}.json", f"{cfg.name}.png")  # a wrong path fails now, not after the sweeps
    data = read_word_labels(cfg.data)
    if not data.words:  # refused before any work: all-zero scores would replace a real result
        raise InputError(f"{cfg.data}: no words to score")
    punct = OfflineDecoder.from_model_dir(cfg.model_dir, engine=cfg.engine)
    points = []
    try:
        # the server's streaming engine, one thread, as ``evaluate`` loads it (None: whole windows)
        stream_engine = punct.stream_engine(cfg.stream_cache, **engine_threads(cfg.engine, 1))
        print(f"streams: {'cached left context' if stream_engine is not None else 'whole windows'} "
              f"(--stream-cache {cfg.stream_cache})", flush=True)
        t0 = time.perf_counter()
        pred = offline_labels(data.words, punct.aligner, punct.window, punct.engine.infer)
        rep = evaluate(data.labels, pred)
        # Offline: the whole text is known; a word's latency is the rest of the file.
        n = len(data)
        lat_w = [n - 1 - i for i in range(n)]
        points.append(_point("offline", None, rep, lat_w, [w / cfg.words_per_second for w in lat_w],
                             time.perf_counter() - t0))
        print(f"offline: F1 {rep.overall_f1:.1f}", flush=True)
        sweeps = [("right_context", rc, rc, {}) for rc in cfg.right_contexts]
        sweeps += [("max_delay_ms", d, 10**9, {"max_delay_ms": d}) for d in cfg.delays_ms]
        for kind, setting, rc, kwargs in sweeps:
            t0 = time.perf_counter()
            # evaluate's simulation: one window per engine call, alone (batch 1: the labels of
            # one call per request, for every engine)
            run = streaming_runs(
                data.words, punct.aligner, punct.stream_window, punct.engine.infer, [rc],
                words_per_second=cfg.words_per_second, stream_engine=stream_engine, **kwargs,
            )[rc]
            rep = evaluate(data.labels, run.labels)
            p = _point(kind, setting, rep, run.latency_words, run.latency_s, time.perf_counter() - t0)
            points.append(p)
            print(f"{kind}={setting}: F1 {p['overall_f1']:.1f}, latency mean "
                  f"{p['latency_words_mean']:.2f} words / {p['latency_s_mean']:.2f} s", flush=True)
    finally:
        punct.close()
    payload = {
        "model": str(punct.info.path if punct.info else cfg.model_dir),
        "data": str(cfg.data),
        "n_words": len(data),
        "words_per_second": cfg.words_per_second,
        "window": punct.window.to_dict(),
        "stream_window": punct.stream_window.to_dict(),
        "stream_cache": stream_engine is not None,
        "points": points,
    }
    path = write_result(cfg.name, payload, cfg.out_dir, command=command)
    png = plot_accuracy(payload, Path(cfg.out_dir) / f"{cfg.name}.png")
    print(format_table(points))
    print(f"wrote {path}" + (f" and {png}" if png else ""))
    return payload


def format_table(points: list[dict]) -> str:
    lines = [f"{'mode':<14}{'setting':>9}{'F1':>7}{'COMMA':>7}{'PERIOD':>7}{'QUEST':>7}"
             f"{'lat w':>8}{'p95 w':>7}{'lat s':>7}{'p95 s':>7}"]
    for p in points:
        if p["mode"] == "offline":
            lat = f"{'-':>8}{'-':>7}{'-':>7}{'-':>7}"
        else:
            lat = (f"{p['latency_words_mean']:8.2f}{p['latency_words_p95']:7.1f}"
                   f"{p['latency_s_mean']:7.2f}{p['latency_s_p95']:7.2f}")
        c = p["per_class_f1"]
        lines.append(f"{p['mode']:<14}{'-' if p['setting'] is None else str(p['setting']):>9}{p['overall_f1']:7.1f}"
                     f"{c['COMMA']:7.1f}{c['PERIOD']:7.1f}{c['QUESTION']:7.1f}{lat}")
    return "\n".join(lines)


def plot_accuracy(payload: dict, path: Path) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for mode, marker in (("right_context", "o-"), ("max_delay_ms", "s--")):
        pts = [p for p in payload["points"] if p["mode"] == mode]
        if pts:
            ax.plot([p["latency_s_mean"] for p in pts], [p["overall_f1"] for p in pts], marker,
                    label=f"streaming, {mode.replace('_', ' ')} sweep")
            for p in pts:
                ax.annotate(str(p["setting"]), (p["latency_s_mean"], p["overall_f1"]),
                            textcoords="offset points", xytext=(4, -10), fontsize=8)
    off = [p for p in payload["points"] if p["mode"] == "offline"]
    if off:
        ax.axhline(off[0]["overall_f1"], color="gray", linestyle=":", label="offline decoder")
    ax.set_xlabel(f"mean latency until decidable (s, at {payload['words_per_second']} words/s)")
    ax.set_ylabel("overall F1 (micro, %)")
    ax.set_title(f"F1 vs latency on {Path(payload['data']).name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
