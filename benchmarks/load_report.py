"""What the load bench prints and draws: step lines, the summary, the profile, the plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from benchmarks.common import pyplot


def format_step(s: Mapping) -> str:
    m, e, srv, cl, c = s["margin_ms"], s["latency_ms"], s["server"], s["client"], s["check"]

    def f(x: float | None, spec: str = ".0f") -> str:
        return "-" if x is None else format(x, spec)

    parts = [
        f"N={s['sessions']:<4d} margin p50/p95/p99/max {f(m['p50'])}/{f(m['p95'])}/{f(m['p99'])}/{f(m['max'])} ms",
        f"e2e p50/p95 {f(e['p50'])}/{f(e['p95'])} ms",
        f"{f(s['finalized_wps'])}/{s['offered_wps']:.0f} w/s",
    ]
    window = s.get("window")
    if window:  # what finalized_wps counts: the words sent while every session was streaming
        parts[-1] += f" ({window['words_finalized']}/{window['words_offered']} words of a {window['s']:.1f} s window)"
    if "batch_size" in srv:
        parts.append(f"batch mean {srv['batch_size']['mean']:.1f}")
    if "tokens_per_word" in srv:
        parts.append(f"tokens/word {srv['tokens_per_word']['final']:.1f}")
    if "engine_busy" in srv:
        parts.append(f"engine busy {100 * srv['engine_busy']:.0f}%")
    if "cpu_cores" in srv:
        parts.append(f"server cpu {srv['cpu_cores']:.2f}")
    if srv.get("cpu_ms_per_word") is not None:
        loop = srv.get("loop_cpu_ms_per_word")
        every = srv.get("cpu_ms_per_finalized_word")
        notes = ([f"loop {loop:.2f}"] if loop is not None else []) + (
            [f"per word finalized {every:.2f}"] if every is not None else [])
        parts.append(f"cpu/word {srv['cpu_ms_per_word']:.2f} ms" + (f" ({'; '.join(notes)})" if notes else ""))
    if "itn_wait_ms" in srv:
        w = srv["itn_wait_ms"]
        parts.append(f"itn waits {w['texts']} p50/p95 {f(w['p50'])}/{f(w['p95'])} ms")
    parts.append(f"client cpu {cl['cpu_cores']:.2f} send-lag p95 {f(cl['send_lag_ms']['p95'])} ms")
    if "other_processes_cores" in s:
        parts.append(f"others {s['other_processes_cores']:.2f} cores")
    parts.append(f"lost {c['lost']} dup {c['duplicated']} ooo {c['out_of_order']} mism {c['mismatched']}")
    if s["errors"]:
        parts.append("errors " + ",".join(f"{k}={v}" for k, v in s["errors"].items()))
    verdict = "SLO met" if s["slo_met"] else "SLO missed: " + "; ".join(s["slo_failures"])
    if cl["behind"]:
        verdict += " [load generator behind schedule]"
    return " | ".join(parts) + " | " + verdict


def _runs_the_loop(filename: str, func: str) -> bool:
    """The frames that run an event loop (asyncio's ``Runner.run`` and ``run_until_complete``,
    uvloop's ``run``): with uvloop the loop's idle waits are their own time."""
    name = Path(filename).name
    return (name == "runners.py" and func == "run") or func in (
        "run_until_complete", "run_forever") or (name == "__init__.py" and "uvloop" in filename and func == "run")


def profile_top(path: Path | None, limit: int = 20) -> list[dict] | None:
    """The server main thread's costliest functions (own time), idle waits left out."""
    if path is None or not path.is_file():
        return None
    import pstats

    stats = pstats.Stats(str(path))
    rows = []
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "epoll" in func or "select" in func or func in ("<built-in method time.sleep>",):
            continue  # the event loop waiting for work: idle, not cost
        if _runs_the_loop(filename, func):
            continue  # uvloop waits inside its C loop: cProfile gives that wait to the frame that runs it
        rows.append({"function": f"{Path(filename).name}:{line}({func})", "calls": nc,
                     "tottime_s": round(tt, 3), "cumtime_s": round(ct, 3)})
    rows.sort(key=lambda r: r["tottime_s"], reverse=True)
    return rows[:limit]


def target_verdict(steps: Sequence[Mapping], best: int | None, target: int) -> bool | None:
    """Whether ``target`` sessions met the SLO: True, False, or None when no step reached the
    target and none missed the SLO (the ramp stopped below it: not tested)."""
    if best is not None and best >= target:
        return True
    largest_run = max((s["sessions"] for s in steps), default=0)
    if largest_run < target and all(s["slo_met"] for s in steps):
        return None
    return False


def summary_text(payload: Mapping) -> str:
    best = payload["max_sessions_meeting_slo"]
    slo = payload["slo"]["p95_margin_ms"]
    target = payload["target_sessions"]
    largest_run = max((s["sessions"] for s in payload["steps"]), default=0)
    if payload["target_met"]:
        verdict = "met"
    elif payload["target_met"] is None:
        verdict = f"not tested (largest N run: {largest_run})"
    else:
        verdict = "NOT met"
    lines = [
        f"largest N meeting the SLO (p95 finalize margin <= {slo:.0f} ms, no lost/duplicated words): "
        f"{best if best is not None else 'none'}; target {target}: {verdict} "
        f"({payload['stopped']}; {payload['total_s']:.0f}s)",
    ]
    lines += [f"note: {n}" for n in payload["notes"]]
    return "\n".join(lines)


def plot_load(payload: Mapping, path: Path) -> Path | None:
    plt = pyplot()
    if plt is None:
        return None
    steps = sorted(payload["steps"], key=lambda s: s["sessions"])
    if not steps:
        return None
    n = [s["sessions"] for s in steps]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, style in (("p50", "o-"), ("p95", "s-"), ("p99", "^--")):
        values = [s["margin_ms"][key] for s in steps]
        ax1.plot(n, [max(v, 1.0) if v is not None else np.nan for v in values], style, label=f"margin {key}")
    slo = payload["slo"]["p95_margin_ms"]
    ax1.axhline(slo, color="red", linestyle=":", label=f"SLO p95 <= {slo:.0f} ms")
    for s in steps:
        if not s["slo_met"]:
            ax1.axvline(s["sessions"], color="gray", alpha=0.25, linewidth=6)
    best = payload["max_sessions_meeting_slo"]
    if best is not None:
        ax1.axvline(best, color="green", linestyle="--", label=f"largest N meeting SLO: {best}")
    ax1.set_yscale("log")
    ax1.set_xlabel("concurrent sessions")
    ax1.set_ylabel("finalize margin (ms, log; floor 1 ms)")
    ax1.set_title("final after decidable (gray: SLO missed)")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    ax2.plot(n, [s["offered_wps"] for s in steps], "k:", label="offered words/s")
    ax2.plot(n, [s["finalized_wps"] or np.nan for s in steps], "o-", label="finalized words/s")
    ax2.set_xlabel("concurrent sessions")
    ax2.set_ylabel("words/s")
    ax2.grid(alpha=0.3)
    ax3 = ax2.twinx()
    ax3.plot(n, [s["server"].get("cpu_cores", np.nan) for s in steps], "s--", color="tab:red",
             label="server CPU (cores)")
    ax3.plot(n, [s["client"]["cpu_cores"] for s in steps], "^--", color="tab:purple",
             label="load generator CPU (cores)")
    ax3.plot(n, [s["server"].get("engine_busy", np.nan) for s in steps], "d:", color="tab:green",
             label="engine busy (engine-seconds/s, all workers)")
    ax3.plot(n, [s.get("other_processes_cores", np.nan) for s in steps], "x:", color="gray",
             label="other processes CPU (cores)")
    ax3.set_ylabel("cores / fraction")
    ax3.set_ylim(bottom=0)
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax3.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    srv = payload["server"]
    ax2.set_title(f"throughput and CPU ({srv.get('engine')}, {srv.get('model') or 'external server'})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
