"""Every CUDA call of the engines package, through pycuda, each turned into a typed error.

Nothing else in ``engines`` touches pycuda. The TensorRT engine calls these
from its single worker thread, which owns the device's primary context, and
``build_plan`` holds that context current around a build:
``PrimaryContext.open`` retains and pushes it (never ``import pycuda.autoinit``
in library code) and ``close`` pops and releases it on the same thread.
pycuda raises ``pycuda.driver.Error`` subclasses instead of returning status
codes; :func:`_checked` converts every one into :class:`CudaError` naming the
call that failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from engines.base import CudaError
from engines.deps import require


def _driver() -> ModuleType:
    return require("pycuda.driver", feature="the TensorRT engine (CUDA via pycuda)")


@contextmanager
def _checked(what: str) -> Iterator[None]:
    cuda = _driver()
    try:
        yield
    except cuda.Error as e:
        raise CudaError(f"CUDA {what} failed: {e}") from e


@dataclass(frozen=True)
class DeviceInfo:
    """A CUDA device as TensorRT plans care about it.

    Attributes:
        index: device ordinal.
        name: marketing name, e.g. ``NVIDIA H100 80GB HBM3``.
        compute_capability: ``"major.minor"``, e.g. ``"9.0"``.
        total_memory: bytes.
    """

    index: int
    name: str
    compute_capability: str
    total_memory: int


def init() -> int:
    """Initialize the driver; returns the number of CUDA devices."""
    cuda = _driver()
    with _checked("cuInit"):
        cuda.init()
    with _checked("device count"):
        return int(cuda.Device.count())


def device_info(index: int = 0) -> DeviceInfo:
    """Name, compute capability and memory of device ``index`` (no context needed)."""
    cuda = _driver()
    count = init()
    if not 0 <= index < count:
        raise CudaError(f"no CUDA device {index}: this host has {count} device(s)")
    with _checked(f"query of device {index}"):
        dev = cuda.Device(index)
        major, minor = dev.compute_capability()
        return DeviceInfo(index, str(dev.name()), f"{major}.{minor}", int(dev.total_memory()))


class PrimaryContext:
    """The device's primary context, retained and pushed on the calling thread."""

    def __init__(self, context, device: DeviceInfo) -> None:
        self._context = context
        self.device = device

    @classmethod
    def open(cls, index: int = 0) -> PrimaryContext:
        cuda = _driver()
        info = device_info(index)
        with _checked(f"retaining the primary context of device {index}"):
            context = cuda.Device(index).retain_primary_context()
        try:
            with _checked("pushing the primary context"):
                context.push()
        except CudaError:
            context.detach()
            raise
        return cls(context, info)

    def close(self) -> None:
        """Pop the context from this thread and release our reference (idempotent)."""
        if self._context is None:
            return
        context, self._context = self._context, None
        with _checked("popping the primary context"):
            context.pop()
        with _checked("releasing the primary context"):
            context.detach()


class Stream:
    """A non-default CUDA stream."""

    def __init__(self) -> None:
        cuda = _driver()
        with _checked("stream creation"):
            self.raw = cuda.Stream()

    @property
    def handle(self) -> int:
        return int(self.raw.handle)

    def synchronize(self) -> None:
        with _checked("stream synchronize"):
            self.raw.synchronize()


class PinnedBuffer:
    """A 1-D page-locked host array, allocated once (async copies need pinned memory).

    Attributes:
        array: the numpy view of the pinned memory.
    """

    def __init__(self, count: int, dtype: np.dtype) -> None:
        cuda = _driver()
        with _checked(f"pinned allocation of {count} x {np.dtype(dtype).name}"):
            self.array: np.ndarray = cuda.pagelocked_empty(int(count), dtype)

    def view(self, count: int) -> np.ndarray:
        """The first ``count`` elements (contiguous, still pinned)."""
        if count > self.array.size:
            raise CudaError(f"{count} elements exceed the pinned buffer of {self.array.size}")
        return self.array[:count]

    def free(self) -> None:
        """Free now, while the context is current (not at garbage collection)."""
        if self.array is not None and self.array.size:
            array, self.array = self.array, np.empty(0, self.array.dtype)
            with _checked("pinned free"):
                array.base.free()


class DeviceBuffer:
    """Device memory of a fixed size, allocated once.

    Attributes:
        nbytes: size in bytes.
    """

    def __init__(self, nbytes: int) -> None:
        cuda = _driver()
        self.nbytes = int(nbytes)
        with _checked(f"device allocation of {self.nbytes} bytes"):
            self._allocation = cuda.mem_alloc(self.nbytes)

    @property
    def address(self) -> int:
        if self._allocation is None:
            raise CudaError("device buffer used after free")
        return int(self._allocation)

    def copy_from_host_async(self, host: np.ndarray, stream: Stream) -> None:
        """Enqueue host -> device; ``host`` must be a contiguous view of pinned memory."""
        self._check_size(host)
        cuda = _driver()
        with _checked("host-to-device copy"):
            cuda.memcpy_htod_async(self._allocation, host, stream.raw)

    def copy_to_host_async(self, host: np.ndarray, stream: Stream) -> None:
        """Enqueue device -> host into a contiguous view of pinned memory."""
        self._check_size(host)
        cuda = _driver()
        with _checked("device-to-host copy"):
            cuda.memcpy_dtoh_async(host, self._allocation, stream.raw)

    def _check_size(self, host: np.ndarray) -> None:
        if not host.flags.c_contiguous:
            raise CudaError("async copies need a contiguous host array")
        if host.nbytes > self.nbytes:
            raise CudaError(f"copy of {host.nbytes} bytes exceeds the {self.nbytes}-byte device buffer")

    def free(self) -> None:
        if self._allocation is not None:
            allocation, self._allocation = self._allocation, None
            with _checked("device free"):
                allocation.free()


class EventTimer:
    """A pair of CUDA events around work enqueued on a stream; ``elapsed_ms`` after sync."""

    def __init__(self) -> None:
        cuda = _driver()
        with _checked("event creation"):
            self._start, self._end = cuda.Event(), cuda.Event()

    def start(self, stream: Stream) -> None:
        with _checked("event record"):
            self._start.record(stream.raw)

    def stop(self, stream: Stream) -> None:
        with _checked("event record"):
            self._end.record(stream.raw)

    def elapsed_ms(self) -> float:
        with _checked("event timing"):
            self._end.synchronize()
            return float(self._end.time_since(self._start))
