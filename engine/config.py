"""ansible.cfg and the ``ANSIBLE_*`` environment, for the settings a playbook depends on.

The file is found as Ansible finds it, first found wins: ``$ANSIBLE_CONFIG`` (a file, or a
folder holding ansible.cfg), ``./ansible.cfg`` (skipped when the current folder is
world-writable, as Ansible skips it), ``~/.ansible.cfg``, ``/etc/ansible/ansible.cfg``. An
environment variable wins over the file. Relative paths in the file are relative to the
file's folder, in the environment to the current folder (Ansible's rule for path settings).

Settings rigger does not read are named once, in one warning, never silently ignored; a
setting whose value rigger cannot honour (``become_user = app``) is an error naming
file:line. Touches no host.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ValidationError

DEFAULT_ROLES_PATH = ("~/.ansible/roles", "/usr/share/ansible/roles", "/etc/ansible/roles")
DEFAULT_COLLECTIONS_PATH = ("~/.ansible/collections", "/usr/share/ansible/collections")
_TRUE = frozenset({"y", "yes", "on", "1", "true", "t"})


@dataclass(frozen=True)
class _Setting:
    section: str
    keys: tuple[str, ...]  # the file's key and its old spellings
    env: tuple[str, ...]
    kind: str  # "text", "bool", "int", "float", "paths" (os.pathsep), "pathlist" (commas)


SETTINGS: dict[str, _Setting] = {
    "roles_path": _Setting("defaults", ("roles_path",), ("ANSIBLE_ROLES_PATH",), "paths"),
    "collections_path": _Setting(
        "defaults",
        ("collections_path", "collections_paths"),
        ("ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS"),
        "paths",
    ),
    "inventory": _Setting("defaults", ("inventory", "hostfile"), ("ANSIBLE_INVENTORY",), "pathlist"),
    "forks": _Setting("defaults", ("forks",), ("ANSIBLE_FORKS",), "int"),
    "remote_user": _Setting("defaults", ("remote_user",), ("ANSIBLE_REMOTE_USER",), "text"),
    "remote_port": _Setting("defaults", ("remote_port",), ("ANSIBLE_REMOTE_PORT",), "int"),
    "private_key_file": _Setting("defaults", ("private_key_file",), ("ANSIBLE_PRIVATE_KEY_FILE",), "path"),
    "host_key_checking": _Setting("defaults", ("host_key_checking",), ("ANSIBLE_HOST_KEY_CHECKING",), "bool"),
    "timeout": _Setting("defaults", ("timeout",), ("ANSIBLE_TIMEOUT",), "float"),
    "transport": _Setting("defaults", ("transport",), ("ANSIBLE_TRANSPORT",), "text"),
    "become": _Setting("privilege_escalation", ("become",), ("ANSIBLE_BECOME",), "bool"),
    "become_user": _Setting("privilege_escalation", ("become_user",), ("ANSIBLE_BECOME_USER",), "text"),
    "become_method": _Setting("privilege_escalation", ("become_method",), ("ANSIBLE_BECOME_METHOD",), "text"),
    "become_ask_pass": _Setting("privilege_escalation", ("become_ask_pass",), ("ANSIBLE_BECOME_ASK_PASS",), "bool"),
}
# Settings rigger reads but honours only at these values (others are an error naming file:line).
_ROOT_ONLY = {"become_method": ("sudo",), "transport": ("smart", "ssh", "local", "paramiko")}


@dataclass(frozen=True)
class Origin:
    """Where a value came from: ``ansible.cfg:12`` or ``ANSIBLE_FORKS``."""

    where: str
    base: Path  # relative paths start here

    def __str__(self) -> str:
        return self.where


@dataclass(frozen=True)
class Config:
    file: Path | None = None
    values: Mapping[str, Any] = field(default_factory=dict)
    origins: Mapping[str, Origin] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # "[section] key (file:line)" for each setting rigger does not read
    notes: tuple[str, ...] = ()  # why a file was skipped

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    @property
    def roles_path(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p in self.values.get("roles_path", _expanded(DEFAULT_ROLES_PATH)))

    @property
    def collections_path(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p in self.values.get("collections_path", _expanded(DEFAULT_COLLECTIONS_PATH)))

    def warnings(self) -> list[str]:
        found = list(self.notes)
        if self.ignored:
            found.append(f"{self.file}: rigger does not read these settings: {', '.join(self.ignored)}")
        return found


def _expanded(paths: tuple[str, ...]) -> list[str]:
    return [os.path.expanduser(p) for p in paths]


def find_file(environ: Mapping[str, str], cwd: Path) -> tuple[Path | None, list[str]]:
    """The config file Ansible would read, and notes on files it skipped."""
    notes: list[str] = []
    named = environ.get("ANSIBLE_CONFIG")
    if named:
        path = Path(os.path.expanduser(named))
        if path.is_dir():
            path = path / "ansible.cfg"
        if path.is_file():
            return path, notes
    local = cwd / "ansible.cfg"
    if local.is_file():
        if cwd.stat().st_mode & stat.S_IWOTH:
            notes.append(f"{local}: not read: the current folder is world-writable (as Ansible does)")
        else:
            return local, notes
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    for candidate in (home / ".ansible.cfg", Path("/etc/ansible/ansible.cfg")):
        if candidate.is_file():
            return candidate, notes
    return None, notes


def _read_ini(path: Path) -> dict[tuple[str, str], tuple[str, int]]:
    """(section, key) -> (value, line). Ansible's reading: ``#`` and ``;`` start comments,
    `` ;`` ends a value, ``key = value`` or ``key: value``."""
    found: dict[tuple[str, str], tuple[str, int]] = {}
    section = ""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"cannot read the Ansible config: {exc}", file=str(path)) from None
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ValidationError(f"a section header must end with ']': {line!r}", file=str(path), line=number)
            section = line[1:-1].strip()
            continue
        if raw[:1].isspace() and found:
            continue  # a continuation line of the previous value (multi-line values are rare)
        key, sep, value = _split_setting(line)
        if not sep:
            raise ValidationError(f"expected 'key = value', found {line!r}", file=str(path), line=number)
        if not section:
            raise ValidationError("a setting before any [section]", file=str(path), line=number)
        found[(section, key.strip().lower())] = (value.split(" ;")[0].strip(), number)
    return found


def _split_setting(line: str) -> tuple[str, str, str]:
    at = [i for i in (line.find("="), line.find(":")) if i >= 0]
    if not at:
        return line, "", ""
    cut = min(at)
    return line[:cut], line[cut], line[cut + 1 :]


def _convert(name: str, kind: str, text: str, origin: Origin) -> Any:
    if kind == "bool":
        return text.strip().lower() in _TRUE
    if kind in ("int", "float"):
        try:
            return int(text) if kind == "int" else float(text)
        except ValueError:
            raise _bad(origin, f"{name} must be a number, not {text!r}") from None
    if kind == "path":
        return _resolve(text.strip(), origin.base)
    if kind == "paths":
        return [_resolve(p, origin.base) for p in text.split(os.pathsep) if p.strip()]
    if kind == "pathlist":
        return [_resolve(p, origin.base) for p in text.split(",") if p.strip()]
    return text.strip()


def _resolve(path: str, base: Path) -> str:
    expanded = os.path.expanduser(os.path.expandvars(path.strip()))
    return expanded if os.path.isabs(expanded) else str(base / expanded)


def _bad(origin: Origin, message: str) -> ValidationError:
    file, _, line = origin.where.rpartition(":")
    if file and line.isdigit():
        return ValidationError(message, file=file, line=int(line))
    return ValidationError(f"{origin.where}: {message}")


def load(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Config:
    """Read the config file and the environment (ValidationError for a value rigger cannot honour)."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    path, notes = find_file(environ, cwd)
    entries = _read_ini(path) if path is not None else {}
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    used: set[tuple[str, str]] = set()
    for name, setting in SETTINGS.items():
        for key in setting.keys:
            if (setting.section, key) in entries:
                used.add((setting.section, key))
                if name not in values:
                    text, line = entries[(setting.section, key)]
                    assert path is not None
                    origins[name] = Origin(f"{path}:{line}", path.parent)
                    values[name] = _convert(name, setting.kind, text, origins[name])
        for var in setting.env:
            if var in environ:
                origins[name] = Origin(var, cwd)
                values[name] = _convert(name, setting.kind, environ[var], origins[name])
                break
    for name, accepted in _ROOT_ONLY.items():
        if name in values and str(values[name]) not in accepted:
            raise _bad(origins[name], _unsupported_value(name, values[name]))
    ignored = tuple(f"[{s}] {k} (line {line})" for (s, k), (_, line) in entries.items() if (s, k) not in used)
    return Config(file=path, values=values, origins=origins, ignored=ignored, notes=tuple(notes))


def _unsupported_value(name: str, value: Any) -> str:
    if name == "transport":
        return f"transport = {value} is not supported (rigger connects over ssh or local)"
    return f"{name} = {value} is not supported (rigger becomes users with sudo only)"


_current: dict[tuple[Any, ...], Config] = {}


def current() -> Config:
    """The config for this process's folder and environment (read once per combination)."""
    names = ("HOME", "ANSIBLE_CONFIG", *(var for setting in SETTINGS.values() for var in setting.env))
    key = (os.getcwd(), *(os.environ.get(name) for name in names))
    if key not in _current:
        _current[key] = load()
    return _current[key]


# setting -> the host variable rigger's connection and become read (lowest precedence:
# the command line, then play keywords, then inventory variables, then -e win over it)
_AS_VARIABLE = {
    "remote_user": "ansible_user",
    "remote_port": "ansible_port",
    "private_key_file": "ansible_ssh_private_key_file",
    "timeout": "ssh_connect_timeout_s",
    "become": "ansible_become",
    "become_user": "ansible_become_user",
}


def connection_defaults(cfg: Config, command_line: Mapping[str, Any]) -> dict[str, Any]:
    """The connection and become variables ansible.cfg gives, the command line's winning
    (``command_line`` holds the same variable names, None where a flag was not given)."""
    found = {var: cfg.values[name] for name, var in _AS_VARIABLE.items() if name in cfg.values}
    if "host_key_checking" in cfg.values:
        found["host_key_checking"] = "strict" if cfg.values["host_key_checking"] else "off"
    if cfg.values.get("transport") == "local":
        found["ansible_connection"] = "local"
    found.update({k: v for k, v in command_line.items() if v is not None})
    return found
