"""Figures from a load test's per-request results: tokens/s, time to first token, errors."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BenchSummary:
    requests: int
    errors: int
    output_tokens: int
    wall_s: float
    tokens_per_s: float
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    latency_p50_s: float | None
    first_errors: tuple[str, ...]

    def as_data(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "output_tokens": self.output_tokens,
            "wall_s": round(self.wall_s, 3),
            "tokens_per_s": round(self.tokens_per_s, 2),
            "ttft_p50_s": _round(self.ttft_p50_s),
            "ttft_p95_s": _round(self.ttft_p95_s),
            "latency_p50_s": _round(self.latency_p50_s),
            "first_errors": list(self.first_errors),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (p95 of 20 values is the 19th smallest)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summarize(results: Sequence[Mapping[str, Any]], wall_s: float) -> BenchSummary:
    ok = [r for r in results if r.get("ok")]
    failed = [r for r in results if not r.get("ok")]
    tokens = sum(int(r.get("output_tokens") or 0) for r in ok)
    ttfts = [float(r["ttft_s"]) for r in ok if r.get("ttft_s") is not None]
    latencies = [float(r["latency_s"]) for r in ok if r.get("latency_s") is not None]
    return BenchSummary(
        requests=len(results),
        errors=len(failed),
        output_tokens=tokens,
        wall_s=wall_s,
        tokens_per_s=tokens / wall_s if wall_s > 0 else 0.0,
        ttft_p50_s=percentile(ttfts, 0.50),
        ttft_p95_s=percentile(ttfts, 0.95),
        latency_p50_s=percentile(latencies, 0.50),
        first_errors=tuple(str(r.get("error")) for r in failed[:3]),
    )
