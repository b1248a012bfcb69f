"""Is a new measurement worse than a baseline, beyond the noise the baseline itself shows?

One rule for the rollout's performance gate and for ``rigger baselines``: a figure is a
regression when it is worse than the baseline's median by more than BOTH the relative
threshold (a real change an operator cares about) and ``noise_k`` times the baseline's own
spread (what two measurements of one unchanged server differ by on this host). With one
baseline sample there is no spread to learn: the relative threshold alone decides.

The spread is the median absolute deviation, scaled to match a standard deviation for normal
noise (1.4826): a baseline of three with one outlier (a neighbour took the CPU during one
load test) has a standard deviation about as wide as the outlier itself, wide enough to hide
a release whose time to first token is 15x slower (the likely way such a release passed the
gate in CI, on a loaded 2-core box). The median's deviation ignores the one outlier.
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


MAD_TO_STDEV = 1.4826  # for normally distributed noise, stdev = 1.4826 x the MAD


def spread(samples: Sequence[float]) -> float:
    """The scaled median absolute deviation of the samples (0 for fewer than two)."""
    if len(samples) < 2:
        return 0.0
    middle = statistics.median(samples)
    return MAD_TO_STDEV * statistics.median(abs(x - middle) for x in samples)


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
