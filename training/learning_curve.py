"""A run's learning curve: validation F1 against words trained on, as JSON and PNG.

    python -m training.learning_curve checkpoints/release_teacher [--out benchmarks/results/teacher_curve]
        [--compare OTHER_CURVE.json [--compare-label NAME]]

Reads the ``valid`` records of ``RUN/metrics.jsonl`` (written every
``optim.eval_every`` steps; ``words_seen`` counts the labelled words trained on
so far) and writes ``OUT.json`` (one point per validation: step, words, overall
and per-class F1, case non-lower F1 when logged) and ``OUT.png``. ``--compare`` draws the
overall F1 of another run's curve JSON (one this tool wrote) on the same axes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def curve_points(metrics_path: Path) -> list[dict]:
    points = []
    for line in metrics_path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill
        if rec.get("type") != "valid":
            continue
        points.append({"step": rec["step"], "words": rec.get("words_seen"), "overall_f1": rec["overall_f1"],
                       **{f"{k}_f1": v["f1"] for k, v in rec.get("per_class", {}).items()}})
    return points


class CurveError(Exception):
    """A run folder or curve file this tool cannot draw (the message says which and why)."""


def run_points(run: Path) -> list[dict]:
    """The curve of a run folder; :class:`CurveError` without ``metrics.jsonl`` or without a
    validation record in it (a run stopped before its first validation)."""
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        why = "" if run.is_dir() else (": it is not a folder" if run.exists() else ": it does not exist")
        raise CurveError(f"no metrics.jsonl in {run} (a training run's output folder){why}")
    try:
        points = curve_points(metrics)
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise CurveError(f"{metrics} has a malformed validation record ({type(e).__name__}: {e})") from None
    if not points:
        raise CurveError(f"{metrics} has no validation records (\"type\": \"valid\", written every "
                         "optim.eval_every steps and at each epoch's end): no curve to draw yet")
    return points


def compare_points(path: Path) -> tuple[list[dict], str]:
    """The points and run name of a curve JSON this tool wrote (``--compare``)."""
    try:
        other = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CurveError(f"--compare {path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CurveError(f"--compare {path}: not a curve JSON ({e})") from None
    points = other.get("points") if isinstance(other, dict) else None
    if not isinstance(points, list) or not all(isinstance(p, dict) and "overall_f1" in p for p in points):
        raise CurveError(f"--compare {path}: not a curve JSON this tool wrote (no \"points\" with overall_f1)")
    return points, str(other.get("run", path.stem))


def plot(points: list[dict], path: Path, title: str, *, compare: list[dict] | None = None,
         compare_label: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_words = bool(points) and points[0]["words"] is not None

    def xs(pts: list[dict]) -> list[float]:
        return [(p["words"] or 0) / 1e6 if by_words else p["step"] for p in pts]

    x = xs(points)
    fig, ax = plt.subplots(figsize=(9, 4))
    for key in ("overall_f1", "COMMA_f1", "PERIOD_f1", "QUESTION_f1"):
        if points and key in points[0]:
            ax.plot(x, [p[key] for p in points], marker="o" if key == "overall_f1" else ".",
                    label=key.replace("_f1", ""), linewidth=2 if key == "overall_f1" else 1)
    if compare:
        ax.plot(xs(compare), [p["overall_f1"] for p in compare], marker="o", linestyle="--", color="grey",
                label=f"overall, {compare_label}")
    ax.set_xlabel("million labelled words trained on" if by_words else "step")
    ax.set_ylabel("dev2010 F1")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")  # beside the axes: curves fill them
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.learning_curve", description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a run folder (holds metrics.jsonl)")
    ap.add_argument("--out", type=Path, default=None, help="output path without suffix (default RUN/learning_curve)")
    ap.add_argument("--compare", type=Path, default=None, metavar="CURVE_JSON",
                    help="another run's curve (a JSON this tool wrote): its overall F1 is drawn too")
    ap.add_argument("--compare-label", default=None, help="legend name of --compare (default: its run)")
    args = ap.parse_args(argv)
    try:
        points = run_points(args.run)
        compare, label = None, ""
        if args.compare is not None:
            compare, run = compare_points(args.compare)
            label = args.compare_label or Path(run).name
    except CurveError as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    out = args.out or args.run / "learning_curve"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"run": str(args.run), "points": points}, indent=2) + "\n",
                                        encoding="utf-8")
    plot(points, out.with_suffix(".png"), f"{args.run.name}: validation F1",
         compare=compare, compare_label=label)
    print(f"{len(points)} points -> {out}.json, {out}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
