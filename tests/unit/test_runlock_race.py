"""The flock race behind parallel lock-taking, reproduced with real files and flock."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time

from engine.runlock import lockfile as probe


def test_a_loser_never_reports_a_stale_or_empty_record_as_the_holder(tmp_path):
    path = tmp_path / "run.lock"
    path.write_text(json.dumps({"owner": "a run that died", "holder_pid": 2**22 + 12345}) + "\n")
    winner = os.open(path, os.O_RDWR)
    fcntl.flock(winner, fcntl.LOCK_EX | fcntl.LOCK_NB)  # won the race, record not yet written

    def write_record_late() -> None:
        time.sleep(0.2)
        os.ftruncate(winner, 0)
        os.pwrite(winner, json.dumps({"owner": "the live run", "holder_pid": os.getpid()}).encode(), 0)

    writer = threading.Thread(target=write_record_late)
    writer.start()
    try:
        answer = probe.acquire({"path": str(path), "record": {"owner": "second"}})
    finally:
        writer.join()
        os.close(winner)
    assert answer["acquired"] is False
    assert answer["holder"]["owner"] == "the live run"


def test_still_named_tells_the_file_at_the_path_from_a_removed_one(tmp_path):
    path = tmp_path / "run.lock"
    path.write_text("")
    fd = os.open(path, os.O_RDWR)
    try:
        assert probe.still_named(str(path), fd)
        path.unlink()
        assert not probe.still_named(str(path), fd)
        path.write_text("")  # a new file at the same path
        assert not probe.still_named(str(path), fd)
    finally:
        os.close(fd)


def test_a_lock_file_removed_between_open_and_flock_is_not_taken_for_the_lock(tmp_path, monkeypatch):
    """The file is removed and another run locks a new one at the path exactly between this
    run's open and its flock (a clean-up racing two runs): this run must see that run as the
    holder, not lock the removed file and run beside it. Real files and flock; the only
    stand-in is the moment, run right after the real open."""
    path = tmp_path / "run.lock"
    other: list[int] = []
    real_open = probe._open

    def open_then_replaced(where):
        opened = real_open(where)
        if not other:
            os.unlink(opened[0])
            fd = os.open(opened[0], os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, json.dumps({"owner": "the other run", "holder_pid": os.getpid()}).encode())
            other.append(fd)
        return opened

    monkeypatch.setattr(probe, "_open", open_then_replaced)
    try:
        answer = probe.acquire({"path": str(path), "record": {"owner": "this run"}})
    finally:
        for fd in other:
            os.close(fd)
    assert answer["acquired"] is False and answer["holder"]["owner"] == "the other run", answer
