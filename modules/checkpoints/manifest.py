"""The record ensure_model leaves in a model directory, so later runs verify offline.

``<local_dir>/.rigger-manifest.json`` holds the repository, the requested revision, the
commit it resolved to, the file patterns, and every file's size and hub hashes (sha256
for LFS files, the git blob id for the rest).

Every file name, from the hub's listing or from a manifest on disk, must be a plain
relative POSIX path (``repo_name_problem``): a name that could leave ``local_dir`` is
refused before anything is read or downloaded by it (the host's huggingface_hub may be
too old to check).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

MANIFEST_NAME = ".rigger-manifest.json"
FORMAT = 1
_COMMIT = re.compile(r"^[0-9a-f]{40}\Z")


def is_commit(revision: str) -> bool:
    return bool(_COMMIT.match(revision))


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


class UnsafeName(ValueError):
    """A repository file name that is not a plain relative path; the message says why."""


def repo_name_problem(name: object) -> str | None:
    """Why ``name`` is not a plain relative POSIX path inside the model directory, or None.

    Refused: not a string, empty, absolute, an empty, ``.`` or ``..`` segment (``a//b``,
    ``a/``, ``./a``, ``../a``), a backslash (a separator on Windows, an escape on some
    mirrors) or a NUL byte."""
    if not isinstance(name, str):
        return f"not a string ({type(name).__name__})"
    if not name:
        return "it is empty"
    if "\0" in name:
        return "it contains a NUL byte"
    if "\\" in name:
        return "it contains a backslash"
    if name.startswith("/"):
        return "it is absolute"
    for segment in name.split("/"):
        if segment in ("", ".", ".."):
            return f"it has {'an empty' if not segment else repr(segment)} path segment"
    return None


def check_names(files: Sequence[HubFile]) -> None:
    """Raise UnsafeName for the first file whose name could leave the model directory."""
    for f in files:
        problem = repo_name_problem(f.name)
        if problem is not None:
            raise UnsafeName(f"refusing the repository file name {f.name!r}: {problem} (not a plain relative path)")


@dataclass(frozen=True)
class HubFile:
    name: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None

    def expected(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256, "blob_id": self.blob_id}


@dataclass(frozen=True)
class Listing:
    """What the hub says a revision holds (after allow/ignore patterns)."""

    commit: str
    files: tuple[HubFile, ...]

    def __post_init__(self) -> None:  # the one way a file list reaches the module
        check_names(self.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def by_name(self) -> dict[str, HubFile]:
        return {f.name: f for f in self.files}

    @classmethod
    def from_probe(cls, answer: Mapping[str, Any]) -> Listing:
        return cls(answer["commit"], tuple(HubFile(**f) for f in answer["files"]))


def _patterns(value: Sequence[str] | None) -> list[str]:
    return sorted(value or [])


@dataclass(frozen=True)
class Manifest:
    repo_id: str
    revision: str
    commit: str
    allow_patterns: tuple[str, ...]
    ignore_patterns: tuple[str, ...]
    files: tuple[HubFile, ...]
    verified: str

    def __post_init__(self) -> None:  # a manifest on disk may have been edited by anyone
        check_names(self.files)

    @property
    def listing(self) -> Listing:
        return Listing(self.commit, self.files)

    def covers(self, args: Mapping[str, Any]) -> bool:
        """Same repository, file patterns and revision (by name or by commit)."""
        return (
            self.repo_id == args["repo_id"]
            and list(self.allow_patterns) == _patterns(args["allow_patterns"])
            and list(self.ignore_patterns) == _patterns(args["ignore_patterns"])
            and args["revision"] in (self.revision, self.commit)
        )

    def records(self, args: Mapping[str, Any], listing: Listing) -> bool:
        """Already says what a run with ``args`` would write (a sha256 record covers size)."""
        return (
            self.covers(args)
            and self.commit == listing.commit
            and self.files == listing.files
            and self.verified in (args["verify"], "sha256")
        )

    def to_json(self) -> str:
        body = {"format": FORMAT, "written_by": "rigger ensure_model", **asdict(self)}
        return json.dumps(body, indent=2) + "\n"

    @classmethod
    def build(cls, args: Mapping[str, Any], listing: Listing, verified: str) -> Manifest:
        return cls(
            repo_id=args["repo_id"],
            revision=args["revision"],
            commit=listing.commit,
            allow_patterns=tuple(_patterns(args["allow_patterns"])),
            ignore_patterns=tuple(_patterns(args["ignore_patterns"])),
            files=listing.files,
            verified=verified,
        )

    @classmethod
    def parse(cls, data: bytes) -> Manifest | None:
        """None for anything that is not a manifest this version wrote."""
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT:
                return None
            return cls(
                repo_id=body["repo_id"],
                revision=body["revision"],
                commit=body["commit"],
                allow_patterns=tuple(body["allow_patterns"]),
                ignore_patterns=tuple(body["ignore_patterns"]),
                files=tuple(HubFile(**f) for f in body["files"]),
                verified=body["verified"],
            )
        except UnsafeName:
            raise  # not ignored: a manifest naming a path outside local_dir fails the task
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
