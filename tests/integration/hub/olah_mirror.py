"""A real hub server on loopback: the olah mirror in offline mode over a git repository.

The repository is built here with git and git-lfs (shards committed as LFS pointer files,
contents under .git/lfs/objects), at ``<mirrors-path>/models/<org>/<name>`` as olah's
offline mirror expects. olah runs from its own venv (.venv-olah, made by
scripts/ci/setup_hub.sh) because its dependencies may clash with ours.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ports import free_port

ROOT = Path(__file__).resolve().parents[3]
OLAH_CLI = ROOT / ".venv-olah" / "bin" / "olah-cli"
REPO_ID = "testorg/tiny"
SHARDS = {
    "model-00001-of-00002.safetensors": 96 * 1024,
    "model-00002-of-00002.safetensors": 48 * 1024,
}


def safetensors_bytes(name: str, payload_len: int) -> bytes:
    """A valid safetensors file: u64 header length, JSON header, tensor bytes."""
    seed = name.encode()
    data = (seed * (payload_len // len(seed) + 1))[:payload_len]
    header = json.dumps(
        {
            "weight": {"dtype": "U8", "shape": [payload_len], "data_offsets": [0, payload_len]},
            "__metadata__": {"format": "pt"},
        }
    ).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + data


def repo_files() -> dict[str, bytes]:
    files = {name: safetensors_bytes(name, size) for name, size in SHARDS.items()}
    files["model.safetensors.index.json"] = (
        json.dumps(
            {
                "metadata": {"total_size": sum(SHARDS.values())},
                "weight_map": {f"layers.{i}.weight": name for i, name in enumerate(SHARDS)},
            },
            indent=2,
        )
        + "\n"
    ).encode()
    files["config.json"] = (
        json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_attention_heads": 4}, indent=2)
        + "\n"
    ).encode()
    return files


def _git(repo: Path, *argv: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=rigger-tests", "-c", "user.email=tests@rigger.invalid", *argv],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def build_repo(mirror_root: Path, repo_id: str = REPO_ID, files: dict[str, bytes] | None = None) -> str:
    """Create the git repository olah serves; returns the commit sha."""
    if shutil.which("git-lfs") is None:
        raise RuntimeError("git-lfs is not installed: run scripts/ci/setup_hub.sh")
    repo = mirror_root / "models" / repo_id
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "lfs", "install", "--local")
    _git(repo, "lfs", "track", "*.safetensors")
    for name, data in (files or repo_files()).items():
        (repo / name).write_bytes(data)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "tiny model")
    pointers = _git(repo, "lfs", "ls-files")
    if "safetensors" not in pointers:
        raise RuntimeError(f"git-lfs did not take the shards: {pointers!r}")
    return _git(repo, "rev-parse", "HEAD")


@dataclass
class OlahMirror:
    workdir: Path
    port: int = field(default_factory=free_port)
    commit: str = ""
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mirror_root(self) -> Path:
        return self.workdir / "mirror"

    def _config(self) -> Path:
        path = self.workdir / "olah.toml"
        path.write_text(
            "[basic]\n"
            f'host = "127.0.0.1"\nport = {self.port}\n'
            f'repos-path = "{self.workdir / "cache"}"\n'
            f'mirrors-path = ["{self.mirror_root}"]\n'
            f'mirror-netloc = "127.0.0.1:{self.port}"\n'
            f'mirror-lfs-netloc = "127.0.0.1:{self.port}"\n\n'
            "[accessibility]\noffline = true\n"
        )
        return path

    def start(self, timeout_s: float = 60) -> None:
        if not OLAH_CLI.exists():
            raise RuntimeError(f"{OLAH_CLI} missing: run scripts/ci/setup_hub.sh")
        log = open(self.workdir / "olah.log", "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(
            [str(OLAH_CLI), "-c", str(self._config())],
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        url = f"{self.endpoint}/api/models/{REPO_ID}/revision/main"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"olah exited {self.process.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"olah did not answer {url} within {timeout_s}s: {self.log_tail()}")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def log_tail(self) -> str:
        path = self.workdir / "olah.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""
