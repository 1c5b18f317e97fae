"""What holding back unsure marks in partials buys and costs, in-process (``serve --partial-mark-threshold``).

``python -m benchmarks.partial_threshold`` streams a labelled file through the
Python API (:meth:`streampunct.api.Punctuator.stream` with partials on: the
server's :class:`~streampunct.core.session_protocol.SessionProtocol`, engine and
cached left context, without a server) on ``bench live``'s schedules: the file
cut into ``--sessions`` consecutive streams, chunks of 1-4 words at 2.5
words/s with jitter (:func:`streampunct.evaluation.accuracy.live_schedule`, the same
seeds), each chunk sent first as interim hypotheses
(:func:`benchmarks.live_bench.with_hypotheses`), then a flush and an end. Time
is the schedule's (``now``): a word's delay deadline is served at that
deadline, as the server's timer does, and every message gets its partial at
once (a server under load skips some).

For each threshold P it counts, on the messages each stream gave, in order
(:mod:`benchmarks.partial_stability`):

- the share of shown words whose last partial equals their final (mark, and
  case with ``--capitalize``);
- visible changes per 100 words (in partials, and at the final);
- the share of final marks (of shown words) that the last partial already
  showed (:func:`~benchmarks.partial_stability.early_marks`: what holding
  back costs).

Finals do not depend on P: their labels are checked equal to P = 0's, and
scored against the gold labels once. Tune P on validation (the default data
is dev2010); a test set (a file named ``*test*``) is refused unless
``--final-report`` says the threshold was chosen already. The JSON goes to
``--out`` (nothing under ``benchmarks/results``). The grid and the choice are
in docs/formatting.md, "Interim stability".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.common import prepare_out_file, run_module
from benchmarks.live_bench import segments, with_hypotheses
from benchmarks.partial_stability import EarlyMarks, Stability, early_marks, partial_stability
from streampunct.model import model_folder_argument

DEV2010 = Path("../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt")
THRESHOLDS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9)


def replay(stream, events) -> list:
    """Play ``events`` (words, hypotheses, a flush; then the end) into an API ``stream`` with
    partials on, at their times, serving delay deadlines at their time in between; return the
    finals and partials it gave, in order (one call's finals come before its partial)."""
    seen: list = []
    last_partial = stream.partial

    def take(finals) -> None:
        nonlocal last_partial
        seen.extend(finals)
        if stream.partial is not last_partial:
            last_partial = stream.partial
            seen.append(last_partial)

    now = 0.0
    for event in events:
        while (deadline := stream.next_deadline) is not None and deadline < event.time:
            take(stream.poll(now=deadline))
        now = event.time
        if event.kind == "words":
            take(stream.push(list(event.words), now=now))
        elif event.kind == "hypothesis":
            take(stream.hypothesis(list(event.words), now=now))
        elif event.kind == "flush":
            take(stream.flush(now=now))
    take(stream.end(now=now))
    return seen


def run(punctuator, schedules, threshold: float, *, capitalize: bool) -> tuple[Stability, EarlyMarks, list]:
    """One threshold over every schedule: the stability and early-mark counts, and the finals' marks."""
    from streampunct.core.wire import Final

    stability, marks, final_marks = Stability(), EarlyMarks(), []
    for events in schedules:
        stream = punctuator.stream(partials=True, capitalize=capitalize, partial_mark_threshold=threshold)
        seen = replay(stream, events)
        stability = stability + partial_stability(seen)
        marks = marks + early_marks(seen)
        final_marks += [w.p for m in seen if isinstance(m, Final) for w in m.words]
    return stability, marks, final_marks


def main(argv: list[str] | None = None) -> int:
    from streampunct.commands.argtypes import positive_float, positive_int, unit_interval

    p = argparse.ArgumentParser(prog="python -m benchmarks.partial_threshold", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=model_folder_argument, default=None, help="model folder (default: the shipped model)")
    p.add_argument("--data", type=Path, default=DEV2010,
                   help="punctuated text (--text) or a word<TAB>LABEL file (default: dev2010, %(default)s)")
    p.add_argument("--text", action=argparse.BooleanOptionalAction, default=None,
                   help="--data is punctuated text (default: when it ends in .txt)")
    p.add_argument("--thresholds", type=unit_interval, nargs="+", default=list(THRESHOLDS), metavar="P",
                   help="partial mark thresholds, each 0 <= P < 1 as serve --partial-mark-threshold "
                        "(default: %(default)s)")
    p.add_argument("--max-words", type=positive_int, default=None, help="only the first N words (a quick look)")
    p.add_argument("--sessions", type=positive_int, default=60, help="consecutive streams (default: %(default)s)")
    p.add_argument("--wps", type=positive_float, default=2.5, help="words/s (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="schedule seed, as bench live's (default: %(default)s)")
    p.add_argument("--no-hypotheses", dest="hypotheses", action="store_false",
                   help="send no interim hypotheses (only the committed words' partials)")
    p.add_argument("--capitalize", action="store_true", help="case counts for stability too")
    p.add_argument("--final-report", action="store_true",
                   help="allow a test set (report a threshold already chosen on validation)")
    p.add_argument("--out", type=Path, default=None, help="write the JSON here (default: print only)")
    args = p.parse_args(argv)

    from engines.base import EngineError
    from streampunct.api import Punctuator
    from streampunct.errors import StreampunctError
    from streampunct.evaluation.accuracy import live_schedule, score
    from streampunct.labels import MARK_TO_LABEL, O
    from streampunct.text.word_labels import read_punctuated_text, read_word_labels

    if "test" in args.data.name.lower() and not args.final_report:  # the file's name, not its folders
        p.error(f"{args.data} looks like a test set: tune on validation; --final-report to report a chosen P")
    if args.out is not None:
        prepare_out_file(args.out, p)  # a wrong path fails now, not after the grid
    text = args.data.suffix == ".txt" if args.text is None else args.text
    try:
        data = read_punctuated_text(args.data) if text else read_word_labels(args.data)
    except StreampunctError as e:
        p.error(f"--data: {e}")
    if not data.words:  # nothing to measure: no result, no file
        p.error(f"--data: {args.data}: no words to score")
    words, gold = data.words[:args.max_words], data.labels[:args.max_words]
    spans = segments(len(words), args.sessions)
    schedules = [live_schedule(words[a:b], words_per_second=args.wps, seed=args.seed + k)
                 for k, (a, b) in enumerate(spans)]
    if args.hypotheses:
        schedules = [with_hypotheses(events) for events in schedules]
    print(f"{args.data}: {len(words)} words in {len(spans)} streams; hypotheses {args.hypotheses}, "
          f"capitalize {args.capitalize}", flush=True)
    grid, reference = [], None
    try:
        punctuator = Punctuator.load(args.model, intra_op_threads=1)
    except (StreampunctError, EngineError) as e:
        p.error(f"--model: {e}")
    with punctuator:
        for threshold in args.thresholds:
            t0 = time.perf_counter()
            stability, marks, final_marks = run(punctuator, schedules, threshold, capitalize=args.capitalize)
            if reference is None:
                reference = final_marks
                labels = [MARK_TO_LABEL.get(m, O) for m in final_marks]
                if len(labels) != len(gold):
                    raise SystemExit(f"{len(labels)} final words for {len(gold)} words: not scored")
                f1 = score(gold, labels).to_dict()["overall_f1"]
            row = {"threshold": threshold, **stability.to_dict(), **marks.to_dict(),
                   "finals_equal_first": final_marks == reference, "seconds": round(time.perf_counter() - t0, 1)}
            grid.append(row)
            print(f"P={threshold:.2f}: last partial = final {row['last_partial_accuracy']}% of "
                  f"{row['words_shown_in_partials']} shown words; {row['changes_per_100_words']} changes per 100 "
                  f"words ({row['changes_in_partials']} in partials + {row['changes_at_final']} at the final); "
                  f"final marks shown early {row['shown_early_percent']}% of {row['final_marks_shown_in_partials']}; "
                  f"finals equal: {row['finals_equal_first']} ({row['seconds']} s)", flush=True)
    result = {"data": str(args.data), "model": str(args.model or "models/default"), "words": len(words),
              "streams": len(spans), "words_per_second": args.wps, "seed": args.seed,
              "hypotheses": args.hypotheses, "capitalize": args.capitalize, "final_f1": f1, "grid": grid,
              "command": "python -m benchmarks.partial_threshold " + " ".join(sys.argv[1:] if argv is None else argv)}
    print(f"finals: overall F1 {f1:.2f} (the same for every threshold)")
    if args.out is not None:
        from streampunct.text.textfile import write_text_atomically

        write_text_atomically(args.out, json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0 if all(row["finals_equal_first"] for row in grid) else 1


if __name__ == "__main__":
    raise SystemExit(run_module(main, "python -m benchmarks.partial_threshold"))
