"""Run one of our probes under a chosen interpreter on the host (e.g. vLLM's venv).

``conn.run_probe`` uses the host's default python; the model modules sometimes need
another one (the interpreter vLLM or huggingface_hub is installed for). The probe's
args travel on stdin, so nothing in them (a token) shows in argv or the process list.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine import probes
from engine.module_api import TaskContext


class HostPythonError(Exception):
    """The interpreter is missing, or the probe failed or answered nothing."""


def parse_result(name: str, stdout: str, stderr: str) -> dict[str, Any]:
    # Split on "\n" only: str.splitlines() also breaks at the marker's \x1e.
    for line in reversed(stdout.split("\n")):
        if line.startswith(probes.RESULT_MARKER):
            payload = json.loads(line[len(probes.RESULT_MARKER):])
            if "error" in payload:
                raise HostPythonError(f"probe {name} failed: {payload['error']}")
            answer: dict[str, Any] = payload["ok"]
            return answer
    detail = " | ".join((stderr or stdout).strip().split("\n")[-5:]) or "no output"
    raise HostPythonError(f"probe {name} gave no result: {detail}")


def run_probe_with(
    ctx: TaskContext,
    python: str,
    name: str,
    args: Mapping[str, Any],
    *,
    read_only: bool,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    result = ctx.conn.run(
        [python, "-c", probes.program(name)],
        stdin=json.dumps(dict(args)).encode(),
        check=False,
        read_only=read_only,
        timeout_s=timeout_s,
    )
    if result.rc == 127:
        raise HostPythonError(f"{python} not found on {ctx.host_name}")
    return parse_result(name, result.stdout, result.stderr)
