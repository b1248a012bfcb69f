"""Which processes around a GPU holder belong to the same vLLM server (pure functions).

A process is *vLLM-shaped* by its command line: a ``VLLM::*`` process title (EngineCore,
workers), the ``vllm`` CLI, ``python -m vllm...`` or a python running the ``vllm`` script,
or a python ``multiprocessing`` helper (resource tracker, spawn, forkserver). Shape alone
never condemns a process: a relative must also be tied to the holder by ancestry. The
family of a seed (a holder, or a process kill_patterns matched) is:

- its vLLM-shaped ancestors, up to the first one that is not vLLM-shaped (the top);
- the vLLM-shaped descendants of that top, through vLLM-shaped parents only.

A session is never a tie: when the API server was killed, its EngineCore (re-parented to
init) is the top, and its workers are its children. Two servers orphaned in one session
(started from one shell that has exited) are two families: ending the one on GPU 0 never
reaches the other team's on GPU 1. A shell, an editor or ``tail -f vllm.log`` is never
vLLM-shaped, so it is never part of a family either.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

Proc = Mapping[str, Any]

_PYTHON = re.compile(r"^python[0-9.]*\Z")
_MP_HELPER = re.compile(r"^-c from multiprocessing\.(resource_tracker|spawn|forkserver) import |--multiprocessing-fork")
_VLLM_MODULE = re.compile(r"^-m vllm(\.| |$)")
_VLLM_SCRIPT = re.compile(r"^(\S*/)?vllm (serve|run-batch)\b")


def vllm_shaped(proc: Proc) -> bool:
    """True for vLLM's own processes and python multiprocessing helpers (see the module doc)."""
    cmdline = str(proc.get("cmdline") or "")
    argv0, _, rest = cmdline.partition(" ")
    if argv0.startswith("VLLM::") or str(proc.get("name") or "").startswith("VLLM::"):
        return True
    program = os.path.basename(argv0)
    if program == "vllm":
        return rest.split(" ", 1)[0] in ("serve", "run-batch")
    if not _PYTHON.match(program):
        return False
    rest = re.sub(r"^(-[a-zA-Z]+ )*(?=-[cm] |--multiprocessing-fork|\S*vllm )", "", rest)
    return bool(_VLLM_MODULE.match(rest) or _VLLM_SCRIPT.match(rest) or _MP_HELPER.search(rest))


def _children(procs: Iterable[Proc]) -> dict[int, list[Proc]]:
    children: dict[int, list[Proc]] = {}
    for proc in procs:
        children.setdefault(int(proc["ppid"]), []).append(proc)
    return children


def _shaped_descendants(root: Proc, children: Mapping[int, list[Proc]]) -> set[int]:
    found: set[int] = set()
    pending = [root]
    while pending:
        for child in children.get(int(pending.pop()["pid"]), []):
            if child["pid"] not in found and vllm_shaped(child):
                found.add(int(child["pid"]))
                pending.append(child)
    return found


def _top(seed: Proc, by_pid: Mapping[int, Proc]) -> Proc:
    top, seen = seed, {int(seed["pid"])}
    while True:
        parent = by_pid.get(int(top["ppid"]))
        if parent is None or int(parent["pid"]) <= 1 or parent["pid"] in seen or not vllm_shaped(parent):
            return top
        seen.add(int(parent["pid"]))
        top = parent


def family(seed: Proc, procs: Iterable[Proc]) -> set[int]:
    """Pids of the seed's vLLM family (see the module doc), the seed itself included."""
    table = list(procs)
    by_pid = {int(p["pid"]): p for p in table}
    children = _children(table)
    if not vllm_shaped(seed):
        return {int(seed["pid"])} | _shaped_descendants(seed, children)
    top = _top(seed, by_pid)
    return {int(seed["pid"]), int(top["pid"])} | _shaped_descendants(top, children)
