"""Serial batches and the failure limits that stop a play."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from engine.model import Play


class _HostState(Protocol):
    failed: bool
    unreachable: bool


@dataclass(frozen=True)
class Limits:
    play: Play
    batch_size: int

    def failed_count(self, hosts: Sequence[_HostState]) -> int:
        return sum(1 for h in hosts if h.failed or h.unreachable)

    def exceeded(self, hosts: Sequence[_HostState]) -> bool:
        failed = self.failed_count(hosts)
        if not failed:
            return False
        if self.play.any_errors_fatal:
            return True
        if self.play.max_fail_percentage is not None:
            return failed * 100.0 / self.batch_size > float(self.play.max_fail_percentage)
        return failed == self.batch_size

    def reason(self, hosts: Sequence[_HostState]) -> str:
        failed = self.failed_count(hosts)
        if self.play.any_errors_fatal:
            return "any_errors_fatal: a host failed, stopping the play"
        if self.play.max_fail_percentage is not None:
            pct = failed * 100.0 / self.batch_size
            limit = float(self.play.max_fail_percentage)
            return (
                f"max_fail_percentage {limit:g}% exceeded ({failed}/{self.batch_size} = {pct:.0f}%), stopping the play"
            )
        return "every host in the batch failed, stopping the play"


def batches(names: list[str], serial: tuple[int | str, ...]) -> list[list[str]]:
    if not serial:
        return [names]
    sizes = [batch_size(s, len(names)) for s in serial]
    batches, start, index = [], 0, 0
    while start < len(names):
        size = sizes[min(index, len(sizes) - 1)]
        batches.append(names[start : start + size])
        start += size
        index += 1
    return batches


def batch_size(spec: int | str, total: int) -> int:
    if isinstance(spec, str) and spec.endswith("%"):
        return max(1, int(total * float(spec[:-1]) / 100))
    return max(1, int(spec))
