"""Run test code in a private mount namespace whose protected directories are decoy tmpfs.

Real: util-linux ``unshare --mount``, the kernel's tmpfs and mounts, rigger's modules and
probes on the local connection. Nothing is faked: what a module removes inside is really
removed, which is why the namespace exists. Before any test code runs, the driver checks
that it is not in the host's mount namespace and that every decoy directory is a fresh
tmpfs; otherwise it stops without touching anything. Needs root (the suite runs as root).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DECOY_DIRS = ("/srv", "/opt", "/media", "/mnt", "/home")
RESULT = "\x1edecoy-result "

PRELUDE = f"""
import json, os, subprocess, sys
DECOY_DIRS = {DECOY_DIRS!r}
if os.readlink("/proc/self/ns/mnt") == os.environ["RIGGER_HOST_MNT_NS"]:
    sys.exit("still in the host's mount namespace: refusing to run")
for _dir in DECOY_DIRS:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "rigger-decoy", _dir], check=True)
_mounted = {{line.split(" ")[4] for line in open("/proc/self/mountinfo") if " rigger-decoy " in line}}
if not set(DECOY_DIRS) <= _mounted:
    sys.exit(f"decoy tmpfs missing on {{set(DECOY_DIRS) - _mounted}}: refusing to run")

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change
from engine.module_api import TaskContext


def _ctx(planning):
    conn = ScopedConnection(LocalConnection())
    return TaskContext(host_name="localhost", conn=conn.planning() if planning else conn, facts={{}}, vars={{}})


def plan(module, args):
    spec = registry.get(module)
    try:
        change = spec.plan(_ctx(True), spec.with_defaults(args))
    except TaskFailed as exc:
        return {{"status": "failed", "msg": str(exc)}}
    if isinstance(change, Change):
        return {{"status": "change", "msg": change.summary}}
    return {{"status": "unchanged", "msg": change.msg}}


def converge(module, args, between=None):
    spec = registry.get(module)
    full = spec.with_defaults(args)
    try:
        change = spec.plan(_ctx(True), full)
        if not isinstance(change, Change):
            return {{"status": "unchanged", "msg": change.msg}}
        if between:
            between()
        result = spec.apply(_ctx(False), full, change)
    except TaskFailed as exc:
        return {{"status": "failed", "msg": str(exc)}}
    return {{"status": "changed" if result.changed else "ok", "msg": result.msg, "plan": change.summary}}


def tree(top):
    found = []
    for root, dirs, files in os.walk(top):
        found += [os.path.join(root, n) for n in dirs + files]
    return sorted(found)


def write(path, text="decoy"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
"""


def run_in_decoy_namespace(body: str, timeout_s: float = 120) -> Any:
    """Run ``body`` (Python; it sets ``result``) in a fresh mount namespace; return ``result``."""
    if os.geteuid() != 0:
        pytest.fail("these tests need root: they make a private mount namespace with decoy tmpfs")
    script = PRELUDE + textwrap.dedent(body) + f"\nprint({RESULT!r} + json.dumps(result))\n"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RIGGER_HOST_MNT_NS": os.readlink("/proc/self/ns/mnt")}
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=timeout_s,
    )
    for line in reversed(proc.stdout.split("\n")):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    pytest.fail(f"decoy namespace run failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
