"""How fast one session's frames are read: a token bucket (sans I/O; the session's reader waits).

Words have their own bound (the backlog, ``max_backlog_words``), but a frame
that carries no words (``flush``, ``config``, a malformed frame answered with
an error) costs the event loop as much, and nothing held a client that sends
thousands of them a second while reading the answers: one such client took
the other sessions' finals from 8 ms to 53-103 ms (p50) on 2 cores; with the
default rate, 12-14 ms (docs/server.md, "Frame rate"). With a rate, a
session's reader takes at most ``rate`` frames a second after a burst of
``rate``; past it, it waits before the next ``recv``, websockets' small queue
fills, it stops reading the socket and TCP slows the client, as for the
backlog. Nothing is dropped or refused; only that client's frames arrive
later.

A frame counts once per started :data:`FRAME_UNIT_BYTES` of its text
(:func:`frame_cost`): what a frame costs the loop grows with what it carries
(a 1000-word ``hypothesis`` of long new words, a ``config`` with a large
lexicon took 20-290 ms each), so the bucket bounds that work, not only the
number of frames; real-time frames of a few words count once. What a frame's
text says is not all it costs: a ``hypothesis`` of 1000 new 200-letter words
took the loop 290 ms for 800 units of text, so three such clients kept it busy
and ``/healthz`` waited seconds. A frame therefore also counts once per started
:data:`FRAME_UNIT_CPU_S` of the event loop's CPU that handling it took
(:func:`frame_cost` with ``cpu_s``), whichever is more: at the default rate a
session's frames take at most about a tenth of its loop's core, whatever they
carry. Real-time frames (20-45 us) still count once.
"""

from __future__ import annotations

import math

#: A frame counts once per started this many characters (bytes of a binary frame).
FRAME_UNIT_BYTES = 256
#: ... and once per started this many seconds of the event loop's CPU (thread time) handling it took.
FRAME_UNIT_CPU_S = 100e-6


def frame_cost(frame: str | bytes, cpu_s: float = 0.0) -> int:
    """How many frames of the rate ``frame`` counts as: one per started :data:`FRAME_UNIT_BYTES`
    of it, or one per started :data:`FRAME_UNIT_CPU_S` of the ``cpu_s`` seconds of CPU that
    handling it took, whichever is more."""
    by_cpu = math.ceil(cpu_s / FRAME_UNIT_CPU_S) if cpu_s > 0 and math.isfinite(cpu_s) else 0
    return max(1, -(-len(frame) // FRAME_UNIT_BYTES), by_cpu)


class FrameRate:
    """A token bucket of ``rate`` frames a second holding at most ``rate`` (one second's burst).

    :meth:`wait` says how long to wait at ``now`` before the next frame may be
    taken; :meth:`take` counts a frame taken at ``now``. Times are seconds of one
    monotonic clock (the event loop's)."""

    def __init__(self, rate: float) -> None:
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"rate must be a finite number > 0, not {rate!r}")
        self.rate = float(rate)
        self.burst = max(1.0, float(rate))
        self._tokens = self.burst
        self._at: float | None = None

    def _refill(self, now: float) -> None:
        if self._at is not None and now > self._at:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        if self._at is None or now > self._at:
            self._at = now

    def wait(self, now: float) -> float:
        """Seconds from ``now`` until a frame may be taken (0.0: at once)."""
        self._refill(now)
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate

    def take(self, now: float, cost: float = 1.0) -> None:
        """A frame was taken at ``now``, counting as ``cost`` frames (:func:`frame_cost`; the
        bucket may go below zero, and the next frame waits until it is back at one)."""
        self._refill(now)
        self._tokens -= cost
