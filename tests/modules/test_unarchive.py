"""unarchive through the module contract on this machine: real archives, really extracted.

Real: tar and zip archives made here with Python's tarfile and zipfile, the local
connection, the archive_members and archive_extract probes in a Python process of their
own, the file primitive writing every member. Not real: dest is a directory in tmp_path.
Every hostile archive is checked against a dest that must stay empty and a bait
directory outside it that must stay untouched.
"""

from __future__ import annotations

import grp
import io
import os
import pwd
import stat
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, Result, TaskContext, Unchanged


def ctx(planning: bool, variables: dict[str, Any] | None = None) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext("localhost", conn.planning() if planning else conn, {}, variables or {})


def converge(args: dict[str, Any], variables: dict[str, Any] | None = None) -> tuple[Any, Result | None, Any]:
    """plan, apply when there is a change, plan again."""
    spec = registry.get("unarchive")
    full = spec.with_defaults(spec.coerced(args))
    change = spec.plan(ctx(True, variables), full)
    result = spec.apply(ctx(False, variables), full, change) if isinstance(change, Change) and spec.apply else None
    return change, result, spec.plan(ctx(True, variables), full)


def _member(name: str, kind: bytes = tarfile.REGTYPE, body: bytes = b"", mode: int = 0o644, link: str = "") -> Any:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.size = kind, mode, link, len(body)
    return info, io.BytesIO(body) if kind == tarfile.REGTYPE else None


def make_tar(path: Path, members: list[tuple[Any, Any]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as archive:
        for info, body in members:
            archive.addfile(info, body)
    return path


def tool_members() -> list[tuple[Any, Any]]:
    return [
        _member("tools/", tarfile.DIRTYPE, mode=0o750),
        _member("tools/bin/serve", body=b"#!/bin/sh\nexec vllm serve\n", mode=0o755),
        _member("tools/README", body=b"read me\n"),
        _member("tools/serve", tarfile.SYMTYPE, link="bin/serve", mode=0o777),
        _member("tools/bin/serve2", tarfile.LNKTYPE, link="tools/bin/serve"),
    ]


def test_a_tarball_on_the_host_is_extracted_with_modes_and_links_then_left_alone(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "tools.tar.gz", tool_members())
    dest = tmp_path / "opt"
    dest.mkdir()
    change, result, again = converge({"src": str(archive), "dest": str(dest), "remote_src": True, "list_files": True})
    assert isinstance(change, Change) and result is not None and result.changed
    assert result.data["handler"] == "TgzArchive"
    assert result.data["files"] == ["tools", "tools/bin/serve", "tools/README", "tools/serve", "tools/bin/serve2"]
    assert (dest / "tools/bin/serve").read_bytes() == b"#!/bin/sh\nexec vllm serve\n"
    assert stat.S_IMODE((dest / "tools/bin/serve").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "tools").stat().st_mode) == 0o750
    assert os.readlink(dest / "tools/serve") == "bin/serve"
    assert (dest / "tools/bin/serve2").stat().st_ino == (dest / "tools/bin/serve").stat().st_ino
    assert isinstance(again, Unchanged), again

    (dest / "tools/README").write_text("edited\n")
    (dest / "tools/bin/serve").chmod(0o700)
    change, _, again = converge({"src": str(archive), "dest": str(dest), "remote_src": True})
    assert isinstance(change, Change) and change.diffs[0].after == "attrs tools/bin/serve\nwrite tools/README\n"
    assert (dest / "tools/README").read_text() == "read me\n" and isinstance(again, Unchanged)


def test_a_zip_from_the_controller_is_found_in_files_and_extracted(tmp_path: Path) -> None:
    playbook_dir = tmp_path / "play"
    (playbook_dir / "files").mkdir(parents=True)
    with zipfile.ZipFile(playbook_dir / "files" / "cfg.zip", "w") as archive:
        info = zipfile.ZipInfo("conf/vllm.env")
        info.external_attr = (stat.S_IFREG | 0o640) << 16
        archive.writestr(info, "VLLM_PORT=8000\n")
    dest = tmp_path / "etc"
    dest.mkdir()
    change, result, again = converge({"src": "cfg.zip", "dest": str(dest)}, {"playbook_dir": str(playbook_dir)})
    assert isinstance(change, Change) and result is not None and result.data["handler"] == "ZipArchive"
    assert (dest / "conf/vllm.env").read_text() == "VLLM_PORT=8000\n"
    assert stat.S_IMODE((dest / "conf/vllm.env").stat().st_mode) == 0o640
    assert isinstance(again, Unchanged)


HOSTILE = {
    "absolute": ([_member("/tmp/BAIT/x", body=b"x")], "is an absolute path"),
    "dot-dot": ([_member("ok/../../BAIT/x", body=b"x")], "climbs out of dest"),
    "absolute symlink": ([_member("l", tarfile.SYMTYPE, link="/etc")], "leads out of dest"),
    "climbing symlink": ([_member("a/l", tarfile.SYMTYPE, link="../../BAIT")], "leads out of dest"),
    "write below a link member": (
        [_member("l", tarfile.SYMTYPE, link="sub"), _member("l/x", body=b"x")],
        "lies below the symlink member 'l'",
    ),
    "write below a file member": ([_member("f", body=b"x"), _member("f/x", body=b"x")], "below the file member 'f'"),
    "hard link out": ([_member("h", tarfile.LNKTYPE, link="../BAIT/secret")], "names no earlier file"),
    "hard link to nothing in the archive": (
        [_member("h", tarfile.LNKTYPE, link="etc/shadow")],
        "names no earlier file",
    ),
    "character device": ([_member("null", tarfile.CHRTYPE)], "is a device"),
    "FIFO": ([_member("pipe", tarfile.FIFOTYPE)], "is a FIFO"),
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_a_hostile_member_refuses_the_whole_archive_before_anything_is_written(tmp_path: Path, case: str) -> None:
    members, why = HOSTILE[case]
    good = [_member("first-ok", body=b"fine\n")]  # listed first: still never written
    archive = make_tar(tmp_path / "evil.tar", good + members, "w")
    dest = tmp_path / "dest" / "d"
    dest.mkdir(parents=True)
    bait = tmp_path / "BAIT"
    bait.mkdir()
    (bait / "secret").write_text("s\n")
    with pytest.raises(TaskFailed, match=why):
        converge({"src": str(archive), "dest": str(dest), "remote_src": True})
    assert list(dest.iterdir()) == [] and sorted(p.name for p in bait.iterdir()) == ["secret"]


def test_a_link_inside_dest_on_the_way_to_a_member_is_never_written_through(tmp_path: Path) -> None:
    """dest/tools is a symlink (root's own, which the primitive would trust): refused."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "opt"
    dest.mkdir()
    (dest / "tools").symlink_to(elsewhere)
    archive = make_tar(tmp_path / "tools.tar.gz", tool_members()[1:2])
    with pytest.raises(TaskFailed, match=r"tools is a link, not a directory"):
        converge({"src": str(archive), "dest": str(dest), "remote_src": True})
    assert list(elsewhere.iterdir()) == []


def test_a_dest_that_is_a_link_is_the_directory_it_leads_to(tmp_path: Path) -> None:
    """Ansible's isdir(dest) follows a link; the primitive judges it (root's own: trusted)."""
    (tmp_path / "releases" / "r1").mkdir(parents=True)
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "r1")
    archive = make_tar(tmp_path / "tools.tar.gz", tool_members()[:3])
    _, result, again = converge({"src": str(archive), "dest": str(tmp_path / "current"), "remote_src": True})
    assert result is not None and (tmp_path / "releases/r1/tools/README").read_text() == "read me\n"
    assert (tmp_path / "current").is_symlink() and isinstance(again, Unchanged)


def test_owner_group_and_mode_go_to_every_member_and_an_unknown_owner_writes_nothing(tmp_path: Path) -> None:
    """Real accounts of this host: nobody/nogroup (root runs the test, so chown is real)."""
    archive = make_tar(tmp_path / "tools.tar.gz", tool_members()[:4])
    dest = tmp_path / "opt"
    dest.mkdir()
    with pytest.raises(TaskFailed, match="no user named 'no-such-user-7f'"):
        converge({"src": str(archive), "dest": str(dest), "remote_src": True, "owner": "no-such-user-7f"})
    assert list(dest.iterdir()) == []
    args = {"src": str(archive), "dest": str(dest), "remote_src": True, "owner": "nobody", "group": "nogroup"}
    change, _, again = converge({**args, "mode": "0750"})
    assert isinstance(change, Change)
    nobody, nogroup = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
    for rel in ("tools", "tools/bin/serve", "tools/README"):  # members; tools/bin is only implied, as in Ansible
        st = (dest / rel).stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (nobody, nogroup, 0o750), rel
    assert os.lstat(dest / "tools/serve").st_uid == nobody and isinstance(again, Unchanged)


def test_dest_must_be_an_existing_directory_and_creates_skips(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "tools.tar.gz", tool_members())
    with pytest.raises(TaskFailed, match="must be an existing dir"):
        converge({"src": str(archive), "dest": str(tmp_path / "missing"), "remote_src": True})
    change, result, _ = converge(
        {"src": str(archive), "dest": str(tmp_path / "missing"), "remote_src": True, "creates": str(archive)}
    )
    assert isinstance(change, Unchanged) and change.msg == f"skipped, since {archive} exists" and result is None


def test_an_archive_replaced_after_the_plan_is_not_extracted(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "tools.tar.gz", tool_members())
    dest = tmp_path / "opt"
    dest.mkdir()
    spec = registry.get("unarchive")
    args = spec.with_defaults({"src": str(archive), "dest": str(dest), "remote_src": True})
    change = spec.plan(ctx(True), args)
    make_tar(archive, [_member("other", body=b"swapped\n")])
    assert spec.apply is not None and isinstance(change, Change)
    with pytest.raises(TaskFailed, match="the archive changed since it was planned"):
        spec.apply(ctx(False), args, change)
    assert list(dest.iterdir()) == []


def test_not_an_archive_fails_with_the_reason(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tgz"
    junk.write_bytes(b"not an archive at all")
    with pytest.raises(TaskFailed, match="not a tar or zip file"):
        converge({"src": str(junk), "dest": str(tmp_path), "remote_src": True})
