"""Run test code in a private mount namespace whose protected directories are decoy tmpfs.

Real: util-linux ``unshare --mount``, the kernel's tmpfs, overlayfs and mounts, rigger's
modules and probes on the local connection. Nothing is faked: what a module removes inside
is really removed, which is why the namespace exists. Before any test code runs, the driver
checks that it is not in the host's mount namespace, that every decoy directory is a fresh
tmpfs and that /etc and /root are overlays whose writes land in a private tmpfs; otherwise
it stops without touching anything. Needs root (the suite runs as root).

Decoy accounts (``add_decoy_user``) are lines written into the overlay's /etc/passwd.
Never bind-mount a file over a host file: when anything on the host renames a new file
over it (useradd in a test running beside this one writes /etc/passwd that way), the
kernel detaches every mount on the old name, in every namespace, and the namespace reads
the host's file again. That is what made the decoy home /srv/homes/ops unprotected (and
removed) in some runs: its passwd line had silently gone.
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
# Directories the namespace keeps the contents of, but whose writes never reach the host.
OVERLAID_DIRS = ("/etc", "/root")
RESULT = "\x1edecoy-result "

PRELUDE = f"""
import json, os, subprocess, sys
DECOY_DIRS = {DECOY_DIRS!r}
OVERLAID_DIRS = {OVERLAID_DIRS!r}
if os.readlink("/proc/self/ns/mnt") == os.environ["RIGGER_HOST_MNT_NS"]:
    sys.exit("still in the host's mount namespace: refusing to run")
# The overlays' upper layers live on a tmpfs mounted at /mnt only while they are made:
# overlayfs keeps its own reference, and /mnt becomes a decoy like the others.
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "rigger-decoy-upper", "/mnt"], check=True)
for _dir in OVERLAID_DIRS:
    _layer = "/mnt/" + _dir.strip("/")
    os.makedirs(_layer + "/upper")
    os.makedirs(_layer + "/work")
    _options = f"lowerdir={{_dir}},upperdir={{_layer}}/upper,workdir={{_layer}}/work"
    subprocess.run(["mount", "-t", "overlay", "-o", _options, "rigger-decoy-overlay", _dir], check=True)
subprocess.run(["umount", "-l", "/mnt"], check=True)
for _dir in DECOY_DIRS:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "rigger-decoy", _dir], check=True)
_mounts = [line.split(" ") for line in open("/proc/self/mountinfo")]
_mounted = {{f[4] for f in _mounts if " rigger-decoy " in " ".join(f)}}
_overlaid = {{f[4] for f in _mounts if "rigger-decoy-overlay" in f}}
if not set(DECOY_DIRS) <= _mounted or not set(OVERLAID_DIRS) <= _overlaid:
    _missing = (set(DECOY_DIRS) - _mounted) | (set(OVERLAID_DIRS) - _overlaid)
    sys.exit(f"decoy mounts missing on {{_missing}}: refusing to run")

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


def add_decoy_user(name, uid, home):
    # An account in the namespace's own /etc/passwd (the overlay): no host file is
    # mounted over, so nothing on the host can make it disappear mid-test.
    with open("/etc/passwd", "a") as handle:
        handle.write(f"{{name}}:x:{{uid}}:{{uid}}::{{home}}:/bin/sh\\n")
"""


def run_in_decoy_namespace(body: str, timeout_s: float = 120, launcher: tuple[str, ...] = (), pid: bool = False) -> Any:
    """Run ``body`` (Python; it sets ``result``) in a fresh mount namespace; return ``result``.
    ``launcher``: an argv prefix that starts the namespace from somewhere else (a test of
    the namespace itself). ``pid``: in a fresh PID namespace too (``--pid --fork
    --mount-proc``), for tests that signal: the body is PID 1 there and sees, and can
    reach, only the processes it starts, so even code that signals every process it sees
    ends nothing outside."""
    if os.geteuid() != 0:
        pytest.fail("these tests need root: they make a private mount namespace with decoy tmpfs")
    script = PRELUDE + textwrap.dedent(body) + f"\nprint({RESULT!r} + json.dumps(result))\n"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RIGGER_HOST_MNT_NS": os.readlink("/proc/self/ns/mnt")}
    isolation = ["--pid", "--fork", "--mount-proc"] if pid else []
    proc = subprocess.run(
        [*launcher, "unshare", "--mount", "--propagation", "private", *isolation, sys.executable, "-c", script],
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
