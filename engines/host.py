"""The host a figure or a build was made on: CPU model and flags, cores, memory, Python, OS,
and the commit of this tree (recorded beside benchmark results and release recipes' stage
times; at the bottom floor, so that training and benchmarks both use it)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

from engines.base import EngineError

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


def usable_cores() -> int:
    """Logical CPUs this process may run on (its affinity mask; all of them where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


#: An engine's thread options at most this many per usable core: more only adds contention and
#: memory, and a typo (16000 for 16) would start threads until the host gives out.
THREADS_PER_CORE = 4


def check_threads(option: str, n: int | None) -> None:
    """An :class:`~engines.base.EngineError` naming ``option`` when ``n`` (None: the engine's
    default) is under 1 or over :data:`THREADS_PER_CORE` per usable core."""
    if n is None:
        return
    if n < 1:
        raise EngineError(f"{option} must be >= 1, got {n}")
    limit = THREADS_PER_CORE * usable_cores()
    if n > limit:
        raise EngineError(f"{option} must be at most {limit} on this host ({THREADS_PER_CORE} per usable core), "
                          f"got {n}")


def machine() -> dict:
    """Where a figure was measured: CPU model and flags, cores, memory, Python, OS."""
    try:
        features = cpu_features(Path("/proc/cpuinfo").read_text())
    except OSError:
        features = cpu_features("")
    usable = usable_cores()
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
