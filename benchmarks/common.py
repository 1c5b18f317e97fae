"""Helpers shared by the benchmarks: result files, plotting (the machine description:
:mod:`engines.host`)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from engines.host import cpu_features, git_commit, machine  # noqa: F401 (the benchmarks' names)

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "benchmarks" / "results"


def write_result(name: str, payload: dict, out_dir: Path | None = None, *, command: str | None = None) -> Path:
    """Write ``payload`` (plus machine, time and command) as ``<out_dir>/<name>.json``."""
    out_dir = Path(out_dir) if out_dir else RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": name,
        "command": command or " ".join(["streampunct", *sys.argv[1:]]),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": machine(),
        **payload,
    }
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def publish(name: str, payload: dict, out_dir: Path, *, command: str | None, plot, summary) -> None:
    """Write the result JSON, its plot (``plot(payload, png_path) -> path or None``) and print
    ``summary(payload)`` with where the files went."""
    path = write_result(name, payload, out_dir, command=command)
    png = plot(payload, Path(out_dir) / f"{name}.png")
    print(summary(payload))
    print(f"wrote {path}" + (f" and {png}" if png else ""))


def percentile(values, q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a note) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'streampunct[train]')")
        return None
    return plt
