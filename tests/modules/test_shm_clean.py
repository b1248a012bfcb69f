"""ensure_shm_clean on real files in a temp directory on tmpfs and on the real /dev/shm.

Real: the module, the shm/shm_clean probes, LocalConnection, real processes holding
segments open or mapped (read through /proc/*/fd and /proc/*/maps), CPython's own
SharedMemory segments in /dev/shm. Nothing is faked.
"""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from decoyns import run_in_decoy_namespace

from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import Change, Result, TaskContext, TaskFailed, Unchanged
from modules.gpu import ensure_shm_clean as mod

OLD = time.time() - 3600
REPO = Path(__file__).resolve().parents[2]


def ctx(planning: bool = False) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext(host_name="localhost", conn=conn.planning() if planning else conn, facts={}, vars={})


def args_for(path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "path": str(path),
        "patterns": mod.DEFAULT_PATTERNS,
        "min_age_s": 60,
        "owners": [],
        "min_free_mib": 0,
        **extra,
    }


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A fresh directory on the real /dev/shm tmpfs (the module refuses any other filesystem)."""
    path = Path(tempfile.mkdtemp(prefix="rigger-shm-test-", dir="/dev/shm"))
    yield path
    shutil.rmtree(path)


def segment(directory: Path, name: str, size: int = 8192, *, old: bool = True) -> Path:
    path = directory / name
    path.write_bytes(b"\x01" * size)
    if old:
        os.utime(path, (OLD, OLD))
    return path


HOLD = """
import ctypes, mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
if sys.argv[2] == "map-only":  # libc mmap: Python's mmap object would keep a dup'ed fd
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    address = libc.mmap(None, os.fstat(fd).st_size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    os.close(fd)
    assert not any(os.path.realpath("/proc/self/fd/" + n) == sys.argv[1]
                   for n in os.listdir("/proc/self/fd")), "fd still open"
elif sys.argv[2] == "both":
    mapping = mmap.mmap(fd, 0)
print("ready", flush=True)
time.sleep(300)
"""


@pytest.fixture
def holders() -> Iterator[Any]:
    started: list[subprocess.Popen[str]] = []

    def hold(path: Path, how: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), how], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    yield hold
    for proc in started:
        proc.kill()
        proc.wait()


def converge(args: dict[str, Any]) -> tuple[Change, Result, Unchanged]:
    change = mod.plan(ctx(planning=True), args)
    assert isinstance(change, Change), change
    result = mod.apply(ctx(), args, change)
    again = mod.plan(ctx(planning=True), args)
    assert isinstance(again, Unchanged), f"not idempotent: {again}"
    return change, result, again


def names(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def test_removes_only_leaked_segments(shm_dir: Path, holders: Any) -> None:
    leaked = ["psm_0a1b2c3d", "sem.mp-k3j_9x2q", "nccl-Ab3dE9", "torch_31337_4242_0", "vllm_offload_engine0.mmap"]
    for name in leaked:
        segment(shm_dir, name)
    mapped = segment(shm_dir, "psm_11111111")
    opened = segment(shm_dir, "psm_22222222")
    segment(shm_dir, "psm_33333333", old=False)  # too young
    segment(shm_dir, "psm_not_hex_")  # CPython names are 8 hex digits
    segment(shm_dir, "keep-me.txt")
    (shm_dir / "nccl-dirdir").mkdir()
    os.utime(shm_dir / "nccl-dirdir", (OLD, OLD))
    holders(mapped, "map-only")
    holders(opened, "fd-only")
    before = names(shm_dir)

    change, result, again = converge(args_for(shm_dir))

    assert sorted(n["name"] for n in change.payload["names"]) == sorted(leaked)
    assert sorted(result.data["removed"]) == sorted(leaked)
    assert result.data["bytes_freed"] == 5 * 8192
    assert names(shm_dir) == before - set(leaked)
    kept = "\n".join(again.data["kept"])
    assert "psm_11111111: in use by pid" in kept
    assert "psm_22222222: in use by pid" in kept
    assert "psm_33333333: too young" in kept
    assert "nccl-dirdir: not a regular file (directory)" in kept


def test_check_mode_touches_nothing(shm_dir: Path) -> None:
    segment(shm_dir, "psm_0a1b2c3d")
    change = mod.plan(ctx(planning=True), args_for(shm_dir))
    assert isinstance(change, Change)
    assert change.diffs[0].before == "psm_0a1b2c3d\n"
    assert names(shm_dir) == {"psm_0a1b2c3d"}


def test_symlink_is_never_followed_nor_removed(shm_dir: Path) -> None:
    shm = shm_dir / "shm"
    shm.mkdir()
    target = segment(shm_dir, "precious-data")
    (shm / "psm_deadbeef").symlink_to(target)
    os.utime(shm / "psm_deadbeef", (OLD, OLD), follow_symlinks=False)
    outcome = mod.plan(ctx(planning=True), args_for(shm))
    assert isinstance(outcome, Unchanged)
    assert "psm_deadbeef: not a regular file (symlink)" in outcome.msg
    assert (shm / "psm_deadbeef").is_symlink() and target.exists()


def test_a_segment_replaced_after_planning_is_left(shm_dir: Path) -> None:
    path = segment(shm_dir, "psm_0a1b2c3d")
    change = mod.plan(ctx(planning=True), args_for(shm_dir))
    assert isinstance(change, Change)
    path.unlink()
    segment(shm_dir, "psm_0a1b2c3d")  # same name, new inode
    result = mod.apply(ctx(), args_for(shm_dir), change)
    assert result.data["removed"] == []
    assert result.data["skipped"] == [{"name": "psm_0a1b2c3d", "reason": "replaced by another file since planning"}]
    assert path.exists()


def test_owners_limit_what_is_removed(shm_dir: Path) -> None:
    mine = segment(shm_dir, "psm_0a1b2c3d")
    theirs = segment(shm_dir, "psm_4e5f6a7b")
    os.chown(theirs, 65534, 65534)
    _, result, _ = converge(args_for(shm_dir, owners=["root"]))
    assert result.data["removed"] == ["psm_0a1b2c3d"]
    assert theirs.exists() and not mine.exists()


def test_min_free_mib_fails_with_what_is_left(shm_dir: Path, holders: Any) -> None:
    held = segment(shm_dir, "psm_11111111")
    holders(held, "both")
    with pytest.raises(
        TaskFailed,
        match=r"has \d+ MiB free, need at least 99999999 MiB"
        r"\nleft in place: psm_11111111: in use by pid",
    ):
        mod.plan(ctx(planning=True), args_for(shm_dir, min_free_mib=99999999))


def test_missing_directory_is_a_clear_failure(shm_dir: Path) -> None:
    with pytest.raises(TaskFailed, match=r"cannot inspect .*/nope"):
        mod.plan(ctx(planning=True), args_for(shm_dir / "nope"))


LEAK = """
import os, signal, sys
from multiprocessing import shared_memory
segment = shared_memory.SharedMemory(create=True, size=1 << 20)
print(segment.name, flush=True)
if sys.argv[1] == "leak":  # SIGKILL with its resource tracker: nothing cleans up
    os.killpg(os.getpgid(0), signal.SIGKILL)
sys.stdin.read()
"""


def test_real_dev_shm_leaked_cpython_segment(holders: Any) -> None:
    """Only the two segments this test creates are candidates (patterns name them)."""
    leaker = subprocess.run(
        [sys.executable, "-c", LEAK, "leak"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        start_new_session=True,
    )
    leaked = leaker.stdout.strip()
    live = subprocess.Popen(
        [sys.executable, "-c", LEAK, "keep"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert live.stdout is not None
        in_use = live.stdout.readline().strip()
        assert (Path("/dev/shm") / leaked).is_file(), f"no leaked segment: {leaker.stderr}"
        args = args_for(Path("/dev/shm"), patterns=[leaked, in_use], min_age_s=0)
        _, result, again = converge(args)
        assert result.data["removed"] == [leaked]
        assert (Path("/dev/shm") / in_use).exists()
        assert f"{in_use}: in use by pid {live.pid}" in again.msg
    finally:
        live.communicate("", timeout=30)
        (Path("/dev/shm") / leaked).unlink(missing_ok=True)


def test_not_root_it_cannot_prove_a_segment_unused(shm_dir: Path) -> None:
    """As `nobody` (real setpriv, system python) root's processes cannot be inspected."""
    if shutil.which("setpriv") is None or not Path("/usr/bin/python3").exists():
        pytest.fail("needs setpriv (util-linux) and /usr/bin/python3 (scripts/ci/setup_gpu.sh)")
    shm = Path(tempfile.mkdtemp(prefix="rigger-shm-nobody-", dir="/dev/shm"))
    try:
        shm.chmod(0o777)
        leaked = segment(shm, "psm_0a1b2c3d")
        os.chown(leaked, 65534, 65534)
        script = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(REPO)!r})
            from engine.connection.base import ScopedConnection
            from engine.connection.local import LocalConnection
            from engine.module_api import TaskContext
            from modules.gpu import ensure_shm_clean as mod
            conn = ScopedConnection(LocalConnection()).planning()
            print(mod.plan(TaskContext("localhost", conn, {{}}, {{}}), {args_for(shm)!r}).msg)
        """)
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr
        assert "psm_0a1b2c3d: cannot prove it unused: " in done.stdout
        assert "cannot be inspected (run with become)" in done.stdout
        assert leaked.exists()
    finally:
        shutil.rmtree(shm)


def test_a_directory_that_is_not_a_tmpfs_is_refused_before_anything_is_planned() -> None:
    """Fails today: `path: /etc` with `patterns: ['*']` planned to remove /etc/passwd and
    /etc/shadow. Plan only: a plan cannot remove anything."""
    for spelling in ("/etc", "/etc/", "//dev/shm/../../etc", "/dev/shm/../../etc/."):
        with pytest.raises(TaskFailed, match=r"is not a tmpfs") as caught:
            mod.plan(ctx(planning=True), args_for(Path(spelling), patterns=["*"], min_age_s=0))
        assert "passwd" not in str(caught.value)
    assert Path("/etc/passwd").exists()


def test_segments_on_a_disk_directory_are_left_alone(tmp_path: Path) -> None:
    """Fails today: matching files in any directory (here pytest's, on disk) were removed."""
    segment(tmp_path, "psm_0a1b2c3d")
    with pytest.raises(TaskFailed, match=r"is not a tmpfs: only a shared-memory directory is cleaned"):
        mod.plan(ctx(planning=True), args_for(tmp_path))
    assert names(tmp_path) == {"psm_0a1b2c3d"}


def test_the_directory_is_judged_resolved_and_nothing_below_or_beside_it_is_touched(
    shm_dir: Path, tmp_path: Path
) -> None:
    """Fails today: a symlink to /dev/shm could not be opened (O_NOFOLLOW on the spelling),
    and one to a disk directory was cleaned. Nothing in a subdirectory, nothing a symlink
    points at, is removed."""
    segment(shm_dir, "psm_0a1b2c3d")
    (shm_dir / "sub").mkdir()
    inner = segment(shm_dir / "sub", "psm_11111111")
    outside = segment(tmp_path, "psm_22222222")
    (shm_dir / "psm_33333333").symlink_to(outside)
    (tmp_path / "to-shm").symlink_to(shm_dir)
    (tmp_path / "to-disk").symlink_to(tmp_path)

    change, result, _ = converge(args_for(tmp_path / "to-shm"))

    assert result.data["removed"] == ["psm_0a1b2c3d"]
    assert change.summary.endswith(f"from {tmp_path / 'to-shm'} ({shm_dir}) (8192 bytes): psm_0a1b2c3d")
    assert inner.exists() and outside.exists() and (shm_dir / "psm_33333333").is_symlink()
    with pytest.raises(TaskFailed, match="is not a tmpfs"):
        mod.plan(ctx(planning=True), args_for(tmp_path / "to-disk"))


WITHOUT_CTYPES = """
import sys
sys.modules["ctypes"] = None  # a host python without ctypes: mountinfo decides
from engine.connection.local import LocalConnection
from engine.probes import ProbeError
for path in sys.argv[1:]:
    try:
        print(LocalConnection().run_probe("shm", {"path": path, "patterns": ["*"]})["path"])
    except ProbeError as exc:
        print(exc)
"""


def test_without_ctypes_the_filesystem_comes_from_mountinfo(shm_dir: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_CTYPES, str(shm_dir), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    first, second = done.stdout.splitlines()
    assert first == str(shm_dir)
    assert second.endswith(f"{tmp_path} ({tmp_path}) is not a tmpfs: only a shared-memory directory is cleaned")


KEEPER = "mount -t tmpfs rigger-shm-ns /srv && mkdir /srv/seg && echo ready && exec sleep 300"


def test_a_path_through_proc_root_cleans_that_namespace_s_tmpfs() -> None:
    """/proc/PID/root/... is resolved by the kernel (into the keeper's private mount
    namespace, as the incident test uses it), never by string into this namespace's /srv.
    Real: unshare, a private tmpfs; the segment is one the test made."""
    keeper = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", KEEPER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert keeper.stdout is not None and keeper.stdout.readline().strip() == "ready"
        inside = Path(f"/proc/{keeper.pid}/root/srv/seg")
        segment(inside, "psm_0a1b2c3d")
        change, result, _ = converge(args_for(inside))
        assert result.data["removed"] == ["psm_0a1b2c3d"]
        assert f"from {inside} (/srv/seg)" in change.summary
        assert names(inside) == set()
    finally:
        keeper.kill()
        keeper.wait()


def test_in_a_pid_namespace_that_is_not_the_hosts_no_segment_is_proven_unused() -> None:
    """Issue 18: a /dev/shm segment mapped by a process rigger cannot see (another PID
    namespace) was removed. Real: /dev/shm (the host's tmpfs, seen from a private mount
    namespace), a segment this test creates and maps, util-linux unshare --pid; the module
    runs as root in the child PID namespace, where this test's process is invisible."""
    name = f"psm_{os.getpid() & 0xFFFFFFFF:08x}"
    path = Path("/dev/shm") / name
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, 8192)
        os.utime(path, (OLD, OLD))
        with mmap.mmap(fd, 8192):
            args = {"path": "/dev/shm", "patterns": [name], "min_age_s": 0, "owners": []}
            result = run_in_decoy_namespace(
                f"result = {{'plan': plan('ensure_shm_clean', {args!r}), 'ns': os.readlink('/proc/self/ns/pid')}}",
                pid=True,
            )
            assert path.exists(), f"a segment mapped outside the namespace was removed: {result}"
        assert result["ns"] != os.readlink("/proc/self/ns/pid")
        assert result["plan"]["status"] == "unchanged", result
        assert "PID namespace that is not the host's" in result["plan"]["msg"], result
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
