"""The predicted host: what planning (``rigger plan``, ``--check``) carries forward.

A ``PredictedHost`` wraps a host's connection for a whole check-mode run. After each
planned ``Change`` the executor records its ``effects``; later reads through the same
Connection API (``read_file``, the file probes ``path_info``, ``file_facts``,
``model_files``, the process probes ``procs`` and ``gpus``, ``vllm_state`` of a server an
earlier task starts) answer from that predicted state, so a module plans against what the
earlier tasks would leave without knowing it.

What cannot be predicted (a command's output, a download, a venv's packages: ``Writes``
with no data, ``Fills``) is read from the host as it is, and the read is noted: the
executor reports the task that made it as "known after apply", naming the task that
produces what it read (``unknown_reads``).
"""

from __future__ import annotations

import hashlib
import posixpath
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.connection.base import Become, CommandResult, Connection
from engine.connection.effects import Effect, Fills, Removes, Starts, Stops, Writes

DEFAULT_MODE = 0o644


@dataclass(frozen=True)
class _State:
    """One path as the earlier planned changes leave it."""

    kind: str  # "file" (data known), "absent", "unknown"
    task: str
    seq: int
    data: bytes = b""
    mode: int | None = None
    tree: bool = False  # Removes / Fills: holds for everything below the path too


@dataclass(frozen=True)
class UnknownRead:
    path: str
    task: str  # the earlier task that produces it

    def describe(self) -> str:
        return f"known after apply: reads {self.path}, which '{self.task}' produces"


def _ancestors(path: str) -> Iterable[str]:
    while path not in ("/", ""):
        path = posixpath.dirname(path)
        yield path


class PredictedHost:
    """A Connection that answers reads from the predicted state, then from the host."""

    def __init__(self, inner: Connection):
        self.inner = inner
        self._lock = threading.Lock()
        self._paths: dict[str, _State] = {}
        self._stopped: dict[int, str] = {}
        self._started: dict[str, tuple[Starts, str]] = {}
        self._unknown: list[UnknownRead] = []
        self._seq = 0

    # ---- recording ---------------------------------------------------------------
    def record(self, effects: Sequence[Effect], task: str) -> None:
        with self._lock:
            for effect in effects:
                self._seq += 1
                self._record_one(effect, task)

    def _record_one(self, effect: Effect, task: str) -> None:
        if isinstance(effect, Writes):
            path = posixpath.normpath(effect.path)
            kind = "unknown" if effect.data is None else "file"
            self._paths[path] = _State(kind, task, self._seq, effect.data or b"", effect.mode)
        elif isinstance(effect, Removes):
            path = posixpath.normpath(effect.path)
            self._paths[path] = _State("absent", task, self._seq, tree=True)
        elif isinstance(effect, Fills):
            path = posixpath.normpath(effect.path)
            self._paths[path] = _State("unknown", task, self._seq, tree=True)
        elif isinstance(effect, Stops):
            self._stopped[effect.pid] = task
        elif isinstance(effect, Starts):
            self._started[effect.name] = (effect, task)

    def state(self, path: str) -> _State | None:
        """The latest predicted state of ``path`` (its own, or a tree above it), or None."""
        path = posixpath.normpath(path)
        with self._lock:
            found = [self._paths[path]] if path in self._paths else []
            found += [s for a in _ancestors(path) if (s := self._paths.get(a)) is not None and s.tree]
        return max(found, key=lambda s: s.seq) if found else None

    def _known(self, path: str) -> _State | None:
        """The predicted state, or None: read the host (also where what an earlier task
        leaves is known only after apply; that read is noted)."""
        state = self.state(path)
        if state is not None and state.kind == "unknown":
            with self._lock:
                self._unknown.append(UnknownRead(path, state.task))
            return None
        return state

    def predicted_file(self, path: str) -> tuple[bool, bytes | None]:
        """A controller-side read on a local connection (engine/controller_files.py):
        (known, data) as the earlier planned changes leave ``path``; not known over SSH,
        where the controller is another machine, nor where nothing earlier touched it."""
        if not getattr(self.inner, "controller_is_host", False):
            return False, None
        state = self._known(path)
        if state is None:
            return False, None
        return True, None if state.kind == "absent" else state.data

    def begin_task(self) -> None:
        with self._lock:
            self._unknown = []

    def unknown_reads(self) -> list[UnknownRead]:
        """What the current task read that is known only after an earlier task's apply."""
        with self._lock:
            return list(self._unknown)

    def _below(self, directory: str) -> list[str]:
        prefix = posixpath.normpath(directory) + "/"
        with self._lock:
            return [p for p, s in self._paths.items() if p.startswith(prefix) and s.kind != "absent"]

    def stopped(self, pid: int) -> bool:
        return pid in self._stopped

    def note_started(self, state_path: str) -> None:
        """A read of the state a server an earlier task starts will keep: its pid and
        health are known only after apply."""
        for effect, task in self._started.values():
            if effect.state_path == state_path:
                with self._lock:
                    self._unknown.append(UnknownRead(state_path, task))

    # ---- the Connection API --------------------------------------------------------
    @property
    def host_name(self) -> str:
        return self.inner.host_name

    def read_file(self, path: str, *, sudo: Become = False) -> bytes | None:
        state = self._known(path)
        if state is None:
            return self.inner.read_file(path, sudo=sudo)
        return None if state.kind == "absent" else state.data

    def write_file(self, path: str, data: bytes, *, mode: int | None = None, sudo: Become = False) -> None:
        self.inner.write_file(path, data, mode=mode, sudo=sudo)

    def run(self, argv: Sequence[str], **options: Any) -> CommandResult:
        if options.get("read_only") and argv and argv[0].startswith("/"):
            self._known(argv[0])  # a program an earlier task installs: its answer is known after apply
        return self.inner.run(argv, **options)

    def run_probe(self, name: str, args: Mapping[str, Any] | None = None, *, sudo: Become = False) -> dict[str, Any]:
        answer = self.inner.run_probe(name, args, sudo=sudo)
        patch = _PATCHERS.get(name)
        if patch is None or (not self._paths and not self._stopped and not self._started):
            return answer
        return patch(self, dict(args or {}), answer)

    def hold_run_lock(self, request: Mapping[str, Any]) -> Any:
        return self.inner.hold_run_lock(request)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # what a transport offers beyond the contract (drain_warnings)
        return getattr(self.inner, name)


# ---- the probes that read files and processes, answered from the predicted state --------


def _file_mode(state: _State, real: Mapping[str, Any], text: Callable[[int], str]) -> str:
    if state.mode is not None:
        return text(state.mode)
    return str(real["mode"]) if real.get("exists") and "mode" in real else text(DEFAULT_MODE)


def _path_info(host: PredictedHost, args: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    for path in args.get("paths", []):
        state = host._known(path)
        if state is None:
            continue
        real = answer["paths"].get(path, {})
        if state.kind == "absent":
            answer["paths"][path] = {"exists": False}
        else:
            mode = _file_mode(state, real, lambda m: f"0{m:o}")
            answer["paths"][path] = {**real, "exists": True, "type": "file", "mode": mode, "size": len(state.data)}
    return answer


# What a file an earlier planned change writes has that planning cannot know (owner, times):
# null, as ansible-core's check mode leaves what it could not know, never a missing key
# that fails `stat` (the probe answers a file that exists with every one of these).
_UNKNOWN_UNTIL_APPLIED = dict.fromkeys(
    ("uid", "gid", "owner", "group", "mtime", "atime", "ctime", "readable", "writeable", "executable")
) | {"dev": 0, "inode": 0, "nlink": 1}


def _file_facts(host: PredictedHost, args: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    for path in args.get("paths", []):
        state = host._known(path)
        if state is None:
            continue
        real = answer["paths"].get(path, {})
        if state.kind == "absent":
            answer["paths"][path] = {"exists": False, "path": path}
            continue
        facts = {**_UNKNOWN_UNTIL_APPLIED, **real}
        facts.update(exists=True, path=path, type="file", size=len(state.data))
        facts["mode"] = _file_mode(state, real, lambda m: f"{m:04o}")
        if args.get("checksum"):
            facts["checksum"] = hashlib.new(args["checksum"], state.data).hexdigest()
        answer["paths"][path] = facts
    return answer


def _model_entry(state: _State | None, real: Mapping[str, Any]) -> Mapping[str, Any]:
    if state is None:
        return real
    if state.kind == "absent":
        return {"kind": "missing"}
    return {"kind": "file", "size": len(state.data), "mode": DEFAULT_MODE if state.mode is None else state.mode}


def _model_files(host: PredictedHost, args: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    directory, suffix = args["dir"], args.get("backup_suffix", ".rigger-orig")
    here = host._known(directory)
    if here is not None and here.kind == "absent":
        return {"dir_exists": False, "files": {}}
    if not answer["dir_exists"] and not host._below(directory):
        return answer
    files = {}
    for name in args.get("names", []):
        path = posixpath.join(directory, name)
        real = answer["files"].get(name, {"kind": "missing", "backup": {"kind": "missing"}})
        entry = dict(_model_entry(host._known(path), real))
        entry["backup"] = _model_entry(host._known(path + suffix), real.get("backup", {"kind": "missing"}))
        files[name] = entry
    backed = set(answer.get("backed_up", []))
    for name, entry in files.items():
        (backed.add if entry["backup"]["kind"] != "missing" else backed.discard)(name)
    return {"dir_exists": True, "files": files, "backed_up": sorted(backed)}


def _procs(host: PredictedHost, args: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    answer["processes"] = [p for p in answer.get("processes", []) if not host.stopped(int(p.get("pid", -1)))]
    return answer


def _gpus(host: PredictedHost, args: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    for gpu in answer.get("gpus", []):
        if isinstance(gpu, dict) and isinstance(gpu.get("processes"), list):
            gpu["processes"] = [p for p in gpu["processes"] if not host.stopped(int(p.get("pid", -1)))]
    return answer


def _vllm_state(host: PredictedHost, args: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    host.note_started(str(args.get("state_path")))
    return answer


_PATCHERS: dict[str, Callable[[PredictedHost, dict[str, Any], dict[str, Any]], dict[str, Any]]] = {
    "path_info": _path_info,
    "file_facts": _file_facts,
    "model_files": _model_files,
    "procs": _procs,
    "gpus": _gpus,
    "vllm_state": _vllm_state,
}
