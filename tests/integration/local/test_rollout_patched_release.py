"""A rollout whose release patches the checkpoint, end to end, without vLLM: two "hosts"
(inventory names reached by the local connection), each a server on its own port serving
its own copy of the Kimi-K2.5-NVFP4 config files, behind a real HAProxy. The release
removes the FP8 KV-cache declaration (patch_quant_config's `kv_cache_dtype: auto`, the
path per host) and changes the server; when the canary's change fails, the rollback
leaves its model directory exactly as it was (bytes, modes, no backup left behind).

Real: the rigger CLI (in the test process), the rollout and patch_quant_config modules,
serve_vllm's plan, apply, state record and staged readiness, a server process in its own
session per host, HAProxy (Debian's) with its runtime API, real files in a temp dir, the
baseline store under the test's state dir. Not real: vLLM (tests/fakes/fake_vllm/vllm
answers /health, /v1/models and completions the same way every time, so the golden gate
passes; the performance gate is off but in the warm-up test, where the release is a
server slow at its first requests, --fake-cold-requests); the release that does not start
is a script that exits 2 as vLLM does on an unknown flag. tests/integration/vllm/test_rollout.py
runs real vLLM.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from haproxy_lab import HAProxyLab, free_port, haproxy, server_status, wait_for

from tests.conftest import tree_digest

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "tests" / "fixtures" / "kimi-k2.5-nvfp4"
LAUNCHER = REPO / "tests" / "fakes" / "fake_vllm" / "vllm"
HOSTS = ("h1", "h2")
BROKEN = '#!/bin/sh\necho "vllm: error: unrecognized arguments: --no-such-flag" >&2\nexit 2\n'


@dataclass
class Fleet:
    work: Path
    ports: dict[str, int]
    lab: HAProxyLab

    @property
    def state_dir(self) -> Path:
        return self.work / "state"

    def model(self, host: str) -> Path:
        return self.work / f"model-{host}"

    def state(self, host: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state_dir / f"fake-{host}.json").read_text())
        return data

    def inventory(self) -> Path:
        path = self.work / "inventory.yml"
        path.write_text(json.dumps({"fleet": {"hosts": {h: {"ansible_connection": "local"} for h in HOSTS}}}))
        return path

    def server(self, launcher: Path, extra_args: list[str]) -> dict[str, Any]:
        return {"name": "fake", "model": "/unused", "served_model_name": "fake", "launcher": str(launcher),
                "extra_args": extra_args, "ready_timeout_s": 60, "state_dir": str(self.state_dir)}  # fmt: skip

    def own_server(self, host: str) -> dict[str, Any]:
        return {"name": f"fake-{host}", "port": self.ports[host], "model": str(self.model(host))}

    def playbook(self, label: str, launcher: Path, extra_args: list[str], performance: Any = None) -> Path:
        task = {
            "name": "rollout",
            "run_once": True,
            "rollout": {
                "server": self.server(launcher, extra_args),
                "host_server": {h: self.own_server(h) for h in HOSTS},
                "checkpoint_patch": {"kv_cache_dtype": "auto"},
                "host_checkpoint_patch": {h: {"path": str(self.model(h))} for h in HOSTS},
                "router": {"socket": str(self.lab.socket), "backend": self.lab.backend, "drain_timeout_s": 30},
                "gates": {"golden": {"prompts": ["2 + 2 =", "Hello"], "max_tokens": 4}, "performance": performance},
            },
        }
        path = self.work / f"rollout-{label}.yml"
        path.write_text(json.dumps([{"hosts": "fleet", "gather_facts": False, "tasks": [task]}]))
        return path

    def serve_playbook(self, state: str) -> Path:
        server = {**self.server(LAUNCHER, []), "name": "fake-{{ inventory_hostname }}",
                  "model": "{{ models[inventory_hostname] }}", "port": "{{ ports[inventory_hostname] }}",
                  "state": state}  # fmt: skip
        play = {"hosts": "fleet", "gather_facts": False, "tasks": [{"name": "serve", "serve_vllm": server}],
                "vars": {"ports": self.ports, "models": {h: str(self.model(h)) for h in HOSTS}}}  # fmt: skip
        path = self.work / f"serve-{state}.yml"
        path.write_text(json.dumps([play]))
        return path

    def digests(self) -> dict[str, dict[str, str]]:
        return {h: tree_digest(self.model(h)) for h in HOSTS}


@pytest.fixture
def fleet(tmp_path: Path, rigger: Any) -> Iterator[Fleet]:
    for host in HOSTS:
        shutil.copytree(FIXTURE, tmp_path / f"model-{host}")
    ports = {h: free_port() for h in HOSTS}
    with haproxy(tmp_path, ports) as lab:
        fleet = Fleet(tmp_path, ports, lab)
        started = rigger("run", str(fleet.serve_playbook("started")), "-i", str(fleet.inventory()))
        try:
            assert started.rc == 0, started.stdout[-3000:] + started.stderr[-3000:]
            wait_for(lambda: set(server_status(lab).values()) == {"UP"}, timeout_s=30)
            yield fleet
        finally:
            stopped = rigger("run", str(fleet.serve_playbook("stopped")), "-i", str(fleet.inventory()))
            assert stopped.rc == 0, stopped.stdout[-3000:]


def _broken(fleet: Fleet) -> Path:
    script = fleet.work / "broken" / "vllm"
    script.parent.mkdir()
    script.write_text(BROKEN)
    script.chmod(0o755)
    return script


def _rollout(
    fleet: Fleet, rigger: Any, label: str, launcher: Path, extra_args: list[str], performance: Any = None
) -> tuple[Any, Any]:
    run = rigger("run", str(fleet.playbook(label, launcher, extra_args, performance)), "-i", str(fleet.inventory()),
                 "--output", "jsonl", timeout_s=600)  # fmt: skip
    results = run.results("rollout")
    assert results and "rollout" in results[0]["data"], run.stdout[-3000:] + run.stderr[-3000:]
    return run, results[0]["data"]["rollout"]


def _steps(turn: dict[str, Any]) -> list[str]:
    return [s["step"] for s in turn["steps"]]


def test_check_mode_shows_each_hosts_patch_beside_serve_vllms_change(fleet: Fleet, rigger: Any) -> None:
    """--check --diff: per host, the patch's file diffs and serve_vllm's plan on the patched
    files (the config digests in its spec change); nothing is written, nothing restarts."""
    before, pids = fleet.digests(), {h: fleet.state(h)["pid"] for h in HOSTS}
    run = rigger("run", str(fleet.playbook("check", LAUNCHER, ["--shutdown-timeout", "5"])), "-i",
                 str(fleet.inventory()), "--check", "--diff")  # fmt: skip
    assert run.rc == 0, run.stdout[-3000:]
    for host in HOSTS:
        for shown in (f"{host}: {fleet.model(host)}/config.json", f"{host}: {fleet.model(host)}/hf_quant_config.json",
                      f"{host}: model config files (sha256)", f"{host}: vLLM argv"):  # fmt: skip
            assert shown in run.stdout, run.stdout[-4000:]
    assert "patch the checkpoint" in run.stdout and '"kv_cache_scheme"' in run.stdout
    assert fleet.digests() == before and {h: fleet.state(h)["pid"] for h in HOSTS} == pids


def test_a_canary_that_does_not_start_leaves_its_model_directory_as_it_was(fleet: Fleet, rigger: Any) -> None:
    """The canary is patched, its new server exits, the gate fails: the files are written
    back before the previous server is launched again, the backups the patch made are
    gone, and the relaunched server reads exactly what its record says. h2 is untouched."""
    before, old = fleet.digests(), {h: fleet.state(h) for h in HOSTS}
    run, record = _rollout(fleet, rigger, "does-not-start", _broken(fleet), [])
    assert run.rc == 2 and record["outcome"] == "stopped" and record["not_started"] == ["h2"]
    (turn,) = record["hosts"]
    assert turn["outcome"] == "rolled back", turn
    steps = _steps(turn)
    assert steps.index("kept config files") < steps.index("checkpoint patched") < steps.index("changed")
    assert steps.index("config files put back") < steps.index("rolled back")
    files = turn["rolled_back"]["files"]
    patched = sorted(str(fleet.model("h1") / n) for n in ("config.json", "hf_quant_config.json"))
    assert sorted(files["restored"]) == patched
    assert sorted(files["backups_removed"]) == [p + ".rigger-orig" for p in patched]
    assert turn["rolled_back"]["config_differs"] == []
    assert fleet.digests() == before
    assert not list(fleet.model("h1").glob("*.rigger-orig"))
    assert fleet.state("h1")["spec_hash"] == old["h1"]["spec_hash"] and fleet.state("h2")["pid"] == old["h2"]["pid"]
    wait_for(lambda: set(server_status(fleet.lab).values()) == {"UP"}, timeout_s=30)


def test_an_error_after_the_patch_still_puts_the_files_back(fleet: Fleet, rigger: Any) -> None:
    """Not a gate verdict: the turn breaks after the patch. The new server starts (its
    one-token readiness completion is answered) and then answers HTTP 500 to the golden
    prompts, so asking them raises mid-turn. The rollout's recovery rolls the host back
    all the same, and the files with it."""
    before = fleet.digests()
    args = ["--shutdown-timeout", "5", "--fake-fail-over-tokens", "1"]
    run, record = _rollout(fleet, rigger, "errors-after-start", LAUNCHER, args)
    (turn,) = record["hosts"]
    assert run.rc == 2 and turn["outcome"].startswith("failed: golden prompt '2 + 2 =': HTTP 500"), turn
    assert "checkpoint patched" in _steps(turn)
    assert len(turn["rolled_back"]["files"]["restored"]) == 2
    assert fleet.digests() == before


def test_a_good_release_patches_every_host_and_keeps_the_originals(fleet: Fleet, rigger: Any) -> None:
    """Every gate passes: each host serves the patched files (their digests in its record),
    with patch_quant_config's backups beside them (`state: restored` puts them back)."""
    old = {h: fleet.state(h) for h in HOSTS}
    run, record = _rollout(fleet, rigger, "good", LAUNCHER, ["--shutdown-timeout", "5"])
    assert run.rc == 0 and [t["outcome"] for t in record["hosts"]] == ["upgraded", "upgraded"], record
    for host in HOSTS:
        config = json.loads((fleet.model(host) / "config.json").read_text())
        assert "kv_cache_scheme" not in config["quantization_config"]
        assert (fleet.model(host) / "config.json.rigger-orig").exists()
        assert fleet.state(host)["config_sha256"] != old[host]["config_sha256"]


def test_the_performance_gate_warms_a_fresh_server_up_before_it_judges_it(fleet: Fleet, rigger: Any) -> None:
    """The new server is slow while cold: its first 8 streamed requests (two load tests of 4)
    wait 0.5 s for their first token, then it is as fast as the old one. With `warmup: 2`
    those two load tests are the warm-up, in the journal and not judged: the gate passes on
    every host. Measured cold, the median of the three samples would be a cold one, 0.5 s
    against a baseline of milliseconds, and the canary would be rolled back."""
    performance = {"requests": 4, "concurrency": 2, "max_tokens": 4, "repeats": 3, "warmup": 2,
                   "relative": 0.9, "ttft_relative": 50.0, "confirmations": 0}  # fmt: skip
    run, record = _rollout(fleet, rigger, "cold-start", LAUNCHER,
                           ["--shutdown-timeout", "5", "--fake-cold-requests", "8"], performance)  # fmt: skip
    assert run.rc == 0 and [t["outcome"] for t in record["hosts"]] == ["upgraded", "upgraded"], record
    for turn in record["hosts"]:
        steps = _steps(turn)
        warm_before, warm_after = (i for i, name in enumerate(steps) if name == "warmed up")
        assert warm_before < steps.index("measured before") < steps.index("changed") < warm_after, steps
        cold = turn["steps"][warm_after]
        assert min(cold["ttft_p50_s"]) >= 0.5, cold  # the release's two cold load tests, not judged
        (gate,) = [g for g in turn["gates"] if g["gate"] == "performance"]
        assert gate["passed"], gate
