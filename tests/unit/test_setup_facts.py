"""Ansible's setup facts: gathered on this machine, named and typed as ansible-core names them.

Real: the setup_facts probe and the fact gathering run on this machine (its /proc, /sys,
/etc, interpreter), the rigger CLI runs real playbooks on the local connection. Recorded:
tests/fixtures/ansible_setup_types.json, the names and types (no values) ansible-core
2.19 answered on this project's dev machine; the differential cases
(tests/differential/cases/facts-*) compare values against real ansible-core.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

import pytest
from recorded_host import Recorder

from engine import facts, probes
from engine.connection.local import LocalConnection
from engine.errors import ValidationError
from engine.model import Inventory
from engine.playbook import static_check
from engine.playbook.loader import load_playbook

RECORDED = json.loads((Path(__file__).parent.parent / "fixtures" / "ansible_setup_types.json").read_text())["types"]


def _setup(gather_subset: Any = None) -> dict[str, Any]:
    return probes.run_in_process("setup_facts", {"gather_subset": gather_subset})


def test_every_fact_has_the_type_ansible_gives_it():
    """Each fact Ansible also answered here (recorded) has Ansible's type; the facts
    playbooks use most are all there."""
    gathered = facts.prefixed(_setup())
    shared = set(gathered) & set(RECORDED)
    assert {
        "ansible_os_family",
        "ansible_distribution_major_version",
        "ansible_architecture",
        "ansible_hostname",
        "ansible_default_ipv4",
        "ansible_memtotal_mb",
        "ansible_processor_vcpus",
        "ansible_pkg_mgr",
        "ansible_python",
        "ansible_env",
        "ansible_user_id",
        "ansible_date_time",
        "ansible_mounts",
        "ansible_virtualization_type",
        "ansible_virtualization_role",
    } <= shared
    wrong = {name: type(gathered[name]).__name__ for name in shared if type(gathered[name]).__name__ != RECORDED[name]}
    assert wrong == {}
    for nested in ("ansible_python", "ansible_date_time", "ansible_memory_mb", "ansible_lo"):
        shape = {key: type(value).__name__ for key, value in gathered[nested].items()}
        assert shape == RECORDED[nested + ".*"], nested


def test_values_are_this_hosts():
    """Spot checks against what this machine says through other means."""
    found = _setup()
    assert found["hostname"] == platform.node().split(".")[0]
    assert found["architecture"] == platform.machine()
    assert found["user_uid"] == os.getuid() and found["env"]["PATH"] == os.environ["PATH"]
    meminfo = Path("/proc/meminfo").read_text().split("\n")[0].split()
    assert found["memtotal_mb"] == int(meminfo[1]) // 1024
    assert found["processor_nproc"] == len(os.sched_getaffinity(0))
    assert found["python"]["version"]["major"] == 3 and found["gather_subset"] == ["all"]


@pytest.mark.parametrize(
    ("spec", "groups"),
    [  # what ansible-core 2.19 gathered for each spec on this machine (see the module docstring)
        (["all"], ["min", "hardware", "network", "virtual"]),
        (["!all", "!min", "hardware"], ["hardware"]),
        (["!all", "virtual"], ["min", "virtual"]),
        (["!hardware"], ["min"]),
        (["min"], ["min"]),
        (["!all"], ["min"]),
        (["network"], ["min", "network"]),
        (["!all", "!min"], []),
        (["!all", "hardware"], ["min", "hardware"]),
    ],
)
def test_gather_subset_reads_as_ansible_reads_it(spec: list[str], groups: list[str]):
    code = compile(probes.probe_source("setup_facts"), "setup_facts", "exec")
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    assert namespace["subsets"](spec) == groups


def test_mounts_are_this_hosts_block_file_systems():
    """ansible_mounts lists what /proc/mounts (or /etc/mtab) lists with a device path, each
    with statvfs's numbers; the differential case facts-issue20 compares them with Ansible."""
    table = Path("/etc/mtab") if Path("/etc/mtab").exists() else Path("/proc/mounts")
    wanted = [w[1] for w in (line.split() for line in table.read_text().splitlines()) if w[0].startswith("/")]
    found = _setup(["!all", "!min", "hardware"])["mounts"]
    assert [m["mount"] for m in found] == [w for w in wanted if w]
    root = next(m for m in found if m["mount"] == "/")
    assert root["block_total"] == os.statvfs("/").f_blocks and root["uuid"]


def test_a_bad_subset_fails_naming_it():
    with pytest.raises(probes.ProbeError, match="Bad subset 'bogus' given to Ansible"):
        _setup("min,bogus")


def test_gathering_is_one_round_trip_per_host():
    """Real local connection, wrapped by the recorder that writes down each probe call."""
    recorder = Recorder(LocalConnection())
    gathered = facts.gather(recorder, ["!all"])
    assert len(recorder.probes) == 1 and sum(len(calls) for calls in recorder.probes.values()) == 1
    assert {"hostname", "gpus", "gpu_count", "shm"} <= set(gathered.own)  # the host's and the GPU room's
    assert gathered.ansible["gather_subset"] == ["!all"] and "memtotal_mb" not in gathered.ansible


def test_a_bundle_refuses_a_probe_that_changes_the_host():
    with pytest.raises(probes.ProbeError, match="cannot be bundled"):
        probes.bundle(("host", "signal_procs"))


def test_stored_facts_merge_and_are_injected_as_variables():
    data: dict[str, Any] = {"ansible_facts": {}, "kept": 1}
    facts.store(data, {"ansible_facts": {"distribution": "Debian", "gather_subset": ["all"], "module_setup": True}})
    facts.store(data, {"ansible_facts": {"hostname": "vm"}})
    assert data["ansible_facts"] == {
        "distribution": "Debian",
        "gather_subset": ["all"],
        "module_setup": True,
        "hostname": "vm",
    }
    assert (data["ansible_distribution"], data["ansible_hostname"], data["gather_subset"], data["kept"]) == (
        "Debian",
        "vm",
        ["all"],
        1,
    )
    assert "ansible_module_setup" not in data and data["module_setup"] is True


def test_the_static_check_lets_facts_through_and_still_catches_typos(tmp_path: Path):
    book = tmp_path / "p.yml"
    book.write_text(
        "- hosts: all\n  tasks:\n"
        "    - debug: msg='{{ ansible_facts.distribution }} {{ ansible_eth0.ipv4.address }} {{ gather_subset }}'\n"
        "      when: ansible_os_family == 'Debian'\n"
    )
    static_check.check(load_playbook(str(book)), Inventory({}, {}), {})
    book.write_text("- hosts: all\n  tasks:\n    - debug: msg='{{ distribution }}'\n")
    with pytest.raises(ValidationError, match="undefined variable 'distribution'"):
        static_check.check(load_playbook(str(book)), Inventory({}, {}), {})


def test_a_bad_play_gather_subset_fails_the_gathering(rigger, tmp_path: Path):
    """Real CLI run on localhost: as in Ansible, the Gathering Facts task fails (exit 2)."""
    book = tmp_path / "p.yml"
    book.write_text("- hosts: localhost\n  gather_subset: [bogus]\n  tasks:\n    - debug: msg=never\n")
    run = rigger("run", str(book))
    assert run.rc == 2 and "Bad subset 'bogus'" in run.stdout + run.stderr
