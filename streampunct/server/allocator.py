"""glibc's allocator: give freed memory back to the system, and read its figures.

A server's native memory (ONNX Runtime's tensors, numpy arrays such as the
sessions' cached keys and values, websockets' buffers, Python's larger
objects) comes from glibc's malloc. Memory freed in the middle of its heaps
stays with the process: glibc returns only the free top of a heap by itself,
and its threshold for giving large blocks their own mappings rises to the
largest block freed (up to 32 MB), so after one large block even blocks of
hundreds of KB come from the heap. Under a server's varying load the heaps
hold more and more free memory, and the RSS climbs in steps for as long as
the server runs (docs/server.md, "Memory that stays").

:func:`trim` calls ``malloc_trim(0)``, which also releases the free pages in
the middle of every arena (``madvise``); the batcher calls it on an engine
worker's thread every ``trim_interval_s`` (5 s) while the engine works and once
after that long idle (:class:`streampunct.server.batcher.BatcherConfig`). Without glibc
(musl, macOS) :func:`trim` does nothing and :func:`heap_figures` gives None.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
from dataclasses import dataclass


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]


@dataclass
class TrimStats:
    """What :func:`trim` did in this process (``streampunct_allocator_trims_total`` and
    ``streampunct_allocator_trim_seconds_total`` on ``/metrics``).

    Attributes:
        calls: trims run; seconds: their wall time, all together.
    """

    calls: int = 0
    seconds: float = 0.0


#: This process' trims (the allocator is the process', whichever server or batcher asked).
STATS = TrimStats()
_stats_lock = threading.Lock()


@functools.cache
def _libc_function(name: str):  # noqa: ANN202 (a ctypes function or None)
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


def can_trim() -> bool:
    """Whether this process' C library has ``malloc_trim`` (glibc)."""
    return _libc_function("malloc_trim") is not None


def trim() -> bool:
    """``malloc_trim(0)``: give the free pages of every malloc arena back to the system.

    True when some memory went back; False when none did or without glibc. It
    takes each arena's lock in turn (a few ms with a hundred MB free), so call
    it off the event loop.
    """
    fn = _libc_function("malloc_trim")
    if fn is None:
        return False
    t0 = time.perf_counter()
    released = bool(fn(0))
    with _stats_lock:
        STATS.calls += 1
        STATS.seconds += time.perf_counter() - t0
    return released


def heap_figures() -> dict[str, float] | None:
    """glibc's heap in MB (``mallinfo2``): ``arena_mb`` (heap size, all arenas, without large
    mapped blocks), ``in_use_mb`` (allocated), ``free_kept_mb`` (freed, still held, part of it
    possibly already given back by :func:`trim`), ``mmapped_mb`` (large blocks in their own
    mappings); None without glibc 2.33+."""
    fn = _libc_function("mallinfo2")
    if fn is None:
        return None
    fn.restype = _Mallinfo2
    info = fn()
    mb = 2**20
    return {"arena_mb": round(info.arena / mb, 2), "in_use_mb": round(info.uordblks / mb, 2),
            "free_kept_mb": round(info.fordblks / mb, 2), "mmapped_mb": round(info.hblkhd / mb, 2)}
