"""``rigger baselines``: the stored measurements per host and key, with the ones that stand out.

- regression: on one host, the newest configuration (vLLM, torch, flags, revision) of a
  model on a GPU type is slower than the configuration before it, beyond the noise band;
- outlier: among hosts running the same configuration on the same GPU type, one host is
  slower than the median of the others, beyond the band.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.baselines.noise import DEFAULT_NOISE_K, DEFAULT_RELATIVE, judge
from engine.baselines.store import BaselineKey, Measurement
from engine.hosttext import terminal_lines


@dataclass(frozen=True)
class Row:
    key: BaselineKey
    samples: tuple[float, ...]
    last_at: float
    flags: tuple[str, ...] = ()

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def rows(measurements: Sequence[Measurement]) -> list[Row]:
    grouped: dict[BaselineKey, list[Measurement]] = defaultdict(list)
    for m in measurements:
        if not m.errors:
            grouped[m.key].append(m)
    return [Row(key, tuple(m.tokens_per_s for m in ms), max(m.at for m in ms)) for key, ms in grouped.items()]


def flagged(found: Sequence[Row], relative: float = DEFAULT_RELATIVE, noise_k: float = DEFAULT_NOISE_K) -> list[Row]:
    notes: dict[BaselineKey, list[str]] = defaultdict(list)
    for note_key, note in [*_regressions(found, relative, noise_k), *_outliers(found, relative, noise_k)]:
        notes[note_key].append(note)
    return [Row(r.key, r.samples, r.last_at, tuple(notes[r.key])) for r in sorted(found, key=_order)]


def _order(row: Row) -> tuple[str, ...]:
    return (row.key.host, row.key.model, row.key.gpu, str(row.last_at))


def _regressions(found: Sequence[Row], relative: float, noise_k: float) -> list[tuple[BaselineKey, str]]:
    lines: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for row in found:
        lines[(row.key.host, row.key.model, row.key.gpu)].append(row)
    notes = []
    for history in lines.values():
        history.sort(key=lambda r: r.last_at)
        for before, after in itertools.pairwise(history):
            verdict = judge(
                "tokens/s", before.samples, after.median, higher_is_better=True, relative=relative, noise_k=noise_k
            )
            if verdict.worse:
                notes.append(
                    (after.key, f"REGRESSION vs the previous configuration on this host: {verdict.describe()}")
                )
    return notes


def _outliers(found: Sequence[Row], relative: float, noise_k: float) -> list[tuple[BaselineKey, str]]:
    fleets: dict[tuple[str, ...], list[Row]] = defaultdict(list)
    for row in found:
        fleets[row.key.fleet_part()].append(row)
    notes = []
    for members in fleets.values():
        if len(members) < 3:
            continue  # with two hosts, which one is "the rest"?
        for row in members:
            others = [other.median for other in members if other is not row]
            verdict = judge("tokens/s", others, row.median, higher_is_better=True, relative=relative, noise_k=noise_k)
            if verdict.worse:
                notes.append(
                    (
                        row.key,
                        f"OUTLIER: slower than the {len(others)} other hosts with this configuration: "
                        + verdict.describe(),
                    )
                )
    return notes


def as_data(found: Sequence[Row]) -> list[dict[str, Any]]:
    return [
        {
            **{name: getattr(r.key, name) for name in BaselineKey.__dataclass_fields__},
            "samples": len(r.samples),
            "median_tokens_per_s": round(r.median, 2),
            "flags": list(r.flags),
        }
        for r in found
    ]


def text(found: Sequence[Row]) -> str:
    if not found:
        return "no measurements stored yet (check_serving records each one)\n"
    out = []
    for r in found:
        k = r.key
        out.append(
            f"{k.host}  {k.model}@{k.revision}  vllm {k.vllm} torch {k.torch}  flags {k.flags_hash[:12]}  "
            f"{k.gpu}: {r.median:.1f} tok/s median of {len(r.samples)}"
        )
        out += [f"    {note}" for note in r.flags]
    return terminal_lines(out) + "\n"  # host, model and versions came from hosts
