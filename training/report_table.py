"""A markdown table of checkpoint reports side by side (``training.checkpoint_report`` JSON).

    python -m training.report_table benchmarks/results/capabilities/cap_*.json

One row per report: dev2010 offline P/R/F1, simulated streaming F1 per right
context, the other sources' offline F1, case figures (learned head and the
rules on the same punctuation) where the checkpoint has a case head, and the
training time from the run's ``metrics.jsonl`` when the checkpoint is still
there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _train_seconds(checkpoint: str) -> float | None:
    metrics = Path(checkpoint).parent / "metrics.jsonl"
    if not metrics.is_file():
        return None
    done = [json.loads(line) for line in metrics.read_text().splitlines() if '"done"' in line]
    return done[-1].get("seconds") if done else None


def table(paths: list[Path], main_source: str = "dev2010") -> str:
    reports = [(p.stem, json.loads(p.read_text())) for p in paths]
    contexts = sorted({int(rc) for _, r in reports for e in r["sources"].values() for rc in e["streaming"]})
    others = sorted({s for _, r in reports for s in r["sources"] if s != main_source})
    head = ([f"{main_source} offline P/R/F1"] + [f"stream rc {rc}" for rc in contexts]
            + [f"{s} offline F1" for s in others] + ["case non-lower F1 (head / rules)", "train time"])
    lines = ["| run | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for name, rep in reports:
        main = rep["sources"].get(main_source, {})
        cells = []
        if main:
            o = main["offline"]["overall"]
            cells.append(f"{o['precision']:.1f}/{o['recall']:.1f}/**{o['f1']:.2f}**")
        else:
            cells.append("")
        cells += [f"{main['streaming'][str(rc)]['overall_f1']:.2f}" if str(rc) in main.get("streaming", {}) else ""
                  for rc in contexts]
        cells += [f"{rep['sources'][s]['offline']['overall_f1']:.2f}" if s in rep["sources"] else "" for s in others]
        if "case" in main:
            cells.append(f"{main['case']['non_lower']['f1']:.1f} / {main['case_rules']['non_lower']['f1']:.1f}")
        else:
            cells.append("")
        secs = _train_seconds(rep["checkpoint"])
        cells.append(f"{secs / 60:.0f} min" if secs else "")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.report_table", description=__doc__.split("\n")[0])
    ap.add_argument("reports", nargs="+", type=Path)
    ap.add_argument("--main", default="dev2010", help="the source shown in full (default: dev2010)")
    args = ap.parse_args(argv)
    print(table(args.reports, args.main))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
