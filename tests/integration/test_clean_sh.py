"""scripts/clean.sh removes exactly what the set-up made, and nothing else.

Real: clean.sh, useradd/userdel, sudoers files, the file system - inside a private mount
namespace (unshare -m) where /etc, /home and /tmp are scratch copies, and a private PID namespace (a
concurrent test run's processes as rigger-ssh are not seen), so the users and files it
deletes are decoys this test made, never the machine's (nor the SSH lab of a concurrent run).
Needs root and util-linux unshare, like the other tests that delete for real.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

IN_NAMESPACE = r"""
set -eu
mount --make-rprivate /
cp -a /etc "$WORK/etc" && mount --bind "$WORK/etc" /etc
mount -t tmpfs tmpfs /home
mkdir "$WORK/tmp" && mount --bind "$WORK/tmp" /tmp
for user in rigger-ssh rigger-nosudo rigger-pw rigger-keep; do  # the copy may have the lab's
    id -u "$user" >/dev/null 2>&1 || useradd -m -s /bin/sh "$user"
    mkdir -p "/home/$user" && chown "$user:" "/home/$user"
done
mkdir -p /etc/sudoers.d  # a machine without sudo has none
echo 'rigger-ssh ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/rigger-tests
echo '# not ours' > /etc/sudoers.d/keep-me
mkdir "/tmp/rigger-fake-nvml-$OUR_TAG-0123" "/tmp/rigger-fake-nvml-$THEIR_TAG-4567"
# this checkout's leftover session directory (recorded), another checkout's (not recorded),
# and a recorded name that is a link now (never followed, never removed)
mkdir /tmp/rigger-test-state-x2 /tmp/rigger-test-state-theirs /tmp/rigger-keep
ln -s /tmp/rigger-keep /tmp/rigger-test-state-link
printf '%s\n' /tmp/rigger-test-state-x2 /tmp/rigger-test-state-link /tmp/rigger-keep \
    > "$WORK/checkout/.cache/rigger-test-dirs"
bash "$WORK/checkout/scripts/clean.sh" > "$WORK/clean.out" 2>&1 || echo "clean rc=$?" >> "$WORK/clean.out"
for user in rigger-ssh rigger-nosudo rigger-pw rigger-keep; do
    if id -u "$user" >/dev/null 2>&1; then echo "user $user"; fi
done
ls -a /home /etc/sudoers.d /tmp | sed 's/^/file /'
"""


@pytest.fixture
def work() -> Iterator[Path]:
    # Not under /tmp: the namespace mounts a scratch directory over /tmp.
    path = Path(tempfile.mkdtemp(prefix="rigger-clean-", dir="/var/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def make_checkout(work: Path) -> Path:
    checkout = work / "checkout"
    (checkout / "scripts" / "ci").mkdir(parents=True)
    for script in ("scripts/clean.sh", "scripts/ci/common.sh"):
        shutil.copy(REPO / script, checkout / script)
    for made in (".venv/bin", ".venv-vllm/bin", ".venv-olah/bin", ".cache/demo/tiny-llama"):
        (checkout / made).mkdir(parents=True)
    (checkout / ".cache" / "mine").mkdir()
    (checkout / "README.md").write_text("kept")
    return checkout


def checkout_tag(checkout: Path) -> str:
    """How fakenvml.py tags a checkout's builds (its resolved path, hashed)."""
    return hashlib.sha256(str(checkout.resolve()).encode()).hexdigest()[:8]


def run_clean(checkout: Path, home: Path) -> tuple[list[str], str]:
    """clean.sh as root in the private namespace (scratch files beside the checkout): what is
    left there, and what it said."""
    work = checkout.parent
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("needs root and util-linux unshare (a private mount namespace)", pytrace=False)
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "--pid", "--fork", "--mount-proc", "sh", "-c", IN_NAMESPACE],
        env={**os.environ, "WORK": str(work), "HOME": str(home), "OUR_TAG": checkout_tag(checkout),
             "THEIR_TAG": checkout_tag(REPO / "elsewhere")},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    clean_out = (work / "clean.out").read_text()
    assert "clean rc=" not in clean_out, clean_out
    return done.stdout.splitlines(), clean_out


def test_clean_removes_the_setups_venvs_users_sudoers_and_fake_nvml_and_nothing_else(work: Path) -> None:
    checkout = make_checkout(work)
    home = work / "home"
    state = home / ".local" / "state" / "rigger" / "vllm"
    state.mkdir(parents=True)
    for name in ("demo-tiny-llama.log", "demo-tiny-llama.log.prev", "my-server.json", "my-server.log"):
        (state / name).write_text("x")
    lock = home / ".cache" / "rigger" / "run.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    report, clean_out = run_clean(checkout, home)
    # System: only the lab's users, its sudoers file and the fake NVML builds went.
    assert [line for line in report if line.startswith("user ")] == ["user rigger-keep"], clean_out
    files = {line.split(" ", 1)[1] for line in report if line.startswith("file ")}
    # Another checkout's fake NVML build stays: a test run there may be loading it.
    assert {"rigger-keep", "keep-me", f"rigger-fake-nvml-{checkout_tag(REPO / 'elsewhere')}-4567"} <= files
    # Test-session directories: only what this checkout recorded making, never a link.
    assert {"rigger-test-state-theirs", "rigger-test-state-link"} <= files, clean_out
    assert not files & {
        "rigger-ssh",
        "rigger-nosudo",
        "rigger-pw",
        "rigger-tests",
        f"rigger-fake-nvml-{checkout_tag(checkout)}-0123",
        "rigger-test-state-x2",
    }, (
        files,
        clean_out,
    )
    # The checkout: venvs and the demo model gone, everything else there.
    assert sorted(p.name for p in checkout.iterdir()) == [".cache", "README.md", "scripts"]
    assert [p.name for p in (checkout / ".cache").iterdir()] == ["mine"]
    # Home: the demo's files and the free run lock gone; another server's files kept.
    assert sorted(p.name for p in state.iterdir()) == ["my-server.json", "my-server.log"]
    assert not lock.exists()


HOLD_THE_RUN_LOCK = """
import sys
from engine.runlock import lockfile
taken = lockfile.acquire({"path": sys.argv[1], "record": {"owner": "a rigger run"}})
print("held" if taken["acquired"] else "not held", flush=True)
sys.stdin.read()  # holds the lock until the test closes stdin
"""


def test_clean_leaves_a_run_lock_that_a_run_holds(work: Path) -> None:
    """The holder is engine/runlock's own host-side lock code in a live process."""
    checkout = make_checkout(work)
    home = work / "home"
    lock = home / ".cache" / "rigger" / "run.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_RUN_LOCK, str(lock)], cwd=REPO, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        _, clean_out = run_clean(checkout, home)
        assert f"keep {lock}: a rigger run holds it" in clean_out, clean_out
        assert "a rigger run" in lock.read_text(), "the holder's record went"
    finally:
        holder.communicate("", timeout=60)
    # Once the run is over the lock is free: removed.
    _, clean_out = run_clean(make_checkout(work / "again"), home)
    assert f"remove {lock}" in clean_out and not lock.exists(), clean_out
