"""ensure_model's local parts with no hub: the verify probe, the manifest, progress.

Real: the model_verify probe run through LocalConnection on real files, the manifest
code. No hub here (tests/integration/hub runs the module against a real olah mirror).
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import TaskContext, TaskFailed, Unchanged
from modules.checkpoints import ensure_model as mod
from modules.checkpoints.manifest import (
    HubFile,
    Listing,
    Manifest,
    UnsafeName,
    human_bytes,
    is_commit,
    repo_name_problem,
)

COMMIT = "2c06be8556499af9ac04bf57a2f9e9bbd5519f7d"


def shard(payload: bytes) -> bytes:
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(payload)], "data_offsets": [0, len(payload)]}}).encode()
    return struct.pack("<Q", len(header)) + header + payload


def verify(
    local_dir: Path, files: dict[str, bytes], mode: str = "size", expected: dict[str, Any] | None = None
) -> dict[str, Any]:
    wanted = expected or {
        name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "blob_id": None}
        for name, data in files.items()
    }
    conn = ScopedConnection(LocalConnection()).planning()
    return conn.run_probe(
        "model_verify", {"op": "verify", "local_dir": str(local_dir), "files": wanted, "verify": mode}
    )


def test_consistent_shards_and_index_verify_ok(tmp_path: Path) -> None:
    files = {"a.safetensors": shard(b"x" * 1000), "b.safetensors": shard(b"y" * 10)}
    files["model.safetensors.index.json"] = json.dumps(
        {"weight_map": {"t1": "a.safetensors", "t2": "b.safetensors"}}
    ).encode()
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    report = verify(tmp_path, files, "sha256")
    assert {r["status"] for r in report["files"].values()} == {"ok"}
    assert report["index_problems"] == [] and report["free_bytes"] > 0


def test_header_inconsistent_with_size_is_caught_even_when_size_matches(tmp_path: Path) -> None:
    data = shard(b"x" * 1000)
    header_len = struct.unpack("<Q", data[:8])[0]
    lying = data[: 8 + header_len].replace(b"1000]", b"1001]") + data[8 + header_len :]
    lying = struct.pack("<Q", header_len) + lying[8:]
    (tmp_path / "a.safetensors").write_bytes(lying)
    report = verify(tmp_path, {"a.safetensors": lying})
    assert report["files"]["a.safetensors"]["status"] == "header"
    assert "file has" in report["files"]["a.safetensors"]["detail"]


def test_missing_short_and_tampered_files(tmp_path: Path) -> None:
    good = shard(b"z" * 500)
    (tmp_path / "short.safetensors").write_bytes(good[:-1])
    tampered = good[:-1] + b"!"
    (tmp_path / "same.safetensors").write_bytes(tampered)
    files = {"short.safetensors": good, "same.safetensors": good, "gone.safetensors": good}
    by_size = verify(tmp_path, files, "size")["files"]
    assert by_size["gone.safetensors"]["status"] == "missing"
    assert by_size["short.safetensors"]["status"] == "size"
    assert by_size["same.safetensors"]["status"] == "ok"
    assert verify(tmp_path, files, "sha256")["files"]["same.safetensors"]["status"] == "sha256"


def test_small_git_files_checked_by_blob_id_with_sha256(tmp_path: Path) -> None:
    data = b'{"model_type": "llama"}\n'
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    (tmp_path / "config.json").write_bytes(data.replace(b"llama", b"LLAMA"))
    expected = {"config.json": {"size": len(data), "sha256": None, "blob_id": blob}}
    report = verify(tmp_path, {}, "sha256", expected)
    assert report["files"]["config.json"]["status"] == "sha256"
    (tmp_path / "config.json").write_bytes(data)
    assert verify(tmp_path, {}, "sha256", expected)["files"]["config.json"]["status"] == "ok"


def test_index_naming_a_shard_outside_the_set(tmp_path: Path) -> None:
    files = {
        "a.safetensors": shard(b"a"),
        "model.safetensors.index.json": json.dumps(
            {"weight_map": {"t": "a.safetensors", "u": "b.safetensors"}}
        ).encode(),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    problems = verify(tmp_path, files)["index_problems"]
    assert problems == ["model.safetensors.index.json names b.safetensors, which is not in the file set"]


def test_manifest_round_trip_and_coverage() -> None:
    listing = Listing(COMMIT, (HubFile("a", 3, "ab" * 32, "c" * 40),))
    args = {"repo_id": "o/r", "revision": "main", "allow_patterns": ["*.json", "*.bin"], "ignore_patterns": None}
    manifest = Manifest.build(args, listing, "size")
    parsed = Manifest.parse(manifest.to_json().encode())
    assert parsed == manifest
    assert parsed.covers(args) and parsed.covers({**args, "revision": COMMIT})
    assert parsed.covers({**args, "allow_patterns": ["*.bin", "*.json"]})
    assert not parsed.covers({**args, "revision": "dev"})
    assert not parsed.covers({**args, "allow_patterns": None})
    assert parsed.records({**args, "verify": "size"}, listing)
    assert not parsed.records({**args, "verify": "sha256"}, listing)
    assert Manifest.build(args, listing, "sha256").records({**args, "verify": "size"}, listing)
    assert not parsed.records({**args, "verify": "size"}, Listing(COMMIT, ()))
    assert Manifest.parse(b"{not json") is None
    assert Manifest.parse(b'{"format": 99}') is None
    assert is_commit(COMMIT) and not is_commit("main")
    assert human_bytes(579820000000) == "540.0 GiB" and human_bytes(12) == "12 B"


def test_progress_reports_bytes_and_rate_from_partial_downloads(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(mod, "PROGRESS_INTERVAL_S", 0.05)
    partial = tmp_path / ".cache" / "huggingface" / "download"
    partial.mkdir(parents=True)
    messages: list[str] = []
    ctx = TaskContext("localhost", ScopedConnection(LocalConnection()), {}, {}, progress=messages.append)
    done = threading.Event()
    reporter = threading.Thread(
        target=mod._report_progress, args=(ctx, {"local_dir": str(tmp_path)}, ["w.bin"], 4096, done)
    )
    reporter.start()
    with open(partial / "abc123.etag.incomplete", "wb") as handle:
        for _ in range(4):
            handle.write(b"\0" * 1024)
            handle.flush()
            time.sleep(0.15)
    done.set()
    reporter.join()
    assert messages, "no progress was reported"
    assert messages[-1].startswith("4.0 KiB / 4.0 KiB (100%) at ")
    assert messages[-1].endswith("/s")


def hub_args(tmp_path: Path, python: str, endpoint: str | None = None) -> dict[str, Any]:
    return {
        "repo_id": "o/r",
        "revision": "main",
        "local_dir": str(tmp_path / "m"),
        "allow_patterns": None,
        "ignore_patterns": None,
        "max_workers": 1,
        "verify": "size",
        "python": python,
        "endpoint": endpoint,
        "reserve_free_mib": 1,
    }


UNSAFE_NAMES = ["", "/etc/cron.d/x", "../x", "a/../../x", "a//b", "a/", "./a", "a/./b", "a\\b", "a\0b", 7]


@pytest.mark.parametrize("name", UNSAFE_NAMES, ids=repr)
def test_a_file_name_that_could_leave_local_dir_is_refused_from_the_hub_and_from_a_manifest(name: object) -> None:
    """Real: the manifest and listing code. A hub (or a mirror, or an edited manifest) naming a
    path outside local_dir is refused before anything is read or downloaded by that name."""
    assert repo_name_problem(name) is not None
    entry = {"name": name, "size": 1, "sha256": None, "blob_id": "c" * 40}
    with pytest.raises(UnsafeName, match="not a plain relative path"):
        Listing.from_probe({"commit": COMMIT, "files": [entry]})
    body = {"format": 1, "repo_id": "o/r", "revision": COMMIT, "commit": COMMIT, "allow_patterns": [],
            "ignore_patterns": [], "files": [entry], "verified": "size"}  # fmt: skip
    with pytest.raises(UnsafeName):
        Manifest.parse(json.dumps(body).encode())


def test_plain_names_in_subdirectories_are_kept() -> None:
    for name in ("config.json", "a/b/model-00001-of-00119.safetensors", ".gitattributes", "a..b", "..a"):
        assert repo_name_problem(name) is None, name


def test_a_manifest_on_disk_naming_a_path_outside_local_dir_fails_the_plan(tmp_path: Path) -> None:
    """Real: the module's plan on the local connection, a manifest file written as an edited
    one would be. Failing (not ignoring the manifest) keeps the bad name in front of the operator."""
    args = hub_args(tmp_path, sys.executable, "http://127.0.0.1:9")
    listing = Listing(COMMIT, (HubFile("config.json", 2, None, "c" * 40),))
    body = json.loads(Manifest.build({**args, "revision": COMMIT}, listing, "size").to_json())
    body["files"][0]["name"] = "../../etc/cron.d/job"
    Path(args["local_dir"]).mkdir()
    (Path(args["local_dir"]) / ".rigger-manifest.json").write_text(json.dumps(body))
    ctx = TaskContext("localhost", ScopedConnection(LocalConnection()).planning(), {}, {"ansible_check_mode": True})
    bad_name = r"refusing the repository file name .../../etc/cron.d/job.*remove the manifest"
    with pytest.raises(TaskFailed, match=bad_name):
        mod.plan(ctx, {**args, "revision": COMMIT})


def test_host_python_without_huggingface_hub_fails_with_a_hint(tmp_path: Path) -> None:
    """Real: an interpreter without huggingface_hub (a bare venv), run as the host python."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    conn = ScopedConnection(LocalConnection()).planning()
    ctx = TaskContext("localhost", conn, {}, {"ansible_check_mode": True})
    with pytest.raises(TaskFailed, match=r"install huggingface_hub for .*bare/bin/python"):
        mod.plan(ctx, hub_args(tmp_path, str(venv / "bin" / "python")))


# Real: huggingface_hub (this interpreter's) asking an endpoint where nothing listens.
UNREACHABLE = "http://127.0.0.1:9"


def test_check_mode_names_an_unreachable_hub_on_the_step_instead_of_failing(tmp_path: Path) -> None:
    """A Kimi plan on a host that cannot reach the hub failed as a whole at ensure_model."""
    ctx = TaskContext("localhost", ScopedConnection(LocalConnection()).planning(), {}, {"ansible_check_mode": True})
    change = mod.plan(ctx, hub_args(tmp_path, sys.executable, UNREACHABLE))
    assert not isinstance(change, Unchanged), "never ok: nothing was verified"
    assert "cannot verify against the hub: not reached" in change.summary and "Connection refused" in change.summary
    assert change.payload.get("fetch") is None, "no download is promised"


def test_applying_with_an_unreachable_hub_still_fails(tmp_path: Path) -> None:
    ctx = TaskContext("localhost", ScopedConnection(LocalConnection()).planning(), {}, {"ansible_check_mode": False})
    with pytest.raises(TaskFailed, match=r"cannot list o/r@main: .*Connection refused"):
        mod.plan(ctx, hub_args(tmp_path, sys.executable, UNREACHABLE))
