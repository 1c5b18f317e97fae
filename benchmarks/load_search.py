"""The SLO search: a step's verdict, the next N to try, the best N found."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def slo_failures(step: Mapping, slo_p95_ms: float) -> list[str]:
    """Why a step misses the SLO (empty: it meets it)."""
    reasons = []
    if step["connected"] < step["sessions"]:
        reasons.append(f"{step['sessions'] - step['connected']} sessions could not connect")
    c = step["check"]
    for key in ("lost", "duplicated", "out_of_order", "mismatched"):
        if c[key]:
            reasons.append(f"{c[key]} {key.replace('_', '-')} words")
    # a session the server closed early (a shutdown: close 1001), or that got an error frame
    # (overloaded, internal) or ran out of time, was not served: the step fails even when
    # every word it sent got its final (the profiler's own failure is not the server's)
    errors = {k: v for k, v in (step.get("errors") or {}).items()
              if k != "py-spy" and not k.startswith("connect:") and v}  # refused connections: above
    if errors:
        reasons.append("session errors: " + ", ".join(f"{k} x{v}" for k, v in sorted(errors.items())))
    p95 = step["margin_ms"]["p95"]
    if p95 is None:
        reasons.append("no word was finalized")
    elif p95 > slo_p95_ms:
        reasons.append(f"p95 finalize margin {p95:.0f} ms > {slo_p95_ms:.0f} ms")
    return reasons


# -- the ramp --------------------------------------------------------------------------


def next_refinement(steps: Sequence[Mapping], granularity: int = 5) -> int | None:
    """The N halfway between the largest good N and the smallest bad N above it (None: done)."""
    bad = [s["sessions"] for s in steps if not s["slo_met"]]
    if not bad:
        return None
    hi = min(bad)
    good = [s["sessions"] for s in steps if s["slo_met"] and s["sessions"] < hi]
    lo = max(good, default=0)
    mid = int(round((lo + hi) / 2 / granularity)) * granularity
    if mid <= lo or mid >= hi or hi - lo <= max(granularity, 0.1 * hi):
        return None
    return mid


def best_sessions(steps: Sequence[Mapping]) -> int | None:
    """The largest N that met the SLO below the smallest N that missed it."""
    bad = [s["sessions"] for s in steps if not s["slo_met"]]
    limit = min(bad) if bad else math.inf
    good = [s["sessions"] for s in steps if s["slo_met"] and s["sessions"] < limit]
    return max(good) if good else None
