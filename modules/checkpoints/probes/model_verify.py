"""Verify a downloaded model directory against its expected file list (read-only).

args: {"op": "verify" | "progress", "local_dir": str,
       "files": {name: {"size": int, "sha256": str|None, "blob_id": str|None}},
       "verify": "size" | "sha256"}
verify: each file present as a regular file with the expected size; with "sha256",
LFS files hashed against their sha256 and small git files against their git blob id;
every ``*.safetensors`` header consistent with the file size (8 + header length + last
data offset); every shard a ``*.safetensors.index.json`` names present. Also the free
space under local_dir. progress: bytes present so far, partial downloads included.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import Any

CHUNK = 8 * 2**20
MAX_HEADER = 100 * 2**20
PARTIAL_DIR = os.path.join(".cache", "huggingface", "download")


def safetensors_problem(path: str, size: int) -> str | None:
    """None when the header agrees with the file size, else what is wrong."""
    if size < 8:
        return "shorter than the 8-byte header length"
    with open(path, "rb") as handle:
        (header_len,) = struct.unpack("<Q", handle.read(8))
        if header_len > min(size - 8, MAX_HEADER):
            return f"header length {header_len} does not fit in {size} bytes"
        try:
            header = json.loads(handle.read(header_len))
        except ValueError:
            return "header is not valid JSON"
    ends = [
        entry["data_offsets"][1]
        for key, entry in header.items()
        if key != "__metadata__" and isinstance(entry, dict) and "data_offsets" in entry
    ]
    expected = 8 + header_len + max(ends, default=0)
    if expected != size:
        return f"header says {expected} bytes (8 + {header_len} + {max(ends, default=0)}), file has {size}"
    return None


def file_digest(path: str, git_blob: bool = False) -> str:
    digest = hashlib.sha1() if git_blob else hashlib.sha256()
    if git_blob:
        digest.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_file(path: str, expected: dict[str, Any], mode: str) -> dict[str, Any]:
    if not os.path.lexists(path):
        return {"status": "missing"}
    if os.path.islink(path) or not os.path.isfile(path):
        return {"status": "not_a_file"}
    size = os.path.getsize(path)
    if size != expected["size"]:
        return {"status": "size", "detail": f"{size} bytes, expected {expected['size']}", "size": size}
    answer = {"status": "ok", "size": size}
    if mode == "sha256" and expected.get("sha256"):
        answer["sha256"] = file_digest(path)
        if answer["sha256"] != expected["sha256"]:
            detail = f"sha256 {answer['sha256']}, expected {expected['sha256']}"
            return {"status": "sha256", "detail": detail, "size": size}
    elif mode == "sha256" and expected.get("blob_id"):
        blob = file_digest(path, git_blob=True)
        if blob != expected["blob_id"]:
            detail = f"git blob {blob}, expected {expected['blob_id']}"
            return {"status": "sha256", "detail": detail, "size": size}
    if path.endswith(".safetensors"):
        problem = safetensors_problem(path, size)
        if problem:
            return {"status": "header", "detail": problem, "size": size}
    return answer


def index_problems(local_dir: str, files: dict[str, Any], results: dict[str, Any]) -> list[str]:
    """Shards an index names but the file set lacks; a config-only set is left alone."""
    problems: list[str] = []
    if not any(name.endswith(".safetensors") for name in files):
        return problems
    for name in files:
        if not name.endswith(".safetensors.index.json") or results[name]["status"] != "ok":
            continue
        try:
            with open(os.path.join(local_dir, name), encoding="utf-8") as handle:
                shards = set(json.load(handle).get("weight_map", {}).values())
        except (OSError, ValueError) as exc:
            problems.append(f"{name} unreadable: {exc}")
            continue
        prefix = os.path.dirname(name)
        for shard in sorted(shards):
            shard_name = os.path.join(prefix, shard) if prefix else shard
            if shard_name not in files:
                problems.append(f"{name} names {shard}, which is not in the file set")
    return problems


def free_bytes(path: str) -> int:
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    stat = os.statvfs(probe)
    return stat.f_bavail * stat.f_frsize


def progress(local_dir: str, files: dict[str, Any]) -> dict[str, Any]:
    """Bytes of the wanted files present, plus huggingface_hub's partial downloads."""
    done = 0
    for name in files:
        try:
            done += os.path.getsize(os.path.join(local_dir, name))
        except OSError:
            continue
    for directory, _, names in os.walk(os.path.join(local_dir, PARTIAL_DIR)):
        for name in names:
            if name.endswith(".incomplete"):
                try:
                    done += os.path.getsize(os.path.join(directory, name))
                except OSError:
                    continue
    return {"bytes": done}


def main(args: dict[str, Any]) -> dict[str, Any]:
    local_dir, files = args["local_dir"], args["files"]
    if args.get("op") == "progress":
        return progress(local_dir, files)
    results = {
        name: check_file(os.path.join(local_dir, name), expected, args.get("verify", "size"))
        for name, expected in files.items()
    }
    return {
        "dir_exists": os.path.isdir(local_dir),
        "files": results,
        "index_problems": index_problems(local_dir, files, results),
        "free_bytes": free_bytes(local_dir),
    }
