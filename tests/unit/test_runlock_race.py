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
