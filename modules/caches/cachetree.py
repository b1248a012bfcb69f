"""A captured engine cache: its manifest (the key and each file's size and sha256), and
what a host's cache tree holds now.

The manifest lives at the top of the cache root, ``.rigger-engine-cache.json``; the scan
never lists it as a cache file. Names in a manifest are judged as model file names are
(relative, no ``..``, no empty segment: modules/checkpoints/manifest.py) before any
host's path is made from them.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.module_api import ScopedConnection, TaskContext, TaskFailed
from modules.checkpoints.manifest import HubFile, check_names, human_bytes

MANIFEST = ".rigger-engine-cache.json"
FORMAT = 1


@dataclass(frozen=True)
class CacheManifest:
    key: Mapping[str, Any]
    files: tuple[HubFile, ...]
    captured_on: str

    def __post_init__(self) -> None:  # the one way a file list reaches the module
        check_names(self.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def describe(self) -> str:
        return f"{len(self.files)} files ({human_bytes(self.total_bytes)})"

    def to_json(self) -> str:
        files = [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in self.files]
        body = {"format": FORMAT, "key": dict(self.key), "captured_on": self.captured_on, "files": files}
        return json.dumps(body, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: bytes, where: str) -> CacheManifest:
        try:
            body = json.loads(text)
            if body.get("format") != FORMAT:
                raise ValueError(f"format {body.get('format')!r}, this rigger reads {FORMAT}")
            files = tuple(HubFile(str(f["name"]), int(f["size"]), str(f["sha256"])) for f in body["files"])
            return cls(dict(body["key"]), files, str(body.get("captured_on") or ""))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TaskFailed(f"{where}: not a cache manifest rigger can read ({exc}); capture again") from exc

    @classmethod
    def from_scan(cls, key: Mapping[str, Any], found: Scan, host: str) -> CacheManifest:
        files = tuple(HubFile(name, f["size"], f["sha256"]) for name, f in sorted(found.files.items()))
        return cls(key, files, host)


@dataclass(frozen=True)
class Scan:
    """The ``engine_cache_scan`` answer: name -> {size, sha256}, and what was not listed."""

    exists: bool
    files: Mapping[str, Mapping[str, Any]]
    links: tuple[str, ...]
    others: tuple[str, ...]
    parts: tuple[str, ...]

    def matches(self, file: HubFile) -> bool:
        have = self.files.get(file.name)
        return have is not None and have["size"] == file.size and have["sha256"] == file.sha256

    def notes(self, host: str, root: str) -> list[str]:
        out = []
        if self.links:
            out.append(f"{host}: {len(self.links)} symlinks under {root} not followed nor captured: {self.links[:3]}")
        if self.others:
            out.append(f"{host}: {len(self.others)} entries under {root} are not regular files: {self.others[:3]}")
        return out


def scan(conn: ScopedConnection, root: str) -> Scan:
    answer = conn.run_probe("engine_cache_scan", {"root": root, "skip": [MANIFEST]})
    return Scan(
        bool(answer["exists"]),
        answer["files"],
        tuple(answer["links"]),
        tuple(answer["others"]),
        tuple(answer["parts"]),
    )


def manifest_path(root: str) -> str:
    return posixpath.join(root, MANIFEST)


def read_manifest(conn: ScopedConnection, root: str) -> CacheManifest | None:
    data = conn.read_file(manifest_path(root))
    if data is None:
        return None
    return CacheManifest.from_json(data, f"{conn.host_name}:{manifest_path(root)}")


def root_of(args: Mapping[str, Any], host: str) -> str:
    """The host's cache root (``host_cache_root`` or ``cache_root``), absolute."""
    root = str(args["host_cache_root"].get(host, args["cache_root"]))
    if not root.startswith("/") or root.rstrip("/") == "":
        raise TaskFailed(f"engine_cache: the cache root of {host} must be an absolute directory, not {root!r}")
    return root.rstrip("/")


def refuse_unsafe_root(ctx: TaskContext, root: str) -> None:
    """The root judged by the guarded write primitive (a link another user made is refused)."""
    where = manifest_path(root)
    refusal = ctx.conn.run_probe("path_info", {"paths": [where]})["paths"][where]["write_refusal"]
    if refusal:
        raise TaskFailed(f"refusing cache root {root} on {ctx.host_name}: {refusal}")
