"""Is a new measurement worse than a baseline, beyond the noise the baseline itself shows?

One rule for the rollout's performance gate and for ``rigger baselines``: a figure is a
regression when it is worse than the baseline's median by more than BOTH the relative
threshold (a real change an operator cares about) and ``noise_k`` times the baseline's own
spread (what two measurements of one unchanged server differ by on this host). With one
baseline sample there is no spread to learn: the relative threshold alone decides.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_RELATIVE = 0.25
DEFAULT_NOISE_K = 3.0


@dataclass(frozen=True)
class Verdict:
    figure: str
    baseline: float
    value: float
    allowed: float  # the worst value still inside the band
    spread: float
    worse: bool

    def as_data(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "baseline_median": round(self.baseline, 4),
            "value": round(self.value, 4),
            "allowed": round(self.allowed, 4),
            "spread": round(self.spread, 4),
            "worse": self.worse,
        }

    def describe(self) -> str:
        word = "worse than" if self.worse else "within"
        return (
            f"{self.figure} {self.value:.4g} vs baseline {self.baseline:.4g} "
            f"({word} the band, limit {self.allowed:.4g})"
        )


def spread(samples: Sequence[float]) -> float:
    """Standard deviation of the samples (0 for fewer than two)."""
    return statistics.stdev(samples) if len(samples) > 1 else 0.0


def judge(
    figure: str,
    baseline: Sequence[float],
    value: float,
    *,
    higher_is_better: bool,
    relative: float = DEFAULT_RELATIVE,
    noise_k: float = DEFAULT_NOISE_K,
) -> Verdict:
    middle = statistics.median(baseline)
    noise = spread(baseline)
    margin = max(relative * middle, noise_k * noise)
    allowed = middle - margin if higher_is_better else middle + margin
    worse = value < allowed if higher_is_better else value > allowed
    return Verdict(figure, middle, value, allowed, noise, worse)
