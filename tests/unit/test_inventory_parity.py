"""Inventory answers ansible-core 2.19 gives (each checked against real ansible-core by
the differential cases named in the test); real files, the real CLI, nothing faked."""

from __future__ import annotations

import json
import textwrap

from engine.inventory import load_inventory, select_hosts

INI = textwrap.dedent("""\
    loose1 ansible_host=10.0.0.9
    web3.example.com:1022 http_port=8080

    [web]
    web-[a:c] mode=0644 dmcrypt=true window=10:30
    lb[00:04:2] weight=2.5 tags="['a', 'b']" opts="{'k': 1}" flag=True n=8

    [web:vars]
    greeting = hello big world
    note=kept # an inline comment

    [db]
    db1

    [prod:children]
    web
    db
    """)


def _ini(tmp_path, text=INI):
    path = tmp_path / "hosts"
    path.write_text(text)
    return load_inventory([str(path)])


def test_ini_values_are_python_literals_or_strings(tmp_path):
    """Case ini-values: 'true', '0644', '10:30' stay strings; 8, 2.5, True, lists, dicts parse."""
    inv = _ini(tmp_path)
    web = inv.hosts["web-a"].vars
    assert (web["mode"], web["dmcrypt"], web["window"]) == ("0644", "true", "10:30")
    lb = inv.hosts["lb02"].vars
    assert (lb["n"], lb["weight"], lb["flag"]) == (8, 2.5, True)
    assert lb["tags"] == ["a", "b"] and lb["opts"] == {"k": 1}


def test_ini_vars_lines_keep_spaces_and_inline_hash(tmp_path):
    inv = _ini(tmp_path)
    assert inv.hosts["web-b"].vars["greeting"] == "hello big world"
    assert inv.hosts["web-b"].vars["note"] == "kept # an inline comment"


def test_letter_and_stride_ranges_and_ports(tmp_path):
    inv = _ini(tmp_path)
    assert inv.groups["web"] == ("web-a", "web-b", "web-c", "lb00", "lb02", "lb04")
    assert "web3.example.com" in inv.hosts and inv.hosts["web3.example.com"].vars["ansible_port"] == 1022


def test_ungrouped_and_group_order(tmp_path):
    inv = _ini(tmp_path)
    assert inv.groups["ungrouped"] == ("loose1", "web3.example.com")
    assert inv.children["all"] == ("ungrouped", "prod")
    assert inv.groups["all"][:2] == ("loose1", "web3.example.com")
    assert inv.hosts["db1"].groups == ("db", "prod")


def test_group_vars_all_beats_inventory_group_vars(tmp_path):
    """Case precedence: Ansible puts group_vars/all above every group in the inventory file."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("greeting: from group_vars/all\n")
    inv = _ini(tmp_path)
    assert inv.hosts["web-a"].vars["greeting"] == "from group_vars/all"


def test_playbook_adjacent_vars_beat_inventory_adjacent(tmp_path):
    inv_dir, book_dir = tmp_path / "inv", tmp_path / "book"
    for base, value in ((inv_dir, "inventory"), (book_dir, "playbook")):
        (base / "group_vars").mkdir(parents=True)
        (base / "group_vars" / "web.yml").write_text(f"where: {value}\n")
    (inv_dir / "hosts").write_text(INI)
    inv = load_inventory([str(inv_dir / "hosts")], playbook_dir=book_dir)
    assert inv.hosts["lb00"].vars["where"] == "playbook"


def test_subscripts_and_exclusion_order(tmp_path):
    """Case patterns."""
    inv = _ini(tmp_path)
    assert select_hosts(inv, "web[0]") == ["web-a"]
    assert select_hosts(inv, "web[-1]") == ["lb04"]
    assert select_hosts(inv, "web[4:]") == ["lb02", "lb04"]
    assert select_hosts(inv, "!db:prod") == ["web-a", "web-b", "web-c", "lb00", "lb02", "lb04"]
    assert select_hosts(inv, "all", limit="!prod") == ["loose1", "web3.example.com"]


def test_inventory_list_has_ansible_inventorys_shape(rigger, tmp_path):
    path = tmp_path / "hosts"
    path.write_text(INI)
    run = rigger("inventory", "-i", str(path), "--list")
    listing = json.loads(run.stdout)
    assert run.rc == 0
    assert listing["all"] == {"children": ["ungrouped", "prod"]}
    assert listing["prod"] == {"children": ["web", "db"]}
    assert listing["ungrouped"] == {"hosts": ["loose1", "web3.example.com"]}
    assert listing["_meta"]["hostvars"]["web3.example.com"] == {"ansible_port": 1022, "http_port": 8080}
    assert "db1" not in listing["_meta"]["hostvars"]  # no variables: not listed, as Ansible


def test_templated_interpreter_runs(rigger, tmp_path):
    """Case python-interpreter-template: this crashed with exit 250."""
    (tmp_path / "hosts").write_text(
        'node1 ansible_connection=local ansible_python_interpreter="{{ ansible_playbook_python }}"\n'
    )
    book = tmp_path / "site.yml"
    book.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - command: echo hi\n")
    run = rigger("run", str(book), "-i", str(tmp_path / "hosts"), "-e", "rigger_run_lock=false")
    assert run.rc == 0, run.stderr
