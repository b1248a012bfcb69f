"""Inventories read from real files in Ansible's formats; nothing is faked."""

from __future__ import annotations

import textwrap

import pytest

from engine.errors import ValidationError
from engine.inventory import load_inventory, select_hosts


@pytest.fixture
def yaml_inventory(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "hosts.yml").write_text(
        textwrap.dedent("""\
        all:
          vars: {level: all, port: 8000}
          children:
            gpu:
              vars: {level: gpu}
              hosts:
                gpu[01:04]:
                  ansible_host: 10.0.0.1
              children:
                blackwell:
                  vars: {level: blackwell}
                  hosts:
                    gpu03: {}
            bastion:
              hosts:
                jump1: {ansible_user: ops}
        """)
    )
    (tmp_path / "group_vars" / "blackwell.yml").write_text("kv: auto\n")
    (tmp_path / "host_vars" / "gpu04.yml").write_text("level: host_vars\n")
    return tmp_path / "hosts.yml"


def test_yaml_groups_ranges_and_children(yaml_inventory):
    inv = load_inventory([str(yaml_inventory)])
    assert sorted(inv.hosts) == ["gpu01", "gpu02", "gpu03", "gpu04", "jump1"]
    assert inv.groups["blackwell"] == ("gpu03",)
    assert set(inv.hosts["gpu03"].groups) == {"gpu", "blackwell"}


def test_precedence_all_then_parent_then_child_then_host(yaml_inventory):
    inv = load_inventory([str(yaml_inventory)])
    assert inv.hosts["gpu01"].vars["level"] == "gpu"
    assert inv.hosts["gpu03"].vars["level"] == "blackwell"
    assert inv.hosts["gpu03"].vars["kv"] == "auto"
    assert inv.hosts["gpu04"].vars["level"] == "host_vars"
    assert inv.hosts["jump1"].vars["level"] == "all"
    assert inv.hosts["gpu01"].vars["port"] == 8000


def test_ini_format(tmp_path):
    path = tmp_path / "hosts"
    path.write_text(
        textwrap.dedent("""\
        [gpu]
        gpu-a ansible_host=10.1.0.1 ansible_port=2222 ansible_user=ops
        gpu-b ansible_host=10.1.0.2

        [gpu:vars]
        tp=8
        ansible_python_interpreter=/usr/bin/python3

        [fleet:children]
        gpu
        """)
    )
    inv = load_inventory([str(path)])
    assert inv.hosts["gpu-a"].vars["ansible_port"] == 2222
    assert inv.hosts["gpu-b"].vars["tp"] == 8
    assert inv.groups["fleet"] == ("gpu-a", "gpu-b")


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("all", ["gpu01", "gpu02", "gpu03", "gpu04", "jump1"]),
        ("gpu", ["gpu01", "gpu02", "gpu03", "gpu04"]),
        ("gpu:!blackwell", ["gpu01", "gpu02", "gpu04"]),
        ("gpu:&blackwell", ["gpu03"]),
        ("gpu0[12]", []),  # Ansible reads [12] as a subscript of 'gpu0', which names nothing
        ("gpu0[!3]", ["gpu01", "gpu02", "gpu04"]),
        ("gpu[0]", ["gpu01"]),
        ("gpu[1:]", ["gpu02", "gpu03", "gpu04"]),
        ("gpu[-1]", ["gpu04"]),
        ("gpu[1:2]", ["gpu02", "gpu03"]),
        ("!blackwell:gpu", ["gpu01", "gpu02", "gpu04"]),
        ("!gpu", ["jump1"]),
        ("&gpu:bastion", []),
        ("~gpu0[34]", ["gpu03", "gpu04"]),
        ("gpu0*:!gpu04", ["gpu01", "gpu02", "gpu03"]),
        ("bastion:blackwell", ["jump1", "gpu03"]),
        ("nosuch", []),
    ],
)
def test_patterns(yaml_inventory, pattern, expected):
    assert select_hosts(load_inventory([str(yaml_inventory)]), pattern) == expected


def test_no_inventory_means_only_the_implicit_localhost():
    """As in Ansible: no hosts, 'all' matches nothing, 'localhost' the implicit localhost."""
    inv = load_inventory([])
    assert list(inv.hosts) == []
    assert select_hosts(inv, "all") == []
    assert select_hosts(inv, "localhost") == ["localhost"]
    assert inv.host("localhost").vars["ansible_connection"] == "local"


def test_host_without_address_is_an_error_with_a_line(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text("all:\n  hosts:\n    gpu01:\n      ansible_host: ''\n")
    with pytest.raises(ValidationError) as err:
        load_inventory([str(path)])
    assert "no address" in err.value.message and err.value.line == 3
