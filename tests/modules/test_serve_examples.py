"""The shipped playbooks and inventory examples parse, validate and mean what they say.

Real: `rigger validate` (the CLI in the test process), the inventory loader, the playbook files as shipped.
Nothing runs on a host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.inventory import load_inventory, select_hosts

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("playbook", "inventory"),
    [
        ("playbooks/kimi_k25_nvfp4.yml", None),
        ("playbooks/kimi_k25_nvfp4.yml", "inventory/local.yml"),
        ("playbooks/kimi_k25_nvfp4.yml", "inventory/fleet.yml"),
        ("playbooks/demo_cpu.yml", None),
        ("playbooks/provision_gpu_host.yml", None),
        ("playbooks/provision_gpu_host.yml", "inventory/fleet.yml"),
    ],
)
def test_playbook_validates(rigger: Any, playbook: str, inventory: str | None) -> None:
    extra = ["-i", inventory] if inventory else []
    done = rigger("validate", playbook, *extra, cwd=REPO, timeout_s=60)
    assert done.rc == 0, done.stdout + done.stderr
    assert "valid" in done.stdout


def test_fleet_inventory_groups_bastions_and_site_overrides() -> None:
    inventory = load_inventory([str(REPO / "inventory" / "fleet.yml")])
    assert select_hosts(inventory, "kimi_servers") == ["gpu-a01", "gpu-a02", "gpu-b01"]
    a01, b01 = inventory.hosts["gpu-a01"].vars, inventory.hosts["gpu-b01"].vars
    assert a01["ansible_ssh_common_args"] == "-J deploy@bastion.example.net:22"
    assert b01["ansible_ssh_common_args"] == "-J deploy@bastion-b.example.net:2222"
    assert b01["kimi_model_dir"] == "/nvme/models/Kimi-K2.5-NVFP4"
    assert a01["kimi_old_model_dirs"] == ["/models/Kimi-K2-Instruct-FP8"], "group_vars/ read"
    assert "kimi_old_model_dirs" not in inventory.hosts["gpu-a03"].vars


def test_local_inventory_is_this_machine_on_the_local_connection() -> None:
    inventory = load_inventory([str(REPO / "inventory" / "local.yml")])
    assert list(inventory.hosts) == ["localhost"]
    assert inventory.hosts["localhost"].vars["ansible_connection"] == "local"
