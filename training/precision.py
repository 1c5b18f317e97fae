"""Whether bfloat16 autocast pays on a device, and the precision a run actually uses.

bf16 autocast halves MPNet's step time on CUDA and on CPUs with native bf16
(AVX-512 BF16 or AMX, told by their /proc/cpuinfo flags where Linux has them: oneDNN
alone says yes on any AVX-512 CPU), where the release models trained. On other CPUs (AVX2
only) PyTorch emulates it: a MiniLM training step took 31 s against 1.5 s in
fp32 on a 2-core AVX2 EPYC. A run that asks for bf16 there trains in fp32 and
says so, rather than running twenty times slower.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


def native_bf16(device: torch.device) -> bool:
    """bf16 matmuls run natively on ``device`` (CUDA, or a CPU with AVX-512 BF16 / AMX)."""
    if device.type == "cuda":
        return True
    return device.type == "cpu" and _cpu_native_bf16()


#: /proc/cpuinfo flags of CPUs that compute in bf16 natively.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def _cpu_native_bf16() -> bool:
    if not _onednn_bf16():
        return False
    # oneDNN says yes on any AVX-512 CPU (Skylake, Cascade Lake), where it emulates bf16: where
    # the flags can be read, they decide
    flags = cpu_flags()
    return flags is None or bool(flags & BF16_FLAGS)


def _onednn_bf16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN: no fast path either
        return False


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The CPU's feature flags (Linux), or None where they cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        return None
    return None


def use_bf16(requested: bool, device: torch.device, what: str = "training") -> bool:
    """``requested`` where bf16 is native on ``device``; otherwise ``False``, with a warning."""
    if requested and not native_bf16(device):
        log.warning("%s: bf16 asked for, but this %s has no native bf16 (AVX-512 BF16 or AMX); "
                    "emulated it runs about twenty times slower, so this run uses fp32",
                    what, "CPU" if device.type == "cpu" else device.type)
        return False
    return requested
