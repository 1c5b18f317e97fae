"""The server's side of a load step, from two scrapes of its Prometheus ``/metrics``."""

from __future__ import annotations

import math
from collections.abc import Mapping


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return out


def metrics_delta(before: Mapping, after: Mapping) -> dict:
    """after - before, sample by sample (counters and histograms over one step)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def histogram(samples: Mapping, name: str) -> dict | None:
    """A histogram's cumulative buckets, sum and count from parsed samples."""
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (sample, labels), value in samples.items()
        if sample == f"{name}_bucket" and "le" in dict(labels)
    )
    if not buckets:
        return None
    return {
        "buckets": buckets,
        "sum": samples.get((f"{name}_sum", ()), 0.0),
        "count": samples.get((f"{name}_count", ()), 0.0),
    }


def histogram_quantile(hist: Mapping, q: float, *, interpolate: bool = True) -> float:
    """Prometheus-style quantile estimate: linear within the bucket that holds it.

    With ``interpolate=False`` the bucket's upper bound (for integer-valued
    histograms such as batch sizes, where "p50 <= 2" says more than "1.6").
    """
    count = hist["count"]
    if count <= 0:
        return math.nan
    rank = q * count
    lower, prev = 0.0, 0.0
    for le, cum in hist["buckets"]:
        if cum >= rank:
            if math.isinf(le):
                return lower
            if cum == prev or not interpolate:
                return le
            return lower + (le - lower) * (rank - prev) / (cum - prev)
        lower, prev = le, cum
    return lower


def _sample(samples: Mapping, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def window_cost(delta: Mapping, words_finalized: float) -> dict:
    """Tokens encoded per finalized word: the cost of streaming (re-encoded left context).

    ``tokens_per_word.final``: tokens of the windows that decided finals (CLS
    and SEP included, unpadded) per finalized word; ``with_partials`` adds
    the windows of provisional labels; ``engine_padded`` counts what the
    engine computed, padding included. Empty before the server had these
    counters or when no word was finalized.
    """
    final = _sample(delta, "streampunct_window_tokens_total", kind="final")
    partial = _sample(delta, "streampunct_window_tokens_total", kind="partial")
    padded = _sample(delta, "streampunct_engine_tokens_total")
    if words_finalized <= 0 or final <= 0:
        return {}
    return {
        "window_tokens": {"final": int(final), "partial": int(partial), "engine_padded": int(padded)},
        "final_windows": int(_sample(delta, "streampunct_windows_total", kind="final")),
        "tokens_per_word": {
            "final": round(final / words_finalized, 2),
            "with_partials": round((final + partial) / words_finalized, 2),
            "engine_padded": round(padded / words_finalized, 2),
        },
    }


def server_figures(delta: Mapping, wall_s: float) -> dict:
    """Engine batching, engine time and the server's own margin over one step."""
    out: dict = {"words_in": _sample(delta, "streampunct_words_in_total"),
                 "words_finalized": _sample(delta, "streampunct_words_finalized_total")}
    batch = histogram(delta, "streampunct_batch_size")
    if batch and batch["count"] > 0:
        out["engine_calls"] = int(batch["count"])
        out["batch_size"] = {
            "mean": round(batch["sum"] / batch["count"], 2),
            "p50_at_most": histogram_quantile(batch, 0.5, interpolate=False),
            "p95_at_most": histogram_quantile(batch, 0.95, interpolate=False),
            "max_at_most": histogram_quantile(batch, 1.0, interpolate=False),
            "cumulative": {str(int(le)) if not math.isinf(le) else "+Inf": int(c) for le, c in batch["buckets"]},
        }
        out["requests"] = int(batch["sum"])
        if out["requests"]:
            out["words_per_request"] = round(out["words_finalized"] / out["requests"], 2)
    engine = histogram(delta, "streampunct_engine_latency_seconds")
    if engine and engine["count"] > 0:
        out["engine_ms"] = {
            "mean": round(1e3 * engine["sum"] / engine["count"], 2),
            "p50": round(1e3 * histogram_quantile(engine, 0.5), 2),
            "p95": round(1e3 * histogram_quantile(engine, 0.95), 2),
        }
        # Engine-seconds per second, summed over the engine workers (up to their number).
        out["engine_busy"] = round(engine["sum"] / wall_s, 3) if wall_s > 0 else None
    margin = histogram(delta, "streampunct_finalize_margin_seconds")
    if margin and margin["count"] > 0:
        out["server_margin_ms"] = {
            "p50": round(1e3 * histogram_quantile(margin, 0.5), 1),
            "p95": round(1e3 * histogram_quantile(margin, 0.95), 1),
            "p99": round(1e3 * histogram_quantile(margin, 0.99), 1),
        }
    itn_wait = histogram(delta, "streampunct_itn_wait_seconds")
    if itn_wait and itn_wait["count"] > 0:  # texts of itn sessions that waited for a grammar search
        out["itn_wait_ms"] = {
            "texts": int(itn_wait["count"]),
            "mean": round(1e3 * itn_wait["sum"] / itn_wait["count"], 1),
            "p50": round(1e3 * histogram_quantile(itn_wait, 0.5), 1),
            "p95": round(1e3 * histogram_quantile(itn_wait, 0.95), 1),
        }
    out.update(window_cost(delta, out["words_finalized"]))
    paused = _sample(delta, "streampunct_input_paused_total")
    if paused:
        out["input_paused"] = int(paused)
    slow = _sample(delta, "streampunct_slow_reader_closes_total")
    if slow:
        out["slow_reader_closes"] = int(slow)
    errors = {dict(labels)["code"]: int(v) for (name, labels), v in delta.items()
              if name == "streampunct_errors_total" and v}
    if errors:
        out["errors"] = errors
    rejected = {dict(labels)["reason"]: int(v) for (name, labels), v in delta.items()
                if name == "streampunct_handshakes_rejected_total" and v}
    if rejected:
        out["rejected"] = rejected
    return out


# -- one step ------------------------------------------------------------------------
