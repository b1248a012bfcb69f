"""A host that answers from a recorded table: the stand-in transport for plan() tests.

``RecordedHost`` is the inner ``Connection`` only. Tests wrap it in the real
``ScopedConnection``, so a planning task meets the same guard as on a real host: a
write, a command not marked ``read_only`` or a mutating probe is refused before it
reaches this fake. Probe answers travel through the real probe parser: a recorded
``{"error": "..."}`` raises ``ProbeError`` exactly as a failed probe on a host does.

Recording (``probes``): probe name -> answer, or a list of answers consumed in order
(the last one repeats). ``files``: path -> text (``None``: absent). ``commands``:
``" ".join(argv)`` -> ``{"rc": 0, "stdout": "", "stderr": ""}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine import probes
from engine.connection.base import Become, CommandResult, ScopedConnection, raise_for_status
from engine.module_api import TaskContext


@dataclass
class RecordedHost:
    probes: Mapping[str, Any] = field(default_factory=dict)
    files: Mapping[str, str | None] = field(default_factory=dict)
    commands: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    host_name: str = "recorded"
    calls: list[tuple[str, Any]] = field(default_factory=list)
    probe_args: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _served: dict[str, int] = field(default_factory=dict)

    def run_probe(self, name: str, args: Mapping[str, Any] | None = None, *, sudo: Become = False) -> dict[str, Any]:
        self.calls.append(("probe", name))
        self.probe_args.append((name, dict(args or {})))
        if name not in self.probes:
            raise AssertionError(f"no recorded answer for probe {name} (args {dict(args or {})})")
        answer = self._next(name, self.probes[name])
        # a recorded failure is {"error": why} alone; real answers may carry an "error" field
        failed = isinstance(answer, Mapping) and set(answer) == {"error"}
        payload = {"error": answer["error"]} if failed else {"ok": answer}
        return probes.parse_output(name, probes.RESULT_MARKER + json.dumps(payload) + "\n", "")

    def _next(self, key: str, recorded: Any) -> Any:
        if not isinstance(recorded, list):
            return recorded
        index = self._served.get(key, 0)
        self._served[key] = index + 1
        return recorded[min(index, len(recorded) - 1)]

    def run(
        self,
        argv: Sequence[str],
        *,
        sudo: Become = False,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        check: bool = True,
        read_only: bool = False,
    ) -> CommandResult:
        line = " ".join(argv)
        self.calls.append(("run", line))
        recorded = self.commands.get(line)
        if recorded is None:
            # a probe under another interpreter (run_probe_under): answered from the probe table
            name = _probe_run(argv, stdin)
            if name is not None and name in self.probes:
                answer = self._next(name, self.probes[name])
                ok = not (isinstance(answer, Mapping) and set(answer) == {"error"})
                payload = {"ok": answer} if ok else {"error": answer["error"]}
                return CommandResult(tuple(argv), 0, probes.RESULT_MARKER + json.dumps(payload) + "\n", "")
        if recorded is None:
            raise AssertionError(f"no recorded answer for command {line!r}")
        result = CommandResult(
            tuple(argv), int(recorded.get("rc", 0)), recorded.get("stdout", ""), recorded.get("stderr", "")
        )
        return raise_for_status(result) if check else result

    def read_file(self, path: str, *, sudo: Become = False) -> bytes | None:
        self.calls.append(("read", path))
        if path not in self.files:
            raise AssertionError(f"no recorded content for {path}")
        text = self.files[path]
        return None if text is None else text.encode()

    def write_file(self, path: str, data: bytes, *, mode: int | None = None, sudo: Become = False) -> None:
        self.calls.append(("write", path))

    def hold_run_lock(self, request: Mapping[str, Any]) -> Any:
        raise AssertionError("a recorded host takes no run lock")

    def close(self) -> None:
        return None


def _probe_run(argv: Sequence[str], stdin: bytes | None) -> str | None:
    """The probe a command runs (``PYTHON -c LOADER N``, the program first on stdin:
    ``probes.invocation``), or None."""
    if len(argv) != 4 or list(argv[1:3]) != ["-c", probes.LOADER] or stdin is None:
        return None
    return _probe_name(stdin[: int(argv[3])].decode())


def _probe_name(program: str) -> str | None:
    """The entry probe of a bundled program (``probes.program``)."""
    for name in probes.probe_paths():
        if program == probes.program(name):
            return name
    return None


def planning_context(
    host: RecordedHost,
    facts: Mapping[str, Any] | None = None,
    variables: Mapping[str, Any] | None = None,
    peers: Mapping[str, RecordedHost] | None = None,
) -> TaskContext:
    """The context plan() gets from the executor: the real scoped connection, planning.
    ``peers`` are the other inventory hosts a group module reaches (``ctx.peer``)."""
    conn = ScopedConnection(host).planning()
    known = {host.host_name: host, **(peers or {})}

    def connect(name: str) -> RecordedHost:
        if name not in known:
            raise AssertionError(f"plan() reached {name}, which this case did not record")
        return known[name]

    return TaskContext(
        host.host_name, conn, dict(facts or {}), dict(variables or {}), task_name="recorded", connect=connect
    )


@dataclass
class Recorder:
    """Wraps a real connection and writes down what plan() asked and got: the source of
    the plan fixtures (tests/plan_fixtures). Answers are kept in call order per probe."""

    inner: Any
    probes: dict[str, list[Any]] = field(default_factory=dict)
    files: dict[str, str | None] = field(default_factory=dict)
    commands: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def host_name(self) -> str:
        return str(self.inner.host_name)

    def run_probe(self, name: str, args: Mapping[str, Any] | None = None, *, sudo: Become = False) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = self.inner.run_probe(name, args, sudo=sudo)
        except probes.ProbeError as exc:
            self.probes.setdefault(name, []).append({"error": str(exc).removeprefix(f"probe {name} failed: ")})
            raise
        self.probes.setdefault(name, []).append(answer)
        return answer

    def run(self, argv: Sequence[str], **kwargs: Any) -> CommandResult:
        name = _probe_run(argv, kwargs.get("stdin"))
        if name is not None:
            result: CommandResult = self.inner.run(argv, **kwargs)
            try:
                self.probes.setdefault(name, []).append(probes.parse_output(name, result.stdout, result.stderr))
            except probes.ProbeError as exc:
                self.probes.setdefault(name, []).append({"error": str(exc).removeprefix(f"probe {name} failed: ")})
            return result
        result = self.inner.run(argv, **kwargs)
        self.commands[" ".join(argv)] = {"rc": result.rc, "stdout": result.stdout, "stderr": result.stderr}
        return result

    def read_file(self, path: str, *, sudo: Become = False) -> bytes | None:
        data: bytes | None = self.inner.read_file(path, sudo=sudo)
        self.files[path] = None if data is None else data.decode("utf-8", "replace")
        return data

    def write_file(self, path: str, data: bytes, *, mode: int | None = None, sudo: Become = False) -> None:
        raise AssertionError("plan() wrote a file")

    def hold_run_lock(self, request: Mapping[str, Any]) -> Any:
        raise AssertionError("a recorder takes no run lock")

    def close(self) -> None:
        self.inner.close()

    def recording(self) -> dict[str, Any]:
        single = {name: answers[0] if len(answers) == 1 else answers for name, answers in self.probes.items()}
        return {"probes": single, "files": self.files, "commands": self.commands}
