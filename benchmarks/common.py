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


#: CPU features that change inference speed (int8 kernels: AVX2, AVX-512, VNNI, AMX; Arm dot products).
_SIMD_PREFIXES = ("avx", "fma", "f16c", "amx", "sse4", "asimd", "sve", "i8mm", "bf16")


def cpu_features(cpuinfo: str) -> dict:
    """CPU model name and the SIMD flags that matter for inference, from ``/proc/cpuinfo`` text.

    ``avx2``, ``avx512`` and ``vnni`` are booleans (``vnni``: AVX-512 VNNI or
    AVX-VNNI); ``flags`` lists every flag with a SIMD prefix, sorted.
    """
    model, flags = "", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return {
        "model": model,
        "avx2": "avx2" in flags,
        "avx512": any(f.startswith("avx512") for f in flags),
        "vnni": any("vnni" in f for f in flags),
        "flags": sorted(f for f in flags if f.startswith(_SIMD_PREFIXES) or "vnni" in f),
    }


def machine() -> dict:
    """Where a figure was measured: CPU model and flags, cores, memory, Python, OS."""
    try:
        features = cpu_features(Path("/proc/cpuinfo").read_text())
    except OSError:
        features = cpu_features("")
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    physical = memory_gb = None
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
        memory_gb = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    return {
        "cpu": features.pop("model") or platform.processor() or platform.machine(),
        "cpu_flags": features,
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "physical_cores": physical,
        "usable_cores": usable,
        "memory_gb": memory_gb,
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
