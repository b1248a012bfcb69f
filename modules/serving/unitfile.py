"""The systemd unit (and its EnvironmentFile) that runs a vLLM server: the one renderer.

Quoting follows systemd.service(5) and systemd.exec(5) for systemd 252, checked against a
real manager by tests/modules/test_serve_systemd.py (the argv and environment of the
running process are read back from /proc):

- ExecStart: every word is double-quoted (a quoted `;` is no command separator), with `\\`
  and `"` backslash-escaped, tab/newline/CR as C escapes (systemd unescapes them), `%`
  doubled (systemd expands `%` specifiers in the whole line) and `$` doubled (systemd
  expands `$VAR` and `${VAR}` in each word). Other control characters are refused. The
  executable must be an absolute path not starting with a prefix systemd reads (`@-:+!`).
- The environment goes to an EnvironmentFile (written 0600 by the caller: it may hold the
  API key), one `NAME="value"` a line with `\\`, `"`, `$` and backquote escaped; systemd
  neither expands specifiers nor variables there. Names must be valid variable names.
- Paths on `EnvironmentFile=`, `StandardOutput=append:`, `RequiresMountsFor=` get `%`
  doubled; a path with a control character or a leading `-` is refused.

The spec hash is in the unit as `X-Rigger-Spec-Hash=` (systemd ignores `X-` keys), so the
unit says which spec it runs without rigger's state file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.module_api import TaskFailed

SPEC_HASH_KEY = "X-Rigger-Spec-Hash"
# systemd's Restart= values (systemd.service(5))
RESTART_POLICIES = ("no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always")
# what a GPU server waits for: the NVIDIA persistence daemon keeps the driver loaded
ORDERED_AFTER = ("network-online.target", "nvidia-persistenced.service")
_C_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_EXEC_PREFIXES = "@-:+!"


@dataclass(frozen=True)
class UnitSpec:
    """What the unit says; paths are absolute paths on the host."""

    name: str  # the serve_vllm name, for the description
    argv: tuple[str, ...]
    environment_file: str
    log_path: str
    spec_hash: str
    restart: str = "on-failure"
    restart_sec: float = 5.0
    stop_timeout_s: float = 30.0
    mounts: tuple[str, ...] = ()  # RequiresMountsFor=
    wanted_by: str = "multi-user.target"


def _refuse_control(what: str, value: str, allowed: str = "") -> None:
    bad = [c for c in _CONTROL.findall(value) if c not in allowed]
    if bad:
        raise TaskFailed(
            f"serve_vllm: {what} {value!r} holds a control character ({bad[0]!r}), which a systemd unit "
            "cannot carry unchanged; remove it or use manager: detached"
        )


def exec_word(word: str) -> str:
    """One argv word as systemd reads it back unchanged, whatever it holds."""
    _refuse_control("the argument", word, allowed="".join(_C_ESCAPES))
    escaped = word.replace("\\", "\\\\").replace('"', '\\"')
    for char, escape in _C_ESCAPES.items():
        escaped = escaped.replace(char, escape)
    return '"' + escaped.replace("%", "%%").replace("$", "$$") + '"'


def exec_start(argv: Sequence[str]) -> str:
    program = argv[0] if argv else ""
    if not program.startswith("/"):
        raise TaskFailed(
            f"serve_vllm: manager: systemd needs the launcher as an absolute path, not {program!r}: systemd "
            "runs ExecStart with its own PATH, not the one rigger sees (give e.g. /opt/vllm/bin/vllm)"
        )
    return " ".join(exec_word(word) for word in argv)


def unit_path_value(what: str, path: str) -> str:
    """A path on a line whose whole value is the path: specifiers escaped."""
    _refuse_control(what, path)
    if not path.startswith("/"):
        raise TaskFailed(f"serve_vllm: {what} must be an absolute path for a systemd unit, not {path!r}")
    return path.replace("%", "%%")


def _quoted_path(what: str, path: str) -> str:
    """A path in a list of paths (RequiresMountsFor=): quoted, specifiers escaped; no `$` expansion there."""
    return '"' + unit_path_value(what, path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def env_line(name: str, value: str) -> str:
    if not _ENV_NAME.match(name):
        raise TaskFailed(f"serve_vllm: {name!r} is not a valid environment variable name for a systemd unit")
    _refuse_control(f"the value of {name}", value, allowed="\t\n")
    escaped = "".join("\\" + c if c in '\\"$`' else c for c in value)
    return f'{name}="{escaped}"\n'


def render_env_file(env: Mapping[str, str]) -> str:
    head = "# Written by rigger (serve_vllm): the server's environment. Mode 0600: it may hold the API key.\n"
    return head + "".join(env_line(name, str(value)) for name, value in sorted(env.items()))


def render_unit(spec: UnitSpec) -> str:
    if spec.restart not in RESTART_POLICIES:
        raise TaskFailed(f"serve_vllm: unit_restart {spec.restart!r} is none of {', '.join(RESTART_POLICIES)}")
    ordered = " ".join(ORDERED_AFTER)
    mounts = " ".join(_quoted_path("the model directory", path) for path in spec.mounts)
    lines = [
        f"# Written by rigger (serve_vllm {spec.name}); the next run rewrites it: change the task, not this file.",
        "[Unit]",
        f"Description=vLLM server {spec.name} (rigger serve_vllm)",
        f"After={ordered}",
        f"Wants={ordered}",
        *([f"RequiresMountsFor={mounts}"] if mounts else []),
        f"{SPEC_HASH_KEY}={spec.spec_hash}",
        "",
        "[Service]",
        "Type=exec",
        f"ExecStart={exec_start(spec.argv)}",
        f"EnvironmentFile={unit_path_value('the environment file', spec.environment_file)}",
        "WorkingDirectory=~",
        "StandardInput=null",
        # a file, not the journal: the readiness watch and the crash-log readers read the
        # same log the detached server writes (docs/modules/serve_vllm.md says why)
        f"StandardOutput=append:{unit_path_value('log_path', spec.log_path)}",
        "StandardError=inherit",
        f"Restart={spec.restart}",
        f"RestartSec={spec.restart_sec:g}",
        f"TimeoutStopSec={spec.stop_timeout_s:g}",
        "KillMode=control-group",
        "",
        "[Install]",
        f"WantedBy={spec.wanted_by}",
    ]
    return "\n".join(lines) + "\n"
