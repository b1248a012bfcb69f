"""Ensure a hub model snapshot is present and intact in a directory on the host.

The download runs ON the host with its own huggingface_hub (`python`), so weights never
pass through the controller. Before downloading, the hub's file list (sizes, sha256)
is read and the disk under `local_dir` is checked for room. After, every file must
have the hub's size (and sha256 with `verify: sha256`; git blob id for small files),
every shard `model.safetensors.index.json` names must be in the set, and every
safetensors header must agree with its file size (8 + header length + last offset). A
partial or corrupt snapshot is never reported ok: bad files are fetched again;
interrupted downloads resume.

A manifest (`.rigger-manifest.json`: commit, files, sizes, hashes) is written last, so a
later run pinned to that commit verifies locally with no network. A branch `revision`
works but warns that the run is not reproducible (pin the commit it reports). The token
is `HF_TOKEN` from the controller's environment: it travels on stdin, never in argv or
output. `HF_ENDPOINT` (or `endpoint`) selects a mirror; `HF_HUB_*` variables pass through.
For a group of hosts, `spread_model` fetches each file from the hub once and copies it
host to host (docs/fleet-artifacts.md).
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.module_api import Change, Diff, Fills, ProbeError, Result, TaskContext, TaskFailed, Unchanged
from modules.checkpoints.manifest import (
    MANIFEST_NAME,
    Listing,
    Manifest,
    UnsafeName,
    human_bytes,
    is_commit,
)

PASS_THROUGH_ENV = (
    "HF_ENDPOINT",
    "HF_HUB_DISABLE_XET",
    "HF_HUB_ETAG_TIMEOUT",
    "HF_HUB_DOWNLOAD_TIMEOUT",
    "HF_HUB_OFFLINE",
)
PROGRESS_INTERVAL_S = 2.0
MIB = 2**20

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["repo_id", "local_dir"],
    "properties": {
        "repo_id": {
            "type": "string",
            "description": "The hub repository, e.g. nvidia/Kimi-K2.5-NVFP4.",
        },
        "revision": {
            "type": "string",
            "default": "main",
            "description": "A commit sha (pins the run) or a branch/tag (warns: not reproducible).",
        },
        "local_dir": {"type": "string", "description": "The directory on the host to fill."},
        "allow_patterns": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "default": None,
            "description": "Only files matching one of these glob patterns.",
        },
        "ignore_patterns": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "default": None,
            "description": "Skip files matching any of these glob patterns.",
        },
        "max_workers": {
            "type": "integer",
            "minimum": 1,
            "default": 8,
            "description": "Files downloaded in parallel.",
        },
        "verify": {
            "type": "string",
            "enum": ["size", "sha256"],
            "default": "size",
            "description": "`size`: sizes and safetensors headers; `sha256`: also hash every "
            "file (slow for large models: every run reads all bytes).",
        },
        "python": {
            "type": "string",
            "default": "python3",
            "description": "The host's Python interpreter that has huggingface_hub.",
        },
        "endpoint": {
            "type": ["string", "null"],
            "default": None,
            "description": "Hub URL; default HF_ENDPOINT from the environment, else the hub.",
        },
        "reserve_free_mib": {
            "type": "integer",
            "minimum": 0,
            "default": 1024,
            "description": "Disk space (MiB) to leave free under local_dir after downloading.",
        },
    },
}


@dataclass(frozen=True)
class Expected:
    listing: Listing
    source: str  # "hub" or "manifest"
    notes: tuple[str, ...] = ()


class HubUnreachable(Exception):
    """Check mode on a host that cannot reach the hub: the step is named, not the run failed."""


# How huggingface_hub (httpx, requests) says the hub was not reached at all, as opposed to
# answering no (a wrong repo id, a missing token), which still fails the step.
_UNREACHABLE = re.compile(
    r"Connect(ion)?Error|ConnectTimeout|ReadTimeout|TimeoutException|Connection refused|Network is unreachable"
    r"|Name or service not known|Temporary failure in name resolution|NameResolution|No route to host"
    r"|Max retries exceeded|ProxyError|OfflineModeIsEnabled"
)


def _hub_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """Controller-side HF settings for the host program; the token goes on stdin."""
    return {
        "repo_id": args["repo_id"],
        "endpoint": args["endpoint"] or os.environ.get("HF_ENDPOINT"),
        "env": {k: os.environ[k] for k in PASS_THROUGH_ENV if k in os.environ},
        "token": os.environ.get("HF_TOKEN"),
    }


def redact(text: str) -> str:
    token = os.environ.get("HF_TOKEN")
    return text.replace(token, "***") if token else text


def _manifest_path(args: Mapping[str, Any]) -> str:
    return posixpath.join(args["local_dir"], MANIFEST_NAME)


def refuse_unsafe_local_dir(ctx: TaskContext, args: Mapping[str, Any]) -> None:
    """Fail in the plan (check mode too) when local_dir is reached through a link another
    user made or is not absolute: the download would write wherever that link points. Judged
    by the guarded write primitive, as every file module judges its path."""
    where = _manifest_path(args)
    refusal = ctx.conn.run_probe("path_info", {"paths": [where]})["paths"][where]["write_refusal"]
    if refusal:
        raise TaskFailed(f"refusing local_dir {args['local_dir']}: {refusal}")


def read_manifest(ctx: TaskContext, args: Mapping[str, Any]) -> Manifest | None:
    try:
        data = ctx.conn.read_file(_manifest_path(args))
    except OSError as exc:
        raise TaskFailed(f"cannot read {_manifest_path(args)}: {exc.strerror or exc}") from exc
    try:
        return None if data is None else Manifest.parse(data)
    except UnsafeName as exc:
        raise TaskFailed(f"{_manifest_path(args)}: {exc}; remove the manifest to verify against the hub") from None


def hub_listing(ctx: TaskContext, args: Mapping[str, Any]) -> Listing:
    probe_args = {
        **_hub_args(args),
        "revision": args["revision"],
        "allow_patterns": args["allow_patterns"],
        "ignore_patterns": args["ignore_patterns"],
    }
    answer = ctx.conn.run_probe_under(args["python"], "model_hub_list", probe_args, timeout_s=ctx.timeout_s or 300)
    try:
        return Listing.from_probe(answer)
    except UnsafeName as exc:
        raise TaskFailed(f"{args['repo_id']}@{args['revision']}: {exc}; nothing was downloaded") from None


def expected_files(
    ctx: TaskContext, args: Mapping[str, Any], manifest: Manifest | None, check_mode: bool = False
) -> Expected:
    usable = manifest if manifest is not None and manifest.covers(args) else None
    if usable is not None and is_commit(args["revision"]):
        return Expected(usable.listing, "manifest")
    try:
        return Expected(hub_listing(ctx, args), "hub")
    except ProbeError as exc:
        reason = redact(str(exc)) + _install_hint(str(exc), args)
        if usable is None and check_mode and _UNREACHABLE.search(str(exc)):
            raise HubUnreachable(reason) from exc
        if usable is None:
            raise TaskFailed(f"cannot list {args['repo_id']}@{args['revision']}: {reason}") from exc
        note = (
            f"hub unreachable ({reason.splitlines()[0][:200]}); verified against the manifest of commit {usable.commit}"
        )
        return Expected(usable.listing, "manifest", (note,))


def _install_hint(error: str, args: Mapping[str, Any]) -> str:
    if "No module named 'huggingface_hub'" in error:
        return (
            f" (install huggingface_hub for {args['python']} on the host, or point "
            f"`python` at an interpreter that has it)"
        )
    return ""


def verify_local(ctx: TaskContext, args: Mapping[str, Any], listing: Listing, mode: str) -> dict[str, Any]:
    files = {f.name: f.expected() for f in listing.files}
    try:
        return ctx.conn.run_probe(
            "model_verify",
            {"op": "verify", "local_dir": args["local_dir"], "files": files, "verify": mode},
        )
    except ProbeError as exc:
        raise TaskFailed(f"cannot verify {args['local_dir']}: {exc}") from exc


def problems(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {name: r for name, r in report["files"].items() if r["status"] != "ok"}


def _describe(name: str, result: Mapping[str, Any]) -> str:
    detail = f" ({result['detail']})" if result.get("detail") else ""
    return f"{name}: {result['status']}{detail}"


def _check_disk(args: Mapping[str, Any], need: int, free: int) -> None:
    reserve = args["reserve_free_mib"] * MIB
    if free - need < reserve:
        raise TaskFailed(
            f"not enough disk under {args['local_dir']}: the download needs {need} bytes "
            f"({human_bytes(need)}) plus {human_bytes(reserve)} kept free, but only {free} "
            f"bytes ({human_bytes(free)}) are free",
            {"need_bytes": need, "free_bytes": free, "reserve_bytes": reserve},
        )


def _branch_warning(args: Mapping[str, Any], commit: str) -> tuple[str, ...]:
    if is_commit(args["revision"]):
        return ()
    return (f"revision {args['revision']!r} is not a commit: this run is not reproducible; pin revision: {commit}",)


def _unverified(args: Mapping[str, Any], reason: str) -> Change:
    """The plan of a step check mode cannot know: never "ok", never a download it promises."""
    return Change(
        summary=f"check {args['local_dir']} against {args['repo_id']}@{args['revision']}, but cannot verify"
        f" against the hub: not reached ({reason.splitlines()[0][:200]}); what it would download is known"
        " only after apply, which needs the hub",
        fingerprint={"hub": "not reached"},
    )


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    refuse_unsafe_local_dir(ctx, args)
    manifest = read_manifest(ctx, args)
    try:
        expected = expected_files(ctx, args, manifest, check_mode=bool(ctx.vars.get("ansible_check_mode")))
    except HubUnreachable as exc:
        return _unverified(args, str(exc))
    listing = expected.listing
    report = verify_local(ctx, args, listing, args["verify"])
    if report["index_problems"]:
        raise TaskFailed("the snapshot cannot be complete: " + "; ".join(report["index_problems"]))
    bad = problems(report)
    where = f"{args['repo_id']}@{listing.commit[:12]}"
    base = {"listing": listing, "notes": expected.notes, "verified": args["verify"]}
    if not bad:
        current = manifest is not None and manifest.records(args, listing)
        msg = (
            f"{len(listing.files)} files ({human_bytes(listing.total_bytes)}) of {where} "
            f"verified ({args['verify']}) in {args['local_dir']}"
        )
        if current:
            notes = (*expected.notes, *_branch_warning(args, listing.commit))
            return Unchanged("; ".join((msg, *notes)), _data(args, listing, [], notes))
        return Change(
            summary=f"record the manifest: {msg}",
            payload={**base, "fetch": [], "force": []},
            fingerprint={"commit": listing.commit},
        )
    fetch = sorted(bad)
    need = sum(listing.by_name()[name].size for name in fetch)
    _check_disk(args, need, report["free_bytes"])
    return Change(
        summary=f"download {len(fetch)} of {len(listing.files)} files ({human_bytes(need)}) "
        f"of {where} into {args['local_dir']}",
        diffs=(
            Diff(
                label=args["local_dir"],
                before="\n".join(_describe(n, bad[n]) for n in fetch) + "\n",
                after="\n".join(f"{n}: {listing.by_name()[n].size} bytes" for n in fetch) + "\n",
            ),
        ),
        payload={
            **base,
            "fetch": fetch,
            "force": [n for n in fetch if bad[n]["status"] != "missing"],
            "need_bytes": need,
        },
        fingerprint={
            "commit": listing.commit,
            **{f"file:{posixpath.join(args['local_dir'], n)}": _describe(n, bad[n]) for n in fetch},
        },
        effects=(Fills(args["local_dir"], f"{len(fetch)} downloaded files"),),
    )


def _data(args: Mapping[str, Any], listing: Listing, downloaded: list[str], notes: tuple[str, ...]) -> dict[str, Any]:
    return {
        "repo_id": args["repo_id"],
        "revision": args["revision"],
        "commit": listing.commit,
        "local_dir": args["local_dir"],
        "files": len(listing.files),
        "bytes": listing.total_bytes,
        "downloaded": downloaded,
        "verified": args["verify"],
        "manifest": _manifest_path(args),
        "notes": list(notes),
    }


def _report_progress(
    ctx: TaskContext, args: Mapping[str, Any], names: list[str], total: int, done: threading.Event
) -> None:
    started = time.monotonic()
    first: int | None = None
    while not done.wait(PROGRESS_INTERVAL_S):
        try:
            answer = ctx.conn.run_probe(
                "model_verify",
                {"op": "progress", "local_dir": args["local_dir"], "files": {name: {} for name in names}},
            )
        except Exception:  # progress is best effort; the download decides the outcome
            continue
        now = answer["bytes"]
        first = now if first is None else first
        rate = (now - first) / max(time.monotonic() - started, 1e-6)
        ctx.progress(
            f"{human_bytes(now)} / {human_bytes(total)} ({100 * now / max(total, 1):.0f}%) at {human_bytes(rate)}/s"
        )


def download(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> list[str]:
    listing: Listing = change.payload["listing"]
    names: list[str] = change.payload["fetch"]
    probe_args = {
        **_hub_args(args),
        "commit": listing.commit,
        "local_dir": args["local_dir"],
        "files": names,
        "force": change.payload["force"],
        "max_workers": args["max_workers"],
    }
    finished = threading.Event()
    reporter = threading.Thread(
        target=_report_progress, args=(ctx, args, names, change.payload["need_bytes"], finished), daemon=True
    )
    reporter.start()
    try:
        answer = ctx.conn.run_probe_under(args["python"], "model_hub_download", probe_args, timeout_s=ctx.timeout_s)
    except ProbeError as exc:
        raise TaskFailed(f"download of {args['repo_id']} failed: {redact(str(exc))}") from exc
    finally:
        finished.set()
        reporter.join()
    if answer["errors"]:
        detail = "; ".join(f"{n}: {e}" for n, e in sorted(answer["errors"].items()))
        raise TaskFailed(f"download of {args['repo_id']} failed: {redact(detail)}", {"errors": answer["errors"]})
    downloaded: list[str] = answer["downloaded"]
    return downloaded


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    listing: Listing = change.payload["listing"]
    downloaded = download(ctx, args, change) if change.payload["fetch"] else []
    report = verify_local(ctx, args, listing, args["verify"])
    bad = problems(report)
    if bad or report["index_problems"]:
        lines = [_describe(n, r) for n, r in sorted(bad.items())] + report["index_problems"]
        raise TaskFailed("the snapshot is still not intact after downloading: " + "; ".join(lines), {"problems": lines})
    manifest = Manifest.build(args, listing, args["verify"])
    try:
        ctx.conn.write_file(_manifest_path(args), manifest.to_json().encode())
    except (OSError, ProbeError) as exc:
        raise TaskFailed(f"files verified, but the manifest could not be written: {exc}") from exc
    notes: tuple[str, ...] = change.payload["notes"]
    return Result(
        changed=True,
        msg=change.summary,
        diffs=change.diffs,
        data=_data(args, listing, downloaded, notes),
        warnings=(*notes, *_branch_warning(args, listing.commit)),
    )
