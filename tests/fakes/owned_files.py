"""Files owned by someone else, for the write-ownership tests (local and over SSH).

Not a fake: real files, really chowned (root only). uid 4242 / gid 4243 need no passwd
entry, so no user is created.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OWNER, GROUP = 4242, 4243


def owned(path: Path, mode: int, text: str = "secret=1\n") -> Path:
    path.write_text(text)
    os.chown(path, OWNER, GROUP)
    os.chmod(path, mode)
    return path


def identity(path: Path) -> tuple[int, int, str]:
    """(uid, gid, octal permission bits) of the path itself, not a symlink's target."""
    st = path.lstat()
    return st.st_uid, st.st_gid, oct(stat.S_IMODE(st.st_mode))


@contextmanager
def world_writable_dir() -> Iterator[Path]:
    """A 0777 directory (not sticky, so anyone may replace a file in it) that other users
    can reach: pytest's tmp_path lies under a 0700 directory."""
    path = Path(tempfile.mkdtemp(prefix="rigger-shared-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path)
