"""List a hub repository's files at a revision: commit sha, sizes, sha256 (read-only).

Runs under an interpreter that has huggingface_hub (the only probe that needs it).
args: {repo_id, revision, endpoint, env: {HF_*: value}, token, allow_patterns,
ignore_patterns}. The token arrives on stdin with the args, never in argv.
Answers {"commit": sha, "files": [{"name", "size", "sha256" (LFS only), "blob_id"}]}.
"""

from __future__ import annotations

import os
from typing import Any


def prepare_env(args: dict[str, Any]) -> None:
    """HF_* variables the controller passes (the host's own win), set before importing."""
    for key, value in (args.get("env") or {}).items():
        os.environ.setdefault(key, value)
    if args.get("endpoint"):
        os.environ["HF_ENDPOINT"] = args["endpoint"]
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def main(args: dict[str, Any]) -> dict[str, Any]:
    prepare_env(args)
    if args.get("_prepare_only"):
        return {}
    from huggingface_hub import HfApi
    from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]  # public, not re-exported

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=args.get("token") or None)
    commit = api.model_info(args["repo_id"], revision=args["revision"]).sha
    entries = [
        entry
        for entry in api.list_repo_tree(args["repo_id"], revision=commit, recursive=True)
        if hasattr(entry, "size") and hasattr(entry, "blob_id")
    ]
    chosen = filter_repo_objects(
        entries,
        allow_patterns=args.get("allow_patterns") or None,
        ignore_patterns=args.get("ignore_patterns") or None,
        key=lambda entry: entry.path,
    )
    files = [_file(entry) for entry in chosen]
    return {"commit": commit, "files": sorted(files, key=lambda f: f["name"])}


def _file(entry: Any) -> dict[str, Any]:
    """One file of the listing (entries without size or blob id were left out above)."""
    lfs = getattr(entry, "lfs", None)
    return {"name": entry.path, "size": entry.size, "sha256": lfs.sha256 if lfs else None, "blob_id": entry.blob_id}
