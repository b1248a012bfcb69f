"""The predicted host planning reads through: what earlier planned changes leave.

Real: the local connection, its probes (path_info, file_facts, model_files, vllm_state)
run on real files in a scratch directory. Nothing is a double: the PredictedHost wraps
the real connection and only answers for what the recorded effects changed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from engine.connection.base import ScopedConnection, TaskScope
from engine.connection.local import LocalConnection
from engine.connection.predicted import PredictedHost
from engine.module_api import Fills, Removes, Starts, Stops, Writes


def planning(host: PredictedHost) -> ScopedConnection:
    return ScopedConnection(host, TaskScope(planning=True))


def test_a_planned_write_is_what_later_reads_and_probes_see(tmp_path: Path) -> None:
    (tmp_path / "app.conf").write_text("port=1\n")
    host = PredictedHost(LocalConnection())
    host.record((Writes(str(tmp_path / "app.conf"), b"port=22\n", 0o600),), "app config")
    conn = planning(host)
    path = str(tmp_path / "app.conf")
    assert conn.read_file(path) == b"port=22\n"
    assert (tmp_path / "app.conf").read_text() == "port=1\n", "nothing written"
    info = conn.run_probe("path_info", {"paths": [path]})["paths"][path]
    assert info["size"] == 8 and info["mode"] == "0600"
    facts = conn.run_probe("file_facts", {"paths": [path], "checksum": "sha1"})["paths"][path]
    assert facts["checksum"] == hashlib.sha1(b"port=22\n").hexdigest()
    assert not host.unknown_reads()


def test_a_removed_tree_is_absent_below_it_and_a_filled_one_is_known_after_apply(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "w.bin").write_bytes(b"x")
    (tmp_path / "venv").mkdir()
    host = PredictedHost(LocalConnection())
    host.record((Removes(str(tmp_path / "old")), Fills(str(tmp_path / "venv"), "python packages")), "earlier")
    conn = planning(host)
    assert conn.read_file(str(tmp_path / "old" / "w.bin")) is None
    host.begin_task()
    assert conn.read_file(str(tmp_path / "venv" / "bin" / "python")) is None, "read from the host as it is"
    (unknown,) = host.unknown_reads()
    assert unknown.task == "earlier" and unknown.path.endswith("venv/bin/python")


def test_a_model_file_patched_earlier_and_its_kept_original_are_seen(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"a": 1}')
    host = PredictedHost(LocalConnection())
    host.record(
        (Writes(str(model / "config.json"), b'{"a": 2}'), Writes(str(model / "config.json.rigger-orig"), b'{"a": 1}')),
        "patch",
    )
    answer = planning(host).run_probe("model_files", {"dir": str(model), "names": ["config.json"]})
    assert answer["files"]["config.json"]["backup"]["kind"] == "file"
    assert answer["backed_up"] == ["config.json"]


def test_a_stopped_process_and_a_started_server_are_carried_forward(tmp_path: Path) -> None:
    host = PredictedHost(LocalConnection())
    me = os.getpid()
    host.record((Stops(me, None, f"pid {me}"), Starts("srv", ("vllm", "serve"), 8000, str(tmp_path / "srv.json"))), "t")
    conn = planning(host)
    procs = conn.run_probe("procs", {"pids": [me]})["processes"]
    assert all(p["pid"] != me for p in procs), "the planned stop is carried forward"
    host.begin_task()
    conn.run_probe("vllm_state", {"state_path": str(tmp_path / "srv.json"), "health_url": ""})
    assert [u.task for u in host.unknown_reads()] == ["t"], "its pid and health are known after apply"


class _Remote:
    """A connection to another machine (only its type matters here: no controller_is_host)."""

    host_name = "gpu1"


def test_controller_reads_see_planned_writes_only_when_the_controller_is_the_host(tmp_path: Path) -> None:
    """engine/controller_files.py: a copy's src on a local connection is the host's file."""
    from engine import controller_files

    path, removed = tmp_path / "app.conf", tmp_path / "old.conf"
    path.write_text("port=1\n")
    removed.write_text("x\n")
    effects = (Writes(str(path), b"port=2\n", None), Removes(str(removed)))
    local = PredictedHost(LocalConnection())
    local.record(effects, "app config")
    with controller_files.seeing(local):
        assert controller_files.read_bytes(path) == b"port=2\n" and controller_files.size(path) == 7
        assert not controller_files.exists(removed) and not controller_files.is_file(removed)
    assert controller_files.read_bytes(path) == b"port=1\n", "outside the task: the file as it is"
    remote = PredictedHost(_Remote())  # type: ignore[arg-type]
    remote.record(effects, "app config")
    with controller_files.seeing(remote):
        assert controller_files.read_bytes(path) == b"port=1\n" and controller_files.exists(removed)
