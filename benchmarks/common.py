"""Helpers shared by the benchmarks: machine description, result files, plotting."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "benchmarks" / "results"


def machine() -> dict:
    """Where a figure was measured."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


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
