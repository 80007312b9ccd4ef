"""Percentiles of latencies, as the benchmarks report them."""

from __future__ import annotations

import statistics


def percentile(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def percentiles(latencies: list[float]) -> str:
    cuts = statistics.quantiles(latencies, n=20)
    return f"p50 {statistics.median(latencies):.1f} ms, p95 {cuts[18]:.1f} ms ({len(latencies)})"
