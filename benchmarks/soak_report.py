"""What the soak bench computes and shows: the server's RSS trend, the summary, the plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from benchmarks.common import pyplot


def rss_trend(samples: Sequence[Sequence[float]], warmup_s: float) -> dict:
    """RSS after warm-up and its least-squares slope, from ``(seconds, rss_mb)`` samples.

    Samples before ``warmup_s`` (engine load, first allocations, caches
    filling) are left out of the fit. ``slope_mb_per_h`` is None with fewer
    than two samples after warm-up. ``growth_mb`` is the fitted growth over
    the samples after warm-up; ``residual_mb`` the RMS scatter around the fit
    (noise against which a slope means something); ``slope_se_mb_per_h`` the
    slope's standard error under that scatter (samples taken as independent:
    a lower bound when the RSS moves in steps or saw teeth longer than the
    sampling period).
    """
    all_rss = [float(r) for _, r in samples]
    after = [(float(t), float(r)) for t, r in samples if t >= warmup_s]
    out: dict = {
        "warmup_s": warmup_s,
        "samples": len(samples),
        "samples_after_warmup": len(after),
        "rss_start_mb": round(all_rss[0], 1) if all_rss else None,
        "rss_max_mb": round(max(all_rss), 1) if all_rss else None,
        "rss_after_warmup_mb": round(after[0][1], 1) if after else None,
        "rss_end_mb": round(after[-1][1], 1) if after else None,
        "slope_mb_per_h": None,
        "slope_se_mb_per_h": None,
        "growth_mb": None,
        "residual_mb": None,
    }
    if len(after) < 2 or after[-1][0] <= after[0][0]:
        return out
    t = np.asarray([x for x, _ in after]) / 3600.0
    r = np.asarray([y for _, y in after])
    slope, intercept = np.polyfit(t, r, 1)
    fit = intercept + slope * t
    spread = float(np.sum((t - t.mean()) ** 2))
    se = float(np.sqrt(np.sum((r - fit) ** 2) / (len(t) - 2) / spread)) if len(t) > 2 and spread > 0 else None
    out.update(
        slope_mb_per_h=round(float(slope), 3),
        slope_se_mb_per_h=None if se is None else round(se, 3),
        growth_mb=round(float(slope * (t[-1] - t[0])), 2),
        residual_mb=round(float(np.sqrt(np.mean((r - fit) ** 2))), 2),
    )
    return out


def summary_text(payload: Mapping) -> str:
    trend, totals = payload["rss"], payload["totals"]
    slope = trend["slope_mb_per_h"]
    lines = [
        f"{totals['sessions_completed']} sessions ({payload['config']['sessions']} at a time, "
        f"{payload['config']['session_s']:.0f}s each) in {payload['wall_s']:.0f}s; "
        f"{totals['words_sent']} words, lost {totals['check']['lost']} dup {totals['check']['duplicated']} "
        f"ooo {totals['check']['out_of_order']} mism {totals['check']['mismatched']}",
        "server RSS: start {start} MB, after warm-up ({w:.0f}s) {after} MB, end {end} MB, max {mx} MB; "
        "slope {slope} MB/h{se} over {n} samples (scatter {res} MB)".format(
            start=trend["rss_start_mb"], w=trend["warmup_s"], after=trend["rss_after_warmup_mb"],
            end=trend["rss_end_mb"], mx=trend["rss_max_mb"],
            slope="-" if slope is None else f"{slope:+.2f}",
            se=f" (standard error {trend['slope_se_mb_per_h']:.2f})" if trend.get("slope_se_mb_per_h") is not None
            else "",
            n=trend["samples_after_warmup"], res=trend["residual_mb"],
        ),
    ]
    trims = payload.get("allocator")
    if trims and trims.get("trims"):
        lines.append(f"allocator trims: {trims['trims']:.0f}, {trims['trim_ms_mean']:.1f} ms each on average "
                     f"({trims['trim_seconds']:.2f} s in all)")
    if totals["errors"]:
        lines.append("errors: " + ", ".join(f"{k}={v}" for k, v in sorted(totals["errors"].items())))
    lines += [f"note: {n}" for n in payload["notes"]]
    return "\n".join(lines)


def plot_soak(payload: Mapping, path: Path) -> Path | None:
    """RSS over time with the warm-up shaded and the fitted line."""
    plt = pyplot()
    samples = payload["samples"]
    if plt is None or not samples:
        return None
    trend = payload["rss"]
    t = np.asarray([s[0] for s in samples]) / 60.0
    rss = np.asarray([s[1] for s in samples])
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(t, rss, ".-", label="server RSS")
    ax.axvspan(0, trend["warmup_s"] / 60.0, color="gray", alpha=0.15, label="warm-up")
    if trend["slope_mb_per_h"] is not None:
        after = t >= trend["warmup_s"] / 60.0
        fit = np.polyfit(t[after] / 60.0, rss[after], 1)
        ax.plot(t[after], np.polyval(fit, t[after] / 60.0), "r--",
                label=f"fit: {trend['slope_mb_per_h']:+.2f} MB/h")
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MB)")
    cfg = payload["config"]
    ax.set_title(f"soak: {cfg['sessions']} reconnecting sessions ({payload['server'].get('engine')})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
