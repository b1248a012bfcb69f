"""Probes: stdlib-only scripts that run ON the host and answer with JSON.

The engine's generic probes (files, processes, paths, host facts, signals, ports) live
here; a room's probes live in ``modules/<room>/probes/``. Probe names are unique across
all of them; ``probe_source(name)`` finds the file.

Each probe file defines ``main(args: dict) -> dict``. A probe may call another probe
through ``call(name, args)`` if it lists it in ``USES = (...)``. A probe that changes the
host (signals, unlinks, writes) sets ``MUTATES = True``; the scoped connection refuses
those while planning.

``program(name)`` builds one self-contained Python program (the probe plus what it
uses) that reads its args as JSON on stdin and prints one marked JSON line, so one
round trip answers the whole question on any transport. ``bundle(names)`` names a probe
that runs several in that one round trip (fact gathering: the host's and every room's).

May import: engine.errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from engine.errors import RiggerError

ENGINE_PROBES = Path(__file__).resolve().parent
ROOMS_DIR = ENGINE_PROBES.parent.parent / "modules"
RESULT_MARKER = "\x1erigger-probe-result "
_NAME = re.compile(r"^[a-z][a-z0-9_]*\Z")
_USES = re.compile(r"^USES\s*=\s*\(([^)]*)\)", re.MULTILINE)
_MUTATES = re.compile(r"^MUTATES\s*=\s*True\b", re.MULTILINE)
_BUNDLE_PREFIX = "bundle__"
_BUNDLE_SOURCE = """\"\"\"Several read-only probes in one round trip: {member: its answer}.\"\"\"
USES = %(members)r
def main(args):
    return {name: call(name, args.get(name)) for name in USES}
"""

_BOOTSTRAP = r"""
# rigger-host-process (procs.OWN_MARK: never signalled)
import json as _json, sys as _sys
_SOURCES = %(sources)s
_LOADED = {}
def _load(name):
    if name not in _LOADED:
        namespace = {"__name__": "rigger_probe_" + name, "call": call}
        exec(compile(_SOURCES[name], "<probe " + name + ">", "exec"), namespace)
        _LOADED[name] = namespace
    return _LOADED[name]
def call(name, args=None):
    return _load(name)["main"](dict(args or {}))
def _emit(payload):
    _sys.stdout.write(%(marker)r + _json.dumps(payload, default=str) + "\n")
    _sys.stdout.flush()
try:
    _args = _json.loads(_sys.stdin.read() or "{}")
    _emit({"ok": call(%(entry)r, _args)})
except Exception as _exc:
    _emit({"error": type(_exc).__name__ + ": " + str(_exc)})
"""


class ProbeError(RiggerError):
    """A probe failed on the host, or answered something that is not a probe result."""


@cache
def probe_paths() -> dict[str, Path]:
    """Probe name -> file, over the engine's probes and every room's ``probes/``."""
    found: dict[str, Path] = {}
    for directory in (ENGINE_PROBES, *sorted(ROOMS_DIR.glob("*/probes"))):
        for path in sorted(directory.glob("*.py")):
            if path.stem.startswith("_"):
                continue
            if path.stem in found:
                raise ProbeError(f"two probes named {path.stem!r}: {found[path.stem]} and {path}")
            found[path.stem] = path
    return found


def bundle(names: tuple[str, ...]) -> str:
    """The name of a probe that runs ``names`` (read-only probes) in one round trip; its
    args are ``{member: that member's args}``, its answer ``{member: that member's answer}``."""
    for name in names:
        if "__" in name or probe_mutates(name):
            raise ProbeError(f"probe {name!r} cannot be bundled")
    return _BUNDLE_PREFIX + "__".join(names)


@cache
def probe_source(name: str) -> str:
    if not _NAME.match(name):
        raise ProbeError(f"invalid probe name {name!r}")
    if name.startswith(_BUNDLE_PREFIX):
        members = tuple(name.removeprefix(_BUNDLE_PREFIX).split("__"))
        return _BUNDLE_SOURCE % {"members": members}
    path = probe_paths().get(name)
    if path is None:
        raise ProbeError(f"no probe named {name!r}")
    return path.read_text(encoding="utf-8")


def probe_uses(name: str) -> tuple[str, ...]:
    match = _USES.search(probe_source(name))
    if not match:
        return ()
    return tuple(part.strip().strip("'\"") for part in match.group(1).split(",") if part.strip())


def probe_mutates(name: str) -> bool:
    return bool(_MUTATES.search(probe_source(name)))


def closure(name: str) -> dict[str, str]:
    """The sources of the probe and of every probe it (transitively) ``USES``."""
    sources: dict[str, str] = {}
    pending = [name]
    while pending:
        current = pending.pop()
        if current in sources:
            continue
        sources[current] = probe_source(current)
        pending.extend(probe_uses(current))
    return sources


@cache
def program(name: str) -> str:
    """The whole program to run with the host's python (``python3 -c PROGRAM``)."""
    return _BOOTSTRAP % {"sources": repr(closure(name)), "marker": RESULT_MARKER, "entry": name}


# Runs a program that arrives on stdin ahead of its args: ``PYTHON -c LOADER N``, N the
# program's length in bytes. A program in argv would meet the kernel's 128 KiB bound on one
# argument ("Argument list too long": the facts bundle is larger), and a value never goes
# in argv anyway.
LOADER = (
    "import sys;n=int(sys.argv[1]);"
    "exec(compile(sys.stdin.buffer.read(n),'<rigger-host-process>','exec'),{'__name__':'__main__'})"
)


def invocation(name: str, args: Mapping[str, Any] | None = None) -> tuple[list[str], bytes]:
    """What follows the host's python in argv, and its stdin, to run probe ``name``."""
    code = program(name).encode()
    return ["-c", LOADER, str(len(code))], code + json.dumps(dict(args or {})).encode()


@cache
def _compiled(name: str) -> Any:
    return {probe: compile(src, f"<probe {probe}>", "exec") for probe, src in closure(name).items()}


def run_in_process(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run a probe inside this interpreter (the local connection's fast path)."""
    codes = _compiled(name)
    loaded: dict[str, dict[str, Any]] = {}

    def call(probe: str, probe_args: dict[str, Any] | None = None) -> Any:
        if probe not in loaded:
            namespace: dict[str, Any] = {"__name__": f"rigger_probe_{probe}", "call": call}
            exec(codes[probe], namespace)
            loaded[probe] = namespace
        return loaded[probe]["main"](dict(probe_args or {}))

    try:
        answer = call(name, json.loads(json.dumps(args)))
    except Exception as exc:  # a probe's failure is reported, like a remote one
        raise ProbeError(f"probe {name} failed: {type(exc).__name__}: {exc}") from exc
    result: dict[str, Any] = json.loads(json.dumps(answer, default=str))
    return result


def parse_output(name: str, stdout: str, stderr: str) -> dict[str, Any]:
    """Find the marked result line in a probe's stdout.

    Split on newlines only: the marker starts with \\x1e, which ``str.splitlines``
    treats as a line boundary.
    """
    for line in reversed(stdout.split("\n")):
        if line.startswith(RESULT_MARKER):
            payload = json.loads(line[len(RESULT_MARKER) :])
            if "error" in payload:
                raise ProbeError(f"probe {name} failed: {payload['error']}")
            result: dict[str, Any] = payload["ok"]
            return result
    detail = (stderr or stdout).strip().splitlines()[-5:]
    raise ProbeError(f"probe {name} gave no result: {' | '.join(detail) or 'no output'}")
