"""`rigger facts` lists the vLLM servers serve_vllm recorded on the host, with what each start
logged about itself (issue 32: the fact lines shown by `rigger facts`).

Real: the rigger CLI (`rigger facts`, its own process), fact gathering and the serving
room's vllm_servers probe, the guarded file reads and the identity check of the recorded
leader (pid + start time + boot id, read from /proc). Not real: the servers. The state
files are written here as serve_vllm writes them (JSON, 0600) under a HOME of the test's
own; the "running" one records a python of this test (sleeping), the other a start time no
process has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

FACTS = {"attention_backend": "TRITON_MLA", "kv_cache_tokens": 512192, "custom_allreduce_disabled": True}


def _start_time(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[19])


def _write(directory: Path, name: str, record: dict[str, Any]) -> None:
    path = directory / f"{name}.json"
    path.write_text(json.dumps({"name": name, **record}))
    path.chmod(0o600)


def test_rigger_facts_lists_recorded_servers_with_their_log_facts(rigger: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    state = home / ".local" / "state" / "rigger" / "vllm"
    state.mkdir(parents=True)
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running = {"pid": sleeper.pid, "start_time": _start_time(sleeper.pid), "boot_id": boot}
        _write(state, "kimi", {**running, "port": 8000, "served_model_name": "kimi-k2.5", "log_facts": FACTS})
        _write(state, "old", {"pid": sleeper.pid, "start_time": 1, "boot_id": boot, "port": 8001})
        (state / "kimi.log").write_text("not a state file\n")
        run = rigger("facts", env={**os.environ, "HOME": str(home)})
    finally:
        sleeper.kill()
        sleeper.wait()
    assert run.rc == 0, run.stderr
    servers = {s["name"]: s for s in json.loads(run.stdout)["localhost"]["vllm_servers"]}
    assert set(servers) == {"kimi", "old"}
    assert servers["kimi"]["running"] is True and servers["kimi"]["log_facts"] == FACTS
    assert servers["kimi"]["port"] == 8000 and servers["kimi"]["state_path"] == str(state / "kimi.json")
    assert servers["old"]["running"] is False and servers["old"]["log_facts"] == {}
