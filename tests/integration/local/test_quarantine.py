"""Quarantine of hosts refused by ensure_gpus_healthy, and the fleet circuit breaker.

Real: the rigger CLI (each run a process of its own, as the fake NVML needs: a controller restart between runs),
the runner, ensure_gpus_healthy and its probe, nvidia-ml-py, the quarantine file on disk
under RIGGER_STATE_DIR, `rigger inventory` / `rigger quarantine`. Not real: the GPUs
(tests/fakes/fake_nvml: one healthy 8-GPU host for every inventory host, all on the local
connection) and the kernel log: hosts differ in the kernel log their inventory names (a
"bad" one holds a recorded XID 79, a GPU fallen off the bus: a hardware fault), so a fleet
of fake hosts can be refused in part. A host that only misses the declared memory (a
configuration mistake) is refused and not quarantined.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import fakenvml  # tests/fakes/fake_nvml (pytest pythonpath)
import pytest

REPO = Path(__file__).resolve().parents[3]
# tests/fakes/nvidia_smi/kernel_log_xid.txt's XID 79 line (the format of NVIDIA's driver)
XID_79 = "[ 8123.512004] NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
HEALTH = "GPUs fit"
SERVE = "Serve"
PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: GPUs fit
      ensure_gpus_healthy:
        min_memory_mib: "{{ need_mib }}"
        refuse_xids: [79]
        clock_reads: 1
        xid_wait_ms: 0
        kernel_log_path: "{{ kernel_log }}"
    - name: After the health step
      debug: {msg: "went on"}
"""
SERVE_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Serve
      serve_vllm:
        name: quarantine-test
        model: /nonexistent/model
        launcher: /nonexistent/vllm
        port: 1
        state_dir: "{{ state_dir }}"
"""


@pytest.fixture
def lab(tmp_path: Path) -> dict[str, Any]:
    fake = fakenvml.create(tmp_path / "nvml")
    fake.eight_gpus()
    state = tmp_path / "state"
    state.mkdir(mode=0o1777)
    os.chmod(state, 0o1777)
    (tmp_path / "kern.log").write_text("")
    (tmp_path / "kern-bad.log").write_text(XID_79)
    (tmp_path / "health.yml").write_text(PLAYBOOK)
    (tmp_path / "serve.yml").write_text(SERVE_PLAYBOOK)
    return {"tmp": tmp_path, "env": {**fake.env(), "RIGGER_STATE_DIR": str(state)}, "state": state}


def inventory(lab: dict[str, Any], kinds: dict[str, str]) -> str:
    """Hosts: "good", "bad" (XID 79 in its kernel log) or "small" (declares more memory than
    the GPUs have)."""
    hosts = {
        name: {"ansible_connection": "local", "need_mib": 200_000 if kind == "small" else 1000,
               "kernel_log": str(lab["tmp"] / ("kern-bad.log" if kind == "bad" else "kern.log")),
               "state_dir": str(lab["tmp"] / "serve-state")}
        for name, kind in kinds.items()
    }  # fmt: skip
    path = lab["tmp"] / "inventory.yml"
    path.write_text(json.dumps({"all": {"hosts": hosts}}))
    return str(path)


def run(cli: Any, lab: dict[str, Any], *args: str) -> Any:
    return cli(*args, cwd=REPO, env=lab["env"], timeout_s=240)


def statuses(done: Any, task: str) -> dict[str, str]:
    return {r["host"]: r["status"] for r in done.results(task)}


def test_a_refused_host_is_quarantined_skipped_by_serving_and_cleared(rigger: Any, lab: dict[str, Any]) -> None:
    inv = inventory(lab, {"good": "good", "bad": "bad"})
    first = run(rigger, lab, "run", str(lab["tmp"] / "health.yml"), "-i", inv, "--output", "jsonl")
    assert statuses(first, HEALTH) == {"good": "ok", "bad": "failed"}
    events = [e for e in first.events if e["event"] == "recap"]
    assert list(events[-1]["quarantined"]) == ["bad"]
    assert "xid" in events[-1]["quarantined"]["bad"]

    # a new controller process reads it back: list, inventory
    listed = run(rigger, lab, "quarantine", "list")
    assert listed.rc == 0 and list(json.loads(listed.stdout)) == ["bad"]
    shown = json.loads(run(rigger, lab, "inventory", "-i", inv).stdout)
    assert "xid" in shown["_meta"]["hostvars"]["bad"]["rigger_quarantined"]["reason"]
    assert "rigger_quarantined" not in shown["_meta"]["hostvars"]["good"]

    served = run(rigger, lab, "run", str(lab["tmp"] / "serve.yml"), "-i", inv, "--check", "--output", "jsonl")
    by_host = {r["host"]: r for r in served.results(SERVE)}
    assert by_host["bad"]["status"] == "skipped"
    assert by_host["bad"]["msg"].startswith("host quarantined since ")
    assert "rigger quarantine clear HOST" in by_host["bad"]["msg"]
    assert "quarantined" not in by_host["good"]["msg"]
    assert "bad" in [e for e in served.events if e["event"] == "recap"][-1]["quarantined"]

    included = run(
        rigger, lab, "run", str(lab["tmp"] / "serve.yml"), "-i", inv, "--check", "--include-quarantined",
        "--output", "jsonl",
    )  # fmt: skip
    assert "quarantined" not in {r["host"]: r for r in included.results(SERVE)}["bad"]["msg"]

    cleared = run(rigger, lab, "quarantine", "clear", "bad")
    assert cleared.rc == 0 and "bad: quarantine cleared" in cleared.stdout
    assert json.loads(run(rigger, lab, "quarantine", "list").stdout) == {}
    again = run(rigger, lab, "quarantine", "clear", "bad")
    assert again.rc == 5 and "'bad' is not quarantined" in again.stderr


def test_check_mode_records_no_quarantine(rigger: Any, lab: dict[str, Any]) -> None:
    inv = inventory(lab, {"bad": "bad"})
    done = run(rigger, lab, "run", str(lab["tmp"] / "health.yml"), "-i", inv, "--check", "--output", "jsonl")
    recap = [e for e in done.events if e["event"] == "recap"][-1]
    assert recap["quarantined"]["bad"].startswith("would be quarantined (check mode): ")
    assert json.loads(run(rigger, lab, "quarantine", "list").stdout) == {}
    text = run(rigger, lab, "run", str(lab["tmp"] / "health.yml"), "-i", inv, "--check")
    assert "quarantined: bad: would be quarantined (check mode): GPU health refused: xid" in text.stdout


def test_circuit_breaker_stops_the_run_when_most_of_the_fleet_is_refused(rigger: Any, lab: dict[str, Any]) -> None:
    inv = inventory(lab, {"a": "good", "b": "bad", "c": "bad", "d": "bad"})
    done = run(rigger, lab, "run", str(lab["tmp"] / "health.yml"), "-i", inv, "--output", "jsonl")
    assert statuses(done, HEALTH) == {"a": "ok", "b": "failed", "c": "failed", "d": "failed"}
    notices = [e["message"] for e in done.events if e["event"] == "notice"]
    assert any(n.startswith("circuit breaker: 'GPUs fit' refused 3 of 4 hosts (75%, more than 50%)") for n in notices)
    assert done.results("After the health step") == [], "nothing after the breaker ran"
    assert json.loads(run(rigger, lab, "quarantine", "list").stdout) == {}


def test_one_refused_host_of_four_is_quarantined_and_the_run_goes_on(rigger: Any, lab: dict[str, Any]) -> None:
    inv = inventory(lab, {"a": "good", "b": "good", "c": "good", "d": "bad"})
    done = run(rigger, lab, "run", str(lab["tmp"] / "health.yml"), "-i", inv, "--output", "jsonl")
    assert statuses(done, "After the health step") == {"a": "ok", "b": "ok", "c": "ok"}
    assert list(json.loads(run(rigger, lab, "quarantine", "list").stdout)) == ["d"]


def test_a_layout_mismatch_is_refused_and_not_quarantined(rigger: Any, lab: dict[str, Any]) -> None:
    inv = inventory(lab, {"good": "good", "small": "small"})
    done = run(rigger, lab, "run", str(lab["tmp"] / "health.yml"), "-i", inv, "--output", "jsonl")
    assert statuses(done, HEALTH) == {"good": "ok", "small": "failed"}
    failed = {r["host"]: r for r in done.results(HEALTH)}["small"]
    assert "[gpu-memory]" in failed["msg"] and "(a configuration mistake): not quarantined" in failed["msg"]
    assert [e for e in done.events if e["event"] == "recap"][-1]["quarantined"] == {}
    assert json.loads(run(rigger, lab, "quarantine", "list").stdout) == {}
