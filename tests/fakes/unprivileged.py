"""``rigger ARGS`` as the unprivileged user ``nobody``: a real setuid process (setpriv).

The venv's python usually lives under /root (pyenv), which nobody cannot enter: the
command runs the system python of the same version with this checkout and the venv's
packages on PYTHONPATH. Whatever the command reads must be readable by nobody.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from cli_in_process import Outcome

REPO = Path(__file__).resolve().parents[2]
NOBODY_UID = 65534


def _python() -> str:
    """A python of this version that nobody can run."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        real = Path(os.path.realpath(candidate))
        if real.is_file() and all(p.stat().st_mode & 0o001 for p in real.parents):
            return str(real)
    raise RuntimeError(f"no {version} that the user nobody can run (the venv's lives under a private directory)")


@contextmanager
def visible_dir() -> Iterator[Path]:
    """A directory root owns that nobody can enter and read (pytest's tmp_path is private)."""
    path = Path(tempfile.mkdtemp(prefix="rigger-nobody-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def nobody_owns(path: Path, mode: int = 0o700) -> Path:
    path.mkdir(mode=mode, exist_ok=True)
    path.chmod(mode)
    os.chown(path, NOBODY_UID, NOBODY_UID)
    return path


def run_as_nobody(
    args: Sequence[str], *, cwd: Path, env: Mapping[str, str], drop: Sequence[str] = (), timeout_s: float = 60
) -> Outcome:
    """``env`` over this process's environment, less the names in ``drop``."""
    site = sysconfig.get_paths()["purelib"]
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    argv = [setpriv, "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", _python()]
    program = "import sys; from engine.cli import main; sys.exit(main())"
    base = {k: v for k, v in os.environ.items() if k not in drop}
    done = subprocess.run(
        [*argv, "-c", program, *args],
        cwd=cwd,
        env={**base, "PYTHONPATH": f"{REPO}:{site}", **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)
