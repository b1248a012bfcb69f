"""Every module has an EXAMPLES file, and every example runs in check mode as written.

Real: each modules/<room>/examples/<module>.yml as shipped, in a playbook on this machine
(Ansible's implicit localhost, the local connection), `rigger run --check` in a process of
its own (in a network namespace of its own and with a scratch HOME, so a demo server
running here is not seen), fact gathering, every module's plan() against this host, /dev/shm, dpkg, the
account files. Not real: the GPUs (the fake NVML shows eight idle Blackwell GPUs). Check
mode touches nothing, so the examples' paths (/models/..., /opt/inference/...) are only
read. Where an example needs this host to hold what it does not (a Kimi checkpoint), the
failure it must give instead is named in HOST_LACKS: about the host, never about the
example's arguments or templates.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import fakenvml
import pytest
import yaml

from engine import docs, registry
from tests.conftest import run_rigger_process

# This machine as the one node of a group (the serving group's modules read these).
THIS_MACHINE = {"ansible_connection": "local", "rigger_node_ip": "127.0.0.1", "rigger_node_interface": "lo"}
# A hub that answers nothing (nothing listens on port 9): ensure_model reaches no network.
HUB_UNREACHABLE = {"HF_ENDPOINT": "http://127.0.0.1:9"}

NO_UNITS = (
    "Could not find the requested service" if os.path.isdir("/run/systemd/system") else "this host does not run systemd"
)
# module -> what its example's failure must say on a host without the Kimi checkpoint
HOST_LACKS = {
    "check_serving_compat": "/models/Kimi-K2.5-NVFP4",
    "patch_quant_config": "/models/Kimi-K2.5-NVFP4",
    "ray_cluster": "/opt/inference/vllm/bin/python not found",
    "engine_cache": "/opt/inference/vllm/bin/python not found",
    "lb_backend": "HAProxy runtime API at /run/haproxy/admin.sock",
    "rollout": "HAProxy runtime API at /run/haproxy/admin.sock",
    # The units the examples name (vLLM, NVIDIA daemons, docker) are a GPU host's; where PID 1
    # is not systemd, the module says so first (tests/modules/test_systemd_service.py drives
    # a real user manager).
    **dict.fromkeys(("service", "systemd", "systemd_service"), NO_UNITS),
}


def test_every_registered_module_has_examples() -> None:
    missing = [name for name in registry.module_names() if not docs.examples_path(name).is_file()]
    assert not missing, f"modules without modules/<room>/examples/<module>.yml: {missing}"


def test_the_docs_show_the_examples() -> None:
    spec = registry.get("serve_vllm")
    example = docs.examples_path("serve_vllm").read_text().strip()
    assert "EXAMPLES" in docs.render_text(spec) and "    serve_vllm:" in docs.render_text(spec)
    assert f"## Examples\n\n```yaml\n{example}\n```" in docs.render_markdown(spec)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Any:
    made = fakenvml.create(tmp_path_factory.mktemp("nvml"))
    made.eight_gpus()
    return made


@pytest.mark.parametrize("name", registry.module_names())
def test_the_example_runs_in_check_mode(name: str, fake: Any, tmp_path: Path) -> None:
    source = docs.examples_path(name)
    tasks = yaml.safe_load(source.read_text())
    assert isinstance(tasks, list) and tasks, f"{source}: a list of tasks"
    assert any(name in task for task in tasks), f"{source}: no task uses {name}"
    for support in source.parent.iterdir():  # files/, templates/ the examples name
        if support.is_dir():
            shutil.copytree(support, tmp_path / support.name)
    playbook = tmp_path / "example.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": True, "tasks": tasks}]))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": THIS_MACHINE}}}))
    home = tmp_path / "home"  # a running demo's state file (~/.local/state/rigger) is not seen
    home.mkdir()
    env = {**fake.env(), **HUB_UNREACHABLE, "HOME": str(home),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    # Its own network namespace: the examples name port 8000 as written, where the README's
    # demo may be serving on this machine (issue 29); there nothing listens.
    done = run_rigger_process("run", str(playbook), "-i", str(inventory), "--check", "--output", "jsonl", env=env,
                              timeout_s=300, own_network=True)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    failed = [e for e in done.results() if e.get("status") in ("failed", "unreachable")]
    if name in HOST_LACKS:
        assert done.rc == 2 and failed, done.stdout[-3000:] + done.stderr[-3000:]
        assert all(HOST_LACKS[name] in json.dumps(e) for e in failed), failed
        return
    assert done.rc == 0 and not failed, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.results(), "no task ran"
    if name in ("ensure_model", "spread_model"):  # the hub is not reached: named on the step, never "ok"
        step = done.results(tasks[0]["name"])[0]
        assert step["status"] == "changed" and "cannot verify against the hub" in step["msg"] + step["summary"], step
