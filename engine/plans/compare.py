"""A re-planned step against the reviewed one: the differences, each named."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from engine.plans.planfile import PlannedDiff, Step

SHOWN_LINES = 6


def fingerprint_differences(
    reviewed: Mapping[str, str], fresh: Mapping[str, str], skip: Collection[str] = ()
) -> list[str]:
    found = []
    for key in sorted((set(reviewed) | set(fresh)) - set(skip)):
        if key not in fresh:
            found.append(f"{key}: gone since the review (was {reviewed[key]})")
        elif key not in reviewed:
            found.append(f"{key}: new since the review ({fresh[key]})")
        elif reviewed[key] != fresh[key]:
            found.append(f"{key}: was {reviewed[key]} at the review, now {fresh[key]}")
    return found


def diff_differences(reviewed: Sequence[PlannedDiff], fresh: Sequence[PlannedDiff]) -> list[str]:
    old = {d.label: d for d in reviewed}
    new = {d.label: d for d in fresh}
    found = []
    for label in dict.fromkeys([*old, *new]):
        before, after = old.get(label), new.get(label)
        if before is None or after is None:
            found.append(f"diff {label!r}: {'new' if before is None else 'gone'} since the review")
        elif before.changes != after.changes:
            lost = [c for c in before.changes if c not in after.changes]
            gained = [c for c in after.changes if c not in before.changes]
            lines = [f"now also {c!r}" for c in gained] + [f"no longer {c!r}" for c in lost]
            more = f" (+{len(lines) - SHOWN_LINES} more)" if len(lines) > SHOWN_LINES else ""
            found.append(f"diff {label!r}: " + "; ".join(lines[:SHOWN_LINES]) + more)
        elif (before.before, before.after) != (after.before, after.after):
            found.append(f"diff {label!r}: the text differs from the reviewed one")
    return found


def differences(reviewed: Step, fresh: Step, changed_by_earlier: Collection[str] = ()) -> list[str]:
    """Empty when the fresh plan is the reviewed one.

    ``changed_by_earlier``: fingerprint keys (files) that reviewed changes applied earlier
    in this run have changed on purpose. A step that depends on them (the server whose
    spec hashes the config files a patch just edited) is compared without those keys and
    without its diffs, which derive from them; its summary and other keys still count.
    """
    if reviewed.no_log or fresh.no_log:
        same = reviewed.sealed == fresh.sealed and reviewed.no_log == fresh.no_log
        return [] if same else ["the planned change differs from the reviewed one (details hidden: no_log)"]
    found = []
    if reviewed.summary != fresh.summary:
        found.append(f"change: reviewed {reviewed.summary!r}, now {fresh.summary!r}")
    derived = (set(reviewed.fingerprint) | set(fresh.fingerprint)) & set(changed_by_earlier)
    found += fingerprint_differences(reviewed.fingerprint, fresh.fingerprint, skip=derived)
    if not derived:
        found += diff_differences(reviewed.diffs, fresh.diffs)
        if reviewed.sealed != fresh.sealed:  # diffs hidden by `diff: false`: compared sealed
            found.append("the diff differs from the reviewed one (details hidden: diff: false)")
    return found
