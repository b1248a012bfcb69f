"""git through the module contract on this machine, against a bare repository made here.

Real: git (this host's), a bare repository in tmp_path with two commits, a tag and a
branch made with it, the local connection, clones and checkouts on disk. Not real: the
repository is a local path (file transport), not a server.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, Result, TaskContext, Unchanged

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}


def git(cwd: Path, *words: str) -> str:
    done = subprocess.run(["git", *words], cwd=cwd, env={**GIT_ENV, "PATH": "/usr/bin:/bin"}, capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A bare repository: v1 (tagged), then v2 on main, and a branch `next` with a third."""
    work = tmp_path_factory.mktemp("work")
    git(work, "init", "-q", "-b", "main")
    (work / "serve.py").write_text("print(1)\n")
    git(work, "add", "serve.py")
    git(work, "commit", "-q", "-m", "v1")
    git(work, "tag", "-a", "v1.0", "-m", "release")
    first = git(work, "rev-parse", "HEAD")
    (work / "serve.py").write_text("print(2)\n")
    git(work, "commit", "-q", "-am", "v2")
    second = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "-b", "next")
    (work / "serve.py").write_text("print(3)\n")
    git(work, "commit", "-q", "-am", "v3")
    third = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "main")
    git(work, "checkout", "-q", "-b", "with-submodule")
    (work / ".gitmodules").write_text('[submodule "kernels"]\n\tpath = kernels\n\turl = ../kernels.git\n')
    git(work, "add", ".gitmodules")
    git(work, "commit", "-q", "-m", "submodule")
    git(work, "checkout", "-q", "main")
    bare = tmp_path_factory.mktemp("remote") / "inference.git"
    git(work, "clone", "-q", "--bare", str(work), str(bare))
    return {"url": str(bare), "v1": first, "v2": second, "v3": third}


def converge(args: dict[str, Any]) -> tuple[Any, Result | None, Any]:
    spec = registry.get("git")
    full = spec.with_defaults(spec.coerced(args))
    conn = ScopedConnection(LocalConnection())
    change = spec.plan(TaskContext("localhost", conn.planning(), {}, {}), full)
    result = spec.apply(TaskContext("localhost", conn, {}, {}), full, change) if isinstance(change, Change) else None
    return change, result, spec.plan(TaskContext("localhost", conn.planning(), {}, {}), full)


def test_a_pinned_tag_is_cloned_then_left_alone(repo: dict[str, str], tmp_path: Path) -> None:
    dest = tmp_path / "src"
    change, result, again = converge({"repo": repo["url"], "dest": str(dest), "version": "v1.0"})
    assert isinstance(change, Change) and change.summary == f"clone {repo['url']} at v1.0 into {dest}"
    assert result is not None and result.data == {"before": None, "after": repo["v1"], "remote_url_changed": False}
    assert (dest / "serve.py").read_text() == "print(1)\n"
    assert isinstance(again, Unchanged) and again.data["after"] == repo["v1"]


def test_a_pinned_commit_moves_an_existing_clone_and_a_branch_is_checked_out_as_itself(
    repo: dict[str, str], tmp_path: Path
) -> None:
    dest = tmp_path / "src"
    converge({"repo": repo["url"], "dest": str(dest), "version": repo["v1"]})
    assert (dest / "serve.py").read_text() == "print(1)\n"
    change, result, again = converge({"repo": repo["url"], "dest": str(dest), "version": repo["v2"]})
    assert isinstance(change, Change) and result is not None
    assert result.data["before"] == repo["v1"] and result.data["after"] == repo["v2"]
    assert isinstance(again, Unchanged)
    _, result, again = converge({"repo": repo["url"], "dest": str(dest), "version": "next"})
    assert result is not None and result.data["after"] == repo["v3"] and isinstance(again, Unchanged)
    assert git(dest, "rev-parse", "--abbrev-ref", "HEAD") == "next"


def test_submodules_are_not_cloned_and_say_so(repo: dict[str, str], tmp_path: Path) -> None:
    _, result, _ = converge({"repo": repo["url"], "dest": str(tmp_path / "a"), "version": "with-submodule"})
    assert result is not None and "has submodules (.gitmodules), which rigger does not clone" in result.warnings[0]
    args = {"repo": repo["url"], "dest": str(tmp_path / "b"), "version": "with-submodule", "recursive": False}
    _, result, _ = converge(args)
    assert result is not None and result.warnings == ()
    _, result, _ = converge({"repo": repo["url"], "dest": str(tmp_path / "c")})
    assert result is not None and result.warnings == ()


def test_check_mode_clones_nothing(repo: dict[str, str], tmp_path: Path) -> None:
    spec = registry.get("git")
    args = spec.with_defaults({"repo": repo["url"], "dest": str(tmp_path / "src"), "depth": 1})
    change = spec.plan(TaskContext("localhost", ScopedConnection(LocalConnection()).planning(), {}, {}), args)
    assert isinstance(change, Change) and change.payload["after"] == repo["v2"] and not (tmp_path / "src").exists()


def test_local_modifications_fail_without_force_and_are_reset_with_it(repo: dict[str, str], tmp_path: Path) -> None:
    dest = tmp_path / "src"
    converge({"repo": repo["url"], "dest": str(dest), "version": "v1.0"})
    (dest / "serve.py").write_text("edited by hand\n")
    with pytest.raises(TaskFailed, match=r"Local modifications exist in the destination: .* \(force=no\)"):
        converge({"repo": repo["url"], "dest": str(dest), "version": "v1.0"})
    _, result, again = converge({"repo": repo["url"], "dest": str(dest), "version": "v1.0", "force": True})
    assert result is not None and (dest / "serve.py").read_text() == "print(1)\n" and isinstance(again, Unchanged)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ({"repo": "--upload-pack=touch /tmp/x", "version": "HEAD"}, "starts with '-'"),
        ({"repo": "ext::sh -c touch% /tmp/x", "version": "HEAD"}, "ext transport"),
        ({"version": "--orphan"}, "starts with '-'"),
        ({"version": "abc1234"}, "short commit id"),
        ({"version": "no-such-branch"}, "Failed to find version 'no-such-branch'"),
    ],
)
def test_option_like_and_unknown_values_are_refused_before_anything_runs(
    repo: dict[str, str], tmp_path: Path, args: dict[str, Any], why: str
) -> None:
    with pytest.raises(TaskFailed, match=why):
        converge({"repo": repo["url"], "dest": str(tmp_path / "src"), **args})
    assert not (tmp_path / "src").exists()
