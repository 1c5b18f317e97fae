"""Give a model folder's streaming int8 graph static activation scales, calibrated on text.

    python -m training.static_scales MODEL_DIR --data FILE [--text] [--max-words N] [--percentile P]

The folder's streaming graph (``stream_artifact``, a dynamic int8 graph that
``build-engine`` wrote) is run on ``--data`` as a live stream is served (the
server's rules and cache, chunks of 1-4 words at 2.5 words/s:
``streampunct.evaluation.accuracy.live_schedule``), recording every tensor it
quantizes; then it is replaced by the same graph with constant activation
scales from those ranges (:mod:`engines.build.static_scales`). Before it
replaces the graph, the new graph runs the first 2,000 words as a live stream,
and its labels must equal the old graph's on at least 97% of them (the shipped
default: 99.2-99.35% on validation). Its rows then batch exactly, so the
server pads its calls under ``--batch-rows exact`` instead of running each
window alone (docs/server.md, "Batch rows").

The graph is calibrated with the folder's streaming window and cache length as
they are: the shipped default's after tuning (left 25, 60 cached tokens),
release builds' before it (the ranges barely move). A graph rebuilt by
``python -m training.add_stream_graph`` is dynamic again: calibrate it again.

Calibrate on training text, never on a set used to choose or to report: the
recipe uses TED dev2012 (a labelled training set). The dynamic graph is not kept:
``streampunct build-engine`` writes it again from the checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from pathlib import Path

from engines.base import EngineError, GraphPrepError
from engines.build.static_scales import (
    DEFAULT_PERCENTILE,
    ActivationRanges,
    observation_graph,
    replacing,
    static_scale_graph,
)
from engines.model_meta import has_model_meta, read_model_meta
from engines.sidecar import sha256_file, write_sidecar
from streampunct.errors import InputError

logger = logging.getLogger(__name__)

#: Calibration words by default: 20,000 words take about a minute (25 s of CPU) and lost 0.1
#: or less of live validation F1 against the dynamic graph (docs/engines.md).
DEFAULT_WORDS = 20_000
#: Words of the check run before the new graph replaces the old one, and the share of their
#: live labels that must equal the dynamic graph's (the shipped default: 99.2-99.35%).
CHECK_WORDS = 2_000
MIN_AGREEMENT = 0.97


class _Observed:
    """An ONNX Runtime session of an observation graph that answers as the original graph and
    hands the dynamically quantized tensors of each call to ``ranges``."""

    def __init__(self, session, ranges: ActivationRanges) -> None:
        self._session = session
        self._ranges = ranges

    def __getattr__(self, name: str):
        return getattr(self._session, name)

    def run(self, outputs, feed, *args, **kwargs):
        names = list(outputs)
        values = self._session.run(names + list(self._ranges.names), feed, *args, **kwargs)
        self._ranges.observe(values[len(names):])
        return values[:len(names)]


def calibrate(model_dir: Path, words: list[str], *, percentile: float = DEFAULT_PERCENTILE,
              data_name: str = "", data_sha256: str = "", seed: int = 0) -> Path:
    """Replace ``model_dir``'s streaming graph by its static-scale graph calibrated on ``words``
    (normalized words of a live stream); returns the graph's path."""
    from engines.ort_engine import OrtOptions, OrtStreamEngine
    from streampunct.core.options import SessionOptions
    from streampunct.evaluation.accuracy import live_schedule, schedule_labels
    from streampunct.model import load_model_info

    if not has_model_meta(model_dir):
        raise InputError(f"{model_dir} is not a model folder (no streampunct.json)")
    meta = read_model_meta(model_dir)
    if not meta.stream_artifact:
        raise InputError(f"{model_dir} has no streaming graph (no stream_artifact in streampunct.json)")
    graph = model_dir / meta.stream_artifact
    if not words:
        raise InputError("no calibration words")
    info = load_model_info(model_dir)

    def open_graph(path: Path) -> OrtStreamEngine:
        return OrtStreamEngine(path, OrtOptions(intra_op_threads=1), cache_tokens=meta.stream_cache_tokens)

    def live_labels(engine: OrtStreamEngine, stream: list[str]) -> list[int]:
        # every call, cached or not, runs on the streaming graph, as the server runs them
        return schedule_labels(live_schedule(stream, seed=seed), info.aligner(), info.stream_window,
                               engine.infer, SessionOptions(), stream_engine=engine)

    with replacing(graph) as out:
        observed_path = out.with_name("observed." + graph.name)
        names = observation_graph(graph, observed_path)
        ranges = ActivationRanges(tuple(names), seed=seed)
        with contextlib.closing(open_graph(observed_path)) as engine:
            engine._session = _Observed(engine._session, ranges)
            live_labels(engine, words)
        logger.info("calibrated on %d words (%d calls, %d tensors)", len(words), ranges.calls, len(names))
        sidecar = static_scale_graph(graph, out, ranges.ranges(percentile), {
            "data": data_name, "data_sha256": data_sha256, "words": len(words), "calls": ranges.calls,
            "percentile": percentile, "seed": seed,
            "schedule": "live_schedule: chunks of 1-4 words at 2.5 words/s, the server's default options"})
        # run the new graph before it replaces the old one: its live labels on the first words
        # must be (nearly) the dynamic graph's
        check = words[:CHECK_WORDS]
        labels = {}
        for name, path in (("dynamic", graph), ("static", out)):
            with contextlib.closing(open_graph(path)) as engine:
                labels[name] = live_labels(engine, check)
        agreement = sum(a == b for a, b in zip(labels["dynamic"], labels["static"], strict=True)) / len(check)
        if agreement < MIN_AGREEMENT:
            raise GraphPrepError(f"the static graph's live labels equal the dynamic graph's on {agreement:.1%} of "
                                 f"the first {len(check)} words (at least {MIN_AGREEMENT:.0%} required): "
                                 f"{graph} is left as it was")
        recipe = dict(sidecar.recipe or {})
        recipe["calibration"] = {**recipe["calibration"], "check_words": len(check),
                                 "check_label_agreement": round(agreement, 5)}
        write_sidecar(sidecar.replace(recipe=recipe), out)
        logger.info("checked: live labels equal the dynamic graph's on %.2f%% of %d words", 100 * agreement,
                    len(check))
    return graph


def main(argv: list[str] | None = None) -> int:
    from streampunct.text.word_labels import read_punctuated_text, read_word_labels

    p = argparse.ArgumentParser(prog="python -m training.static_scales", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    p.add_argument("--data", type=Path, required=True,
                   help="word<TAB>LABEL file (or punctuated text with --text) to calibrate on: training text")
    p.add_argument("--text", action="store_true", help="--data is punctuated text")
    p.add_argument("--max-words", type=int, default=DEFAULT_WORDS,
                   help="calibrate on the first N words (default %(default)s)")
    p.add_argument("--percentile", type=float, default=DEFAULT_PERCENTILE,
                   help="each tensor's range: this percentile of its values and its mirror "
                        "(100: min and max; default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="the live schedule's and the samples' seed")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.max_words < 1:
        p.error("--max-words must be >= 1")
    if not 50 < args.percentile <= 100:
        p.error("--percentile must be in (50, 100]")
    try:
        if not args.data.is_file():
            raise InputError(f"{args.data} is not a file")
        data = read_punctuated_text(args.data) if args.text else read_word_labels(args.data)
        print(calibrate(args.model_dir, list(data.words[:args.max_words]), percentile=args.percentile,
                        data_name=args.data.name, data_sha256=sha256_file(args.data),
                        seed=args.seed))
    except (InputError, EngineError) as e:  # the folder, graph or data refused: one line, exit status 2
        p.exit(2, f"{p.prog}: error: {e}\n")
    except OSError as e:  # a folder it cannot write, a full disk
        p.exit(2, f"{p.prog}: error: {args.model_dir}: {e}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
