"""Edit a checkpoint's JSON config files in place, keeping the originals.

`kv_cache_dtype: auto` removes the FP8 KV-cache declaration everywhere engines read it:
`config.json` `quantization_config.kv_cache_scheme` (dict or legacy string; also
`kv_cache_quant_algo`), the same under `text_config.quantization_config`, and
`hf_quant_config.json` `quantization.kv_cache_quant_algo`. vLLM then sizes the KV cache in
the model dtype (bfloat16) instead of FP8. The general form edits any JSON file in the
model directory: `set` / `remove` by dotted key path (digits index lists).

Key order, indentation and the trailing newline are kept. Each file is written
atomically; before the first edit its pristine original is kept next to it as
`NAME.rigger-orig` (never overwritten by a later patch). A file that is a symlink (e.g.
into a huggingface cache blob) is replaced by a patched regular file: the blob is never
written through. `state: restored` puts every original back (a symlink comes back as the
same symlink). Corrupt JSON fails the task and leaves the file untouched.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.module_api import (
    Change,
    Diff,
    ProbeError,
    Removes,
    Result,
    TaskContext,
    TaskFailed,
    Unchanged,
    Writes,
    content_digest,
    keypath_diff,
)
from modules.checkpoints import jsonpatch

KV_CACHE_AUTO_EDITS: dict[str, tuple[str, ...]] = {
    "config.json": (
        "quantization_config.kv_cache_scheme",
        "quantization_config.kv_cache_quant_algo",
        "text_config.quantization_config.kv_cache_scheme",
        "text_config.quantization_config.kv_cache_quant_algo",
    ),
    "hf_quant_config.json": ("quantization.kv_cache_quant_algo",),
}
OPTIONAL_FILES = frozenset({"hf_quant_config.json"})

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["path"],
    "properties": {
        "path": {"type": "string", "description": "The model directory on the host."},
        "kv_cache_dtype": {
            "type": ["string", "null"],
            "enum": ["auto", None],
            "default": None,
            "description": "`auto`: remove the checkpoint's FP8 KV-cache declaration from "
            "config.json (also under text_config) and hf_quant_config.json.",
        },
        "set": {
            "type": "object",
            "default": {},
            "additionalProperties": {"type": "object"},
            "description": "File name (relative to `path`) -> {key.path: value} to set.",
        },
        "remove": {
            "type": "object",
            "default": {},
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
            "description": "File name (relative to `path`) -> list of key paths to remove.",
        },
        "state": {
            "type": "string",
            "enum": ["patched", "restored"],
            "default": "patched",
            "description": "`patched` applies the edits; `restored` puts the originals back.",
        },
        "backup_suffix": {
            "type": "string",
            "default": ".rigger-orig",
            "pattern": r"^\.[A-Za-z0-9._-]+$",
            "description": "Suffix of the pristine copy kept next to each edited file.",
        },
    },
}


@dataclass(frozen=True)
class FileEdits:
    name: str
    remove: tuple[str, ...]
    set_values: Mapping[str, Any]
    optional: bool


@dataclass(frozen=True)
class FilePatch:
    name: str
    path: str
    before: str
    after: str
    keys: tuple[str, ...]
    was_symlink: bool
    reformatted: bool


def _check_name(name: str) -> str:
    parts = name.split("/")
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise TaskFailed(f"{name!r}: file names must be relative to the model directory")
    return name


def requested_edits(args: Mapping[str, Any]) -> list[FileEdits]:
    removes: dict[str, list[str]] = {}
    if args["kv_cache_dtype"] == "auto":
        for name, paths in KV_CACHE_AUTO_EDITS.items():
            removes.setdefault(name, []).extend(paths)
    for name, paths in (args["remove"] or {}).items():
        removes.setdefault(_check_name(name), []).extend(paths)
    sets: Mapping[str, Mapping[str, Any]] = args["set"] or {}
    names = list(dict.fromkeys([*removes, *(_check_name(n) for n in sets)]))
    explicit = set(args["remove"] or {}) | set(sets)
    return [
        FileEdits(
            name=name,
            remove=tuple(removes.get(name, ())),
            set_values=dict(sets.get(name, {})),
            optional=name in OPTIONAL_FILES and name not in explicit,
        )
        for name in names
    ]


def describe(ctx: TaskContext, args: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """The model_files probe's answer for ``names`` in ``args["path"]`` (each one's kind and
    its backup's); fails when the directory does not exist."""
    answer = ctx.conn.run_probe(
        "model_files",
        {"dir": args["path"], "names": names, "backup_suffix": args["backup_suffix"]},
    )
    if not answer["dir_exists"]:
        raise TaskFailed(f"model directory {args['path']} does not exist")
    return answer


def _read_text(ctx: TaskContext, path: str) -> str:
    try:
        data = ctx.conn.read_file(path)
    except OSError as exc:
        raise TaskFailed(f"cannot read {path}: {exc.strerror or exc}") from exc
    if data is None:
        raise TaskFailed(f"{path} vanished while being read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFailed(f"{path} is not UTF-8 text; left untouched") from exc


def _patch_one(
    ctx: TaskContext, args: Mapping[str, Any], edits: FileEdits, info: Mapping[str, Any]
) -> FilePatch | None:
    path = posixpath.join(args["path"], edits.name)
    if info["kind"] == "missing" or info.get("dangling"):
        if edits.optional:
            return None
        raise TaskFailed(f"{path} does not exist")
    if info["kind"] == "other":
        raise TaskFailed(f"{path} is not a regular file")
    text = _read_text(ctx, path)
    try:
        doc = jsonpatch.parse(text, path)
        patched = jsonpatch.apply_edits(doc.data, edits.remove, edits.set_values)
    except jsonpatch.JsonEditError as exc:
        raise TaskFailed(f"{exc}; file left untouched") from exc
    keys = keypath_diff(doc.data, patched)
    if not keys:
        return None
    return FilePatch(
        name=edits.name,
        path=path,
        before=text,
        after=doc.dumps(patched),
        keys=tuple(keys),
        was_symlink=info["kind"] == "symlink",
        reformatted=not jsonpatch.is_canonical(doc, text),
    )


def _plan_patched(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    wanted = requested_edits(args)
    if not wanted:
        raise TaskFailed("nothing to do: give kv_cache_dtype, set or remove")
    files = describe(ctx, args, [edits.name for edits in wanted])["files"]
    patches = [patch for edits in wanted if (patch := _patch_one(ctx, args, edits, files[edits.name])) is not None]
    if not patches:
        present = [e.name for e in wanted if files[e.name]["kind"] in ("file", "symlink")]
        return Unchanged(f"already patched: no edit left to make in {', '.join(present)}", {"files": {}})
    summary = "edit " + "; ".join(f"{p.name}: {', '.join(p.keys)}" for p in patches)
    return Change(
        summary=summary,
        diffs=tuple(Diff(p.path, p.before, p.after) for p in patches),
        payload={"op": "patch", "patches": patches},
        fingerprint={f"file:{p.path}": content_digest(p.before.encode("utf-8")) for p in patches},
        effects=_patch_effects(args, patches, files),
    )


def _patch_effects(args: Mapping[str, Any], patches: list[FilePatch], files: Mapping[str, Any]) -> tuple[Writes, ...]:
    """The patched files, and the original kept beside each one that has no backup yet."""
    suffix = args["backup_suffix"]
    backups = [
        Writes(p.path + suffix, p.before.encode("utf-8"))
        for p in patches
        if files[p.name]["backup"]["kind"] == "missing"
    ]
    return (*(Writes(p.path, p.after.encode("utf-8")) for p in patches), *backups)


def _plan_restored(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    named = [edits.name for edits in requested_edits(args)]
    answer = describe(ctx, args, named)
    names = [n for n in named if n in answer["backed_up"]] if named else answer["backed_up"]
    if not names:
        return Unchanged(f"no {args['backup_suffix']} originals to restore", {"restored": []})
    diffs, fingerprint = [], {}
    for name in names:
        path = posixpath.join(args["path"], name)
        current = ctx.conn.read_file(path) or b""
        original = ctx.conn.read_file(path + args["backup_suffix"]) or b""
        diffs.append(Diff(path, current.decode("utf-8", "replace"), original.decode("utf-8", "replace")))
        fingerprint[f"file:{path}"] = content_digest(current)
        fingerprint[f"file:{path}{args['backup_suffix']}"] = content_digest(original)
    suffix = args["backup_suffix"]
    effects = [
        effect for d in diffs for effect in (Writes(d.label, d.after.encode("utf-8")), Removes(d.label + suffix))
    ]
    return Change(
        summary="restore " + ", ".join(names),
        diffs=tuple(diffs),
        payload={"op": "restore", "names": names},
        fingerprint=fingerprint,
        effects=tuple(effects),
    )


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    if args["state"] == "restored":
        return _plan_restored(ctx, args)
    return _plan_patched(ctx, args)


def _apply_patch(ctx: TaskContext, args: Mapping[str, Any], patch: FilePatch) -> None:
    try:
        ctx.conn.run_probe(
            "model_fileops",
            {"op": "backup", "path": patch.path, "backup_suffix": args["backup_suffix"]},
        )
        # write_file renames a temp file over the path: a symlink is replaced, not followed.
        ctx.conn.write_file(patch.path, patch.after.encode("utf-8"))
    except (OSError, ProbeError) as exc:
        raise TaskFailed(
            f"cannot patch {patch.path}: {exc}; the file is unchanged (become: true if root owns it)"
        ) from exc


def restore_original(ctx: TaskContext, path: str, backup_suffix: str) -> bool:
    """Rename the backup over ``path``: the original back as it was (a symlink as the same
    link), the backup consumed. False when there was no backup."""
    answer = ctx.conn.run_probe("model_fileops", {"op": "restore", "path": path, "backup_suffix": backup_suffix})
    return bool(answer["restored"])


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    if change.payload["op"] == "restore":
        for name in change.payload["names"]:
            restore_original(ctx, posixpath.join(args["path"], name), args["backup_suffix"])
        return Result(
            changed=True, msg=change.summary, diffs=change.diffs, data={"restored": list(change.payload["names"])}
        )
    patches: list[FilePatch] = list(change.payload["patches"])
    for patch in patches:
        _apply_patch(ctx, args, patch)
    warnings = tuple(
        f"{p.path} was not formatted the way json.dumps writes it; it was reformatted" for p in patches if p.reformatted
    ) + tuple(
        f"{p.path} was a symlink; replaced by a patched regular file (the target is untouched)"
        for p in patches
        if p.was_symlink
    )
    return Result(
        changed=True,
        msg=change.summary,
        diffs=change.diffs,
        data={"files": {p.name: list(p.keys) for p in patches}},
        warnings=warnings,
    )
