"""Probe plumbing: the real bootstrap program run by a real python, as over SSH."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from engine import probes
from engine.connection.local import LocalConnection
from engine.probes import fileio


def test_program_runs_standalone_and_parses():
    proc = subprocess.run(
        [sys.executable, "-c", probes.program("host")], input=json.dumps({}), capture_output=True, text=True, timeout=30
    )
    answer = probes.parse_output("host", proc.stdout, proc.stderr)
    assert answer["cpu_count"] >= 1 and "gpus" not in answer  # GPU facts come from the GPU room


def test_a_room_probe_and_what_it_uses_run_standalone():
    """gpu_facts lives in modules/gpu/probes/ and USES gpu_health -> gpus, health_parse; gpus -> nvsmi,
    procs: the bundle holds them all."""
    proc = subprocess.run(
        [sys.executable, "-c", probes.program("gpu_facts")],
        input=json.dumps({}),
        capture_output=True,
        text=True,
        timeout=30,
    )
    answer = probes.parse_output("gpu_facts", proc.stdout, proc.stderr)
    assert set(probes.closure("gpu_facts")) == {"gpu_facts", "gpu_health", "gpus", "health_parse", "nvsmi", "procs"}
    assert "gpu_count" in answer and answer["shm"]["path"] == "/dev/shm"


def test_gathered_facts_keep_the_names_playbooks_use():
    """Real: both probes on this machine; the engine merges the GPU room's facts into its own."""
    from engine.facts import gather

    facts = gather(LocalConnection()).own
    assert {"hostname", "cpu_count", "gpus", "gpu_count", "gpu_backend", "shm", "cuda_version"} <= set(facts)


def test_probe_names_are_unique_across_engine_and_rooms():
    paths = probes.probe_paths()
    assert paths["procs"].parent.name == "probes" and paths["procs"].parent.parent.name == "engine"
    assert paths["vllm_launch"].parts[-4:-1] == ("modules", "serving", "probes")


def test_marker_survives_noise_before_it():
    out = "warning: something\n\x0c form feed\n" + probes.RESULT_MARKER + '{"ok": {"a": 1}}\n'
    assert probes.parse_output("x", out, "") == {"a": 1}


def test_probe_errors_are_reported_not_raised_raw():
    with pytest.raises(probes.ProbeError, match="remove_path failed"):
        probes.parse_output("remove_path", probes.RESULT_MARKER + '{"error": "OSError: nope"}\n', "")


def test_in_process_and_standalone_agree(tmp_path):
    (tmp_path / "f").write_text("abc")
    args = {"paths": [str(tmp_path / "f")]}
    local = LocalConnection().run_probe("path_info", args)
    proc = subprocess.run(
        [sys.executable, "-c", probes.program("path_info")],
        input=json.dumps(args),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert probes.parse_output("path_info", proc.stdout, proc.stderr)["paths"] == local["paths"]


def test_mutating_probes_are_declared():
    assert probes.probe_mutates("remove_path") and probes.probe_mutates("fileio")
    assert not probes.probe_mutates("path_info") and not probes.probe_mutates("host")


def test_fileio_chunked_write_keeps_the_owner_and_refuses_a_target_swapped_meanwhile(tmp_path):
    """What a big write over SSH runs in the remote python, request by request (one
    process keeps the descriptors). Real: fileio's ops on real files, chowned as root."""

    def op(name: str, **args):  # type: ignore[no-untyped-def]
        return fileio.main({"op": name, "path": str(target), **args})

    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    os.chown(target, 4242, 4243)
    target.chmod(0o640)
    temp = op("write_open")["temp"]
    for part in (b"a" * 10, b"b" * 5):
        op("write_chunk", temp=temp, data=base64.b64encode(part).decode())
    op("write_commit", temp=temp)
    st = target.stat()
    assert target.read_bytes() == b"a" * 10 + b"b" * 5 and (st.st_uid, st.st_gid, st.st_mode & 0o777) == (
        4242,
        4243,
        0o640,
    )
    first = op("read_part", offset=0, length=4)
    rest = op("read_part", offset=4, length=100)
    assert base64.b64decode(first["data"]) + base64.b64decode(rest["data"]) == target.read_bytes()
    assert first["id"] == rest["id"] and first["size"] == 15

    temp = op("write_open")["temp"]
    target.rename(tmp_path / "moved")
    target.write_bytes(b"planted")
    with pytest.raises(fileio.Refused, match="replaced while it was being written"):
        op("write_commit", temp=temp)
    assert target.read_bytes() == b"planted" and sorted(p.name for p in tmp_path.iterdir()) == ["model.bin", "moved"]


@pytest.mark.parametrize(
    ("op", "args", "refusal"),
    [
        ("read_part", {"offset": -1, "length": 4}, "outside 0..4194304"),
        ("read_range", {"offset": -1, "length": 4}, "outside 0..4194304"),
        ("read_part", {"offset": 0, "length": fileio.MAX_RANGE_BYTES + 1}, "outside 0..4194304"),
        ("read_range", {"offset": 0, "length": fileio.MAX_RANGE_BYTES + 1}, "outside 0..4194304"),
        ("read_part", {"offset": 0, "length": 4, "max_bytes": 9}, "over the limit of 9"),
        ("read_part", {"offset": 0, "length": 4, "identity": [0, 0, 10, 0]}, "changed since the copy began"),
        ("read_range", {"offset": 0, "length": 4, "identity": [0, 0, 10, 0]}, "changed since the copy began"),
    ],
)
def test_both_partial_read_ops_keep_one_set_of_rules(tmp_path, op, args, refusal):
    """read_part (a whole file in parts over SSH) and read_range (a copy between hosts) are
    one function, fileio.read_window: the same bounds, the same identity pin, the same
    judged open; only the cap on the whole file differs. Real: files on this filesystem."""
    target = tmp_path / "f"
    target.write_bytes(b"0123456789")
    with pytest.raises(fileio.Refused, match=refusal):
        fileio.main({"op": op, "path": str(target), **args})


def test_partial_reads_answer_each_caller_in_its_shape(tmp_path):
    """Real: files and a symlink on this filesystem."""
    target = tmp_path / "f"
    target.write_bytes(b"0123456789")
    part = fileio.main({"op": "read_part", "path": str(target), "offset": 8, "length": 4})
    window = fileio.main({"op": "read_range", "path": str(target), "offset": 8, "length": 4, "max_bytes": 1})
    assert base64.b64decode(part["data"]) == base64.b64decode(window["data"]) == b"89"
    assert part["id"] == window["identity"] and part["size"] == 10 and window["length"] == 2
    assert fileio.main({"op": "read_part", "path": str(tmp_path / "no"), "offset": 0, "length": 1})["exists"] is False
    with pytest.raises(FileNotFoundError):
        fileio.main({"op": "read_range", "path": str(tmp_path / "no"), "offset": 0, "length": 1})
    (tmp_path / "to_dev_null").symlink_to("/dev/null")
    for op in ("read_part", "read_range"):
        with pytest.raises(fileio.Refused, match="a character device, not a regular file"):
            fileio.main({"op": op, "path": str(tmp_path / "to_dev_null"), "offset": 0, "length": 1})
