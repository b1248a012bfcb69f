"""Per-host changes that differ only in a few words, as one change and a small table.

Eight hosts that each start vLLM with their own model path and port read as one argv
block with ``⟨path⟩`` and ``⟨port⟩`` in it, and a table host | path | port. Hosts whose
lines have the same shape (as many lines, as many words per line) are factored together
when at most ``MAX_COLUMNS`` distinct values vary; anything else stays a group of its own
(hosts with byte-identical lines still share one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_COLUMNS = 4


@dataclass(frozen=True)
class Factored:
    """One change on these hosts: ``lines`` with ``⟨name⟩`` where ``columns`` vary;
    ``values[i]`` holds host ``hosts[i]``'s value for each column."""

    hosts: tuple[str, ...]
    lines: tuple[str, ...]
    columns: tuple[str, ...] = ()
    values: tuple[tuple[str, ...], ...] = ()


def _shape(lines: Sequence[str]) -> tuple[int, ...]:
    return tuple(len(line.split(" ")) for line in lines)


def _column_name(previous: str, value: str, taken: list[str]) -> str:
    if previous.startswith("-") and previous.strip("-"):
        name = previous.lstrip("-").replace("-", "_")
    elif previous.isalpha() and previous.islower() and value.isdigit():
        name = previous  # "port 8000", "rank 1"
    elif value.startswith("/") or "/" in value:
        name = "path"
    elif value.lstrip(":").isdigit():
        name = "number"
    else:
        name = "value"
    unique, n = name, 2
    while unique in taken:
        unique, n = f"{name}{n}", n + 1
    return unique


BOUNDARY = "/-_.:=,"


def _common_ends(values: tuple[str, ...]) -> tuple[str, str]:
    """The prefix and suffix every value shares, cut at a separator ("/", "-", ...), so
    that only the part that differs is factored out ("/models/⟨path⟩/config.json")."""
    first = values[0]
    size = min(len(v) for v in values)
    head = next((n for n in range(size) if any(v[n] != first[n] for v in values)), size)
    while head and first[head - 1] not in BOUNDARY:
        head -= 1
    tail = next((n for n in range(size - head) if any(v[-1 - n] != first[-1 - n] for v in values)), size - head)
    while tail and first[len(first) - tail] not in BOUNDARY:
        tail -= 1
    if any(not v[head : len(v) - tail] for v in values):
        return "", ""
    return first[:head], first[len(first) - tail :] if tail else ""


def _factor(members: list[tuple[str, list[str]]]) -> Factored | None:
    """The members as one factored change, or None when too much varies."""
    hosts = tuple(h for h, _ in members)
    words = [[line.split(" ") for line in lines] for _, lines in members]
    columns: list[str] = []
    by_values: dict[tuple[str, ...], str] = {}  # the same per-host values twice: one column
    template = []
    for i, line in enumerate(words[0]):
        out = []
        for j, word in enumerate(line):
            whole = tuple(w[i][j] for w in words)
            if len(set(whole)) == 1:
                out.append(word)
                continue
            head, tail = _common_ends(whole)
            seen = tuple(v[len(head) : len(v) - len(tail)] for v in whole)
            if seen not in by_values:
                by_values[seen] = _column_name(line[j - 1] if j else "", word, columns)
                columns.append(by_values[seen])
            out.append(f"{head}⟨{by_values[seen]}⟩{tail}")
        template.append(" ".join(out))
    if len(columns) > MAX_COLUMNS:
        return None
    ordered = list(by_values)
    values = tuple(tuple(seen[n] for seen in ordered) for n in range(len(hosts)))
    return Factored(hosts, tuple(template), tuple(by_values[s] for s in ordered), values)


def factored(changes: Sequence[tuple[str, list[str]]]) -> list[Factored]:
    """Each host's change lines, grouped: identical ones together, then alike ones factored."""
    identical: dict[tuple[str, ...], list[str]] = {}
    for host, host_lines in changes:
        identical.setdefault(tuple(host_lines), []).append(host)
    by_shape: dict[tuple[int, ...], list[tuple[str, ...]]] = {}
    for variant in identical:
        by_shape.setdefault(_shape(variant), []).append(variant)
    groups = []
    for variants in by_shape.values():
        members = [(h, list(lines)) for lines in variants for h in identical[lines]]
        one = _factor(members) if len(variants) > 1 else None
        if one is not None:
            groups.append(one)
            continue
        groups += [Factored(tuple(identical[lines]), lines) for lines in variants]
    return groups
