"""Saved plans of apt and pip tasks are refused once a package they read has moved; pip
removes what a requirements file names.

Real: the rigger CLI in a subprocess (`rigger plan`, `rigger apply`), python3 -m venv,
pip inside it installing wheels this test builds (tests/fakes/wheels.py: real wheels of
empty packages, installed offline), and for the apt test this machine's apt-get and dpkg
with .deb packages the test builds with dpkg-deb and installs with dpkg -i (a name made
for the test, checked absent first, removed at the end).
Nothing is mocked.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from wheels import fake_wheel, pip_install

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import Change, TaskContext, Unchanged


def _venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    return venv


def _version(venv: Path, name: str) -> str | None:
    metas = list(venv.glob(f"lib/python3*/site-packages/{name}-*.dist-info"))
    return metas[0].name[len(name) + 1 : -len(".dist-info")] if metas else None


def _book(path: Path, task: str) -> Path:
    path.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n" + textwrap.indent(task, "    "))
    return path


def _ctx(planning: bool) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext("localhost", conn.planning() if planning else conn, {}, {})


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for name in ("rgtdemo", "rgtother"):
        for version in ("0.0.1", "0.0.2", "0.0.3"):
            fake_wheel(house, name, version)
    return house


def test_pip_plan_refused_after_the_package_moved_then_applied_when_fresh(
    rigger: Any, tmp_path: Path, wheelhouse: Path
) -> None:
    venv = _venv(tmp_path)
    pip_install(venv, wheelhouse / "rgtdemo-0.0.1-py3-none-any.whl")
    task = f"""\
- name: pinned demo
  pip: {{name: rgtdemo==0.0.3, virtualenv: {venv}, find_links: {wheelhouse}, no_index: true}}
"""
    book = _book(tmp_path / "pip.yml", task)
    planned = rigger("plan", str(book), "-o", str(tmp_path / "plan.json"), "--output", "jsonl")
    assert planned.rc == 0, planned.stdout + planned.stderr
    assert planned.results("pinned demo")[0]["fingerprint"] == {"pip:rgtdemo": "0.0.1"}
    pip_install(venv, wheelhouse / "rgtdemo-0.0.2-py3-none-any.whl")  # someone upgraded it since

    refused = rigger("apply", str(tmp_path / "plan.json"))
    assert refused.rc == 2, refused.stdout + refused.stderr
    assert "pip:rgtdemo: was 0.0.1 at the review, now 0.0.2" in refused.stdout, refused.stdout
    assert _version(venv, "rgtdemo") == "0.0.2", "nothing was installed"

    assert rigger("plan", str(book), "-o", str(tmp_path / "fresh.json")).rc == 0
    done = rigger("apply", str(tmp_path / "fresh.json"))
    assert done.rc == 0, done.stdout + done.stderr
    assert _version(venv, "rgtdemo") == "0.0.3"


def test_pip_absent_removes_what_the_requirements_file_names(tmp_path: Path, wheelhouse: Path, digest: Any) -> None:
    venv = _venv(tmp_path)
    for name in ("rgtdemo", "rgtother"):
        pip_install(venv, wheelhouse / f"{name}-0.0.1-py3-none-any.whl")
    requirements = tmp_path / "req" / "requirements.txt"
    requirements.parent.mkdir()
    requirements.write_text("# the demo\nrgtdemo==0.0.1  # pinned\n-r nested.txt\nnot-installed-here\n")
    (requirements.parent / "nested.txt").write_text("--index-url http://127.0.0.1:9/none\nrgtother\n")
    spec = registry.get("pip")
    args = spec.with_defaults({"requirements": str(requirements), "virtualenv": str(venv), "state": "absent"})
    before = digest(venv)
    change = spec.plan(_ctx(True), args)
    assert isinstance(change, Change) and change.summary == "uninstall rgtdemo rgtother", change
    assert digest(venv) == before, "planning touched the venv"
    assert dict(change.fingerprint)["pip:not-installed-here"] == "absent"
    spec.apply(_ctx(False), args, change)
    assert _version(venv, "rgtdemo") is None and _version(venv, "rgtother") is None
    assert isinstance(spec.plan(_ctx(True), args), Unchanged)


def _dpkg_version(name: str) -> str | None:
    out = subprocess.run(
        ["dpkg-query", "-W", "-f", "${db:Status-Abbrev}${Version}", name], capture_output=True, text=True
    ).stdout
    return out[3:] if out.startswith("ii") else None


def _deb(out: Path, name: str, version: str) -> Path:
    """A real .deb of an empty package, built with dpkg-deb."""
    root = out / f"{name}-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: rigger tests <t@example.invalid>\n"
        "Description: empty package made by a rigger test\n"
    )
    deb = out / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True, capture_output=True)
    return deb


@pytest.mark.slow
def test_apt_plan_refused_after_the_package_version_moved(rigger: Any, tmp_path: Path) -> None:
    """A removal reviewed at 1.0 is not applied to 2.0 (dpkg -i upgraded it behind the plan)."""
    name = f"rgt-demo-{secrets.token_hex(3)}"
    assert _dpkg_version(name) is None
    book = _book(tmp_path / "apt.yml", f"- name: the demo package\n  apt: {{name: {name}, state: absent}}\n")
    try:
        subprocess.run(["dpkg", "-i", str(_deb(tmp_path, name, "1.0"))], check=True, capture_output=True)
        planned = rigger("plan", str(book), "-o", str(tmp_path / "plan.json"), "--output", "jsonl")
        assert planned.rc == 0, planned.stdout + planned.stderr
        assert planned.results("the demo package")[0]["fingerprint"] == {f"apt:{name}": "1.0"}
        subprocess.run(["dpkg", "-i", str(_deb(tmp_path, name, "2.0"))], check=True, capture_output=True)
        refused = rigger("apply", str(tmp_path / "plan.json"))
        assert refused.rc == 2, refused.stdout + refused.stderr
        assert f"apt:{name}: was 1.0 at the review, now 2.0" in refused.stdout, refused.stdout
        assert _dpkg_version(name) == "2.0", "nothing was removed"
    finally:
        if _dpkg_version(name) is not None:
            subprocess.run(["dpkg", "-r", name], capture_output=True, check=True)
