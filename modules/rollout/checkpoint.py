"""The checkpoint's files in a host's turn: the release's patch, made with patch_quant_config's
own plan and apply; and the bytes every config file had before the change, kept, and
written back on a rollback before the previous server starts, so that the model directory
is as it was before the rollout (a backup the patch made is gone again, one that was
there before stays)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine.module_api import Become, Change, ScopedConnection, TaskContext, TaskFailed, Unchanged, Writes
from modules.checkpoints import patch_quant_config
from modules.rollout.fleet import FleetHost
from modules.serving.spec import config_digests, config_paths, read_config_files, recorded_model


@dataclass(frozen=True)
class KeptFile:
    path: str
    data: bytes
    # the suffix of the backup the patch makes of this file, when none existed before the change
    backup_suffix: str | None = None


@dataclass(frozen=True)
class Kept:
    files: tuple[KeptFile, ...] = ()
    drifted: tuple[dict[str, str], ...] = ()  # config files whose digest is not the record's

    def paths(self) -> list[str]:
        return [f.path for f in self.files]


def plan_patch(ctx: TaskContext, host: FleetHost) -> Change | Unchanged | None:
    """patch_quant_config's own plan on the host; None when the release patches nothing there."""
    if host.checkpoint_patch is None:
        return None
    return patch_quant_config.plan(host.context(ctx, planning=True), host.checkpoint_patch)


def apply_patch(ctx: TaskContext, host: FleetHost) -> dict[str, Any] | None:
    """The patch made on the host (patch_quant_config's apply of its plan): its evidence."""
    planned = plan_patch(ctx, host)
    if planned is None or host.checkpoint_patch is None:
        return None
    if isinstance(planned, Unchanged):
        return {"changed": False, "msg": planned.msg}
    result = patch_quant_config.apply(host.context(ctx, planning=False), host.checkpoint_patch, planned)
    return {"changed": True, "files": result.data["files"], "warnings": list(result.warnings)}


@dataclass(frozen=True)
class _AsPatched(ScopedConnection):
    """A planning connection that reads the files a planned patch writes as it would leave
    them (nothing is written: its scope refuses writes while planning)."""

    patched: Mapping[str, bytes] = field(default_factory=dict)

    def read_file(self, path: str, *, sudo: Become | None = None) -> bytes | None:
        data = self.patched.get(posixpath.normpath(path))
        return data if data is not None else super().read_file(path, sudo=sudo)


def as_patched(ctx: TaskContext, patch: Change | Unchanged | None) -> TaskContext:
    """``ctx`` with the files ``patch`` would write read as it would leave them: serve_vllm's
    plan then shows the spec the patched config files make (their digests are in its hash)."""
    if not isinstance(patch, Change):
        return ctx
    writes = {posixpath.normpath(e.path): e.data for e in patch.effects if isinstance(e, Writes) and e.data}
    return replace(ctx, conn=_AsPatched(ctx.conn.inner, ctx.conn.scope, writes))


def keep(ctx: TaskContext, record: Mapping[str, Any], patch: Mapping[str, Any] | None) -> Kept:
    """Before the change: the bytes of every config file the previous server's record names
    whose digest still is the recorded one (the others drifted since it started: named, not
    kept), and of every file the patch edits, with whether it has a backup yet."""
    files: dict[str, KeptFile] = {}
    drifted = []
    model = recorded_model(record.get("argv") or ())
    recorded: Mapping[str, str] = record.get("config_sha256") or {}
    if model:
        paths = config_paths(model)
        now = read_config_files(ctx.conn, model)
        digests = config_digests(now)
        for name, path in paths.items():
            data = now[name]
            if name in recorded and digests[name] != recorded[name]:
                drifted.append({"file": path, "recorded": recorded[name], "now": digests[name]})
            elif name in recorded and data is not None:
                files[posixpath.normpath(path)] = KeptFile(path, data)
    if patch is not None:
        files.update(_patch_targets(ctx, patch))
    return Kept(tuple(files.values()), tuple(drifted))


def _patch_targets(ctx: TaskContext, patch: Mapping[str, Any]) -> dict[str, KeptFile]:
    names = [edits.name for edits in patch_quant_config.requested_edits(patch)]
    found = patch_quant_config.describe(ctx, patch, names)["files"]
    kept = {}
    for name in names:
        info = found[name]
        if info["kind"] not in ("file", "symlink") or info.get("dangling"):
            continue  # nothing there to edit: the patch's own plan says why, or skips an optional file
        path = posixpath.join(patch["path"], name)
        data = ctx.conn.read_file(path)
        if data is not None:
            fresh = info["backup"]["kind"] == "missing"
            kept[posixpath.normpath(path)] = KeptFile(path, data, patch["backup_suffix"] if fresh else None)
    return kept


def put_back(ctx: TaskContext, kept: Kept) -> dict[str, list[str]]:
    """On a rollback: every kept file that differs now gets its kept bytes again. A file the
    patch backed up for the first time gets that backup renamed over it instead (it holds
    the kept bytes: the original comes back as it was, a symlink as the same link, and the
    backup is gone); a backup holding other bytes is someone else's and stays."""
    restored, removed, left = [], [], []
    for kept_file in kept.files:
        differs = ctx.conn.read_file(kept_file.path) != kept_file.data
        suffix = kept_file.backup_suffix
        held = ctx.conn.read_file(kept_file.path + suffix) if suffix else None
        if suffix and held == kept_file.data:
            patch_quant_config.restore_original(ctx, kept_file.path, suffix)
            removed.append(kept_file.path + suffix)
        else:
            if suffix and held is not None:
                left.append(kept_file.path + suffix)
            if differs:
                ctx.conn.write_file(kept_file.path, kept_file.data)
        if differs:
            restored.append(kept_file.path)
    wrong = [f.path for f in kept.files if ctx.conn.read_file(f.path) != f.data]
    if wrong:
        raise TaskFailed(f"rollout: {', '.join(wrong)} did not get back the bytes it had before the change")
    return {"restored": restored, "backups_removed": removed, "backups_left": left}
