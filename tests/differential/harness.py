"""Differential harness: run one case through real ansible-core and through rigger, compare.

A case is a folder under tests/differential/cases/ (see README.md there): an inventory,
an optional playbook and a ``case.yml`` saying how to run them and which differences are
known (each with its reason). Compared, with types: hosts, groups (members and children,
in order), every host's variables (``ansible-inventory --list`` against ``rigger inventory
--list``); and for a playbook: the hosts of each play, each task's status per host, the
values debug printed, the recap and the exit code.

Run it by hand for a table of every case:  python3 tests/differential/harness.py [CASE...]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CASES = HERE / "cases"
ANSIBLE_VENV = REPO / ".venv-ansible"
CALLBACKS = HERE / "ansible_plugins" / "callback"
SETUP = REPO / "scripts" / "ci" / "setup_ansible.sh"
# Both tools run every host on the local connection, told the same way (an extra var).
LOCAL = "ansible_connection=local"
# rigger's run lock stays off: Ansible has none, and another rigger run on this machine
# (every case's hosts are this machine) must not make a case fail.
NO_RUN_LOCK = "rigger_run_lock=false"


@dataclass(frozen=True)
class Case:
    name: str
    folder: Path
    inventories: tuple[str, ...]
    playbook: str | None = None
    limit: str | None = None
    extra_vars: tuple[str, ...] = ()
    check: bool = False
    source: str = ""
    known: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    unordered: tuple[str, ...] = ()


@dataclass(frozen=True)
class Observed:
    """What one tool answered for a case."""

    inventory: Any
    run: Any = None
    seconds: float = 0.0


@dataclass
class Verdict:
    case: Case
    differences: list[tuple[str, Any, Any]] = field(default_factory=list)
    stale_known: list[str] = field(default_factory=list)
    ansible_s: float = 0.0
    rigger_s: float = 0.0
    output: dict[str, str] = field(default_factory=dict)

    @property
    def unexpected(self) -> list[tuple[str, Any, Any]]:
        return [d for d in self.differences if not _known_reason(self.case, d[0])]

    @property
    def agrees(self) -> bool:
        return not self.differences

    def explain(self) -> str:
        lines = [f"{path}: ansible={a!r} rigger={r!r}" for path, a, r in self.unexpected[:30]]
        lines += [f"known difference no longer seen (remove it from case.yml): {p}" for p in self.stale_known]
        if any(path == "run.exit_code" for path, _, _ in self.unexpected):
            lines += [f"--- {tool} output (tail):\n{text[-1500:]}" for tool, text in self.output.items()]
        return "\n".join(lines)


def _known_reason(case: Case, path: str) -> str | None:
    for prefix, why in case.known:
        if path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "["):
            return why
    return None


def load_case(folder: Path) -> Case:
    spec = yaml.safe_load((folder / "case.yml").read_text()) or {}
    inventories = spec.get("inventory")
    if "inventory" not in spec:
        inventories = [p.name for p in sorted(folder.iterdir()) if p.name.startswith("hosts")]
    # `inventory: []`: no -i, the inventory comes from the case's ansible.cfg
    if isinstance(inventories, str):
        inventories = [inventories]
    inventories = inventories or []
    known = tuple((str(k["path"]), str(k["why"])) for k in spec.get("known_differences") or [])
    return Case(
        name=folder.name,
        folder=folder,
        inventories=tuple(inventories),
        playbook=spec.get("playbook"),
        limit=spec.get("limit"),
        extra_vars=tuple(spec.get("extra_vars") or ()),
        check=bool(spec.get("check", False)),
        source=str(spec.get("source", "")),
        known=known,
        env=tuple((str(k), str(v)) for k, v in (spec.get("env") or {}).items()),
        unordered=tuple(str(p) for p in spec.get("unordered") or ()),
    )


def all_cases() -> list[Case]:
    return [load_case(folder) for folder in sorted(CASES.iterdir()) if (folder / "case.yml").is_file()]


def ensure_ansible() -> Path:
    """The oracle, installed by the test set-up into its own venv when missing."""
    if not (ANSIBLE_VENV / "bin" / "ansible-playbook").exists():
        subprocess.run(["bash", str(SETUP)], check=True)
    return ANSIBLE_VENV / "bin"


# ---- running the two tools ------------------------------------------------------------
def _ansible_env(case: Case, work: Path) -> dict[str, str]:
    return {
        **os.environ,
        **dict(case.env),
        "ANSIBLE_CONFIG": str(work / "no-ansible.cfg"),
        "ANSIBLE_HOME": str(work / ".ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(work / ".ansible-tmp"),
        "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
        "ANSIBLE_CALLBACKS_ENABLED": "rigger_observe",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_PYTHON_INTERPRETER": str(ANSIBLE_VENV / "bin" / "python"),
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        "RIGGER_OBSERVE_FILE": str(work / "ansible-observed.jsonl"),
    }


def _rigger_env(case: Case) -> dict[str, str]:
    return {**os.environ, **dict(case.env), "PYTHONPATH": str(REPO), "NO_COLOR": "1"}


def _inventory_args(case: Case) -> list[str]:
    return [arg for inv in case.inventories for arg in ("-i", inv)]


def _run_args(case: Case) -> list[str]:
    args = [*_inventory_args(case), "-e", LOCAL]
    for extra in case.extra_vars:
        args += ["-e", extra]
    if case.limit is not None:
        args += ["--limit", case.limit]
    if case.check:
        args.append("--check")
    return args


def _json_or_error(proc: subprocess.CompletedProcess[str]) -> Any:
    if proc.returncode != 0:
        return {"exit_code": proc.returncode}
    return json.loads(proc.stdout)


@dataclass(frozen=True)
class _Tool:
    """How to ask one tool: the inventory listing, a playbook run, where its events are."""

    lister: list[str]
    runner: list[str]
    env: dict[str, str]
    events: Callable[[Path, str], list[dict[str, Any]]]


def _observe(case: Case, work: Path, tool: _Tool) -> Observed:
    started = time.monotonic()
    playbook_dir = ["--playbook-dir", str(Path(case.playbook).parent or ".")] if case.playbook else []
    listing = [*tool.lister, *_inventory_args(case), *playbook_dir, "--list"]
    proc = subprocess.run(listing, cwd=work, env=tool.env, capture_output=True, text=True)
    inventory = _json_or_error(proc)
    run = None
    if case.playbook:
        command = [*tool.runner, *_run_args(case), case.playbook]
        proc = subprocess.run(command, cwd=work, env=tool.env, capture_output=True, text=True)
        run = _normalise_run(tool.events(work, proc.stdout), proc.returncode, proc.stdout + proc.stderr)
    return Observed(inventory, run, time.monotonic() - started)


def observe_ansible(case: Case, work: Path) -> Observed:
    bin_dir = ensure_ansible()
    tool = _Tool(
        lister=[str(bin_dir / "ansible-inventory")],
        runner=[str(bin_dir / "ansible-playbook")],
        env=_ansible_env(case, work),
        events=lambda folder, _stdout: _read_jsonl(folder / "ansible-observed.jsonl"),
    )
    return _observe(case, work, tool)


def observe_rigger(case: Case, work: Path) -> Observed:
    cli = [sys.executable, "-m", "engine.cli"]
    tool = _Tool(
        lister=[*cli, "inventory"],
        runner=[*cli, "run", "-e", NO_RUN_LOCK, "--output", "jsonl"],
        env=_rigger_env(case),
        events=lambda _folder, stdout: [json.loads(line) for line in stdout.splitlines() if line.startswith("{")],
    )
    return _observe(case, work, tool)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---- one vocabulary for both ----------------------------------------------------------
_SEVERITY = ("skipped", "ok", "changed", "failed", "unreachable")


def _merge_status(old: str | None, new: str) -> str:
    """A loop's results on one host, folded into the task's status as Ansible reports it."""
    if old is None:
        return new
    if {old, new} == {"ok", "skipped"}:
        return "ok"
    return max(old, new, key=_SEVERITY.index)


def _normalise_run(events: list[dict[str, Any]], exit_code: int, output: str) -> dict[str, Any]:
    plays: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    recap: dict[str, Any] = {}
    for event in events:
        kind = event.get("event")
        if kind == "play_start":
            plays.append({"name": event["name"], "hosts": list(event["hosts"])})
        elif kind == "task_start" and event["name"] != "Gathering Facts":
            tasks.append(
                {
                    "name": event["name"],
                    "handler": bool(event.get("handler")),
                    "status": {},
                    "value": {},
                    "_module": event.get("module", ""),
                }
            )
        elif kind == "task_result" and tasks and event["task"] == tasks[-1]["name"]:
            task = tasks[-1]
            host = event["host"]
            looped = host in task["status"] or event.get("item") is not None
            task["status"][host] = _merge_status(task["status"].get(host), event["status"])
            value = event["value"] if "value" in event else _rigger_debug_value(event, task["_module"])
            if looped or (isinstance(value, dict) and "results" in value):
                value = None
            if value is not None:
                task["value"][host] = value
        elif kind == "recap":
            recap = {host: dict(counts) for host, counts in event["hosts"].items() if any(counts.values())}
    # A meta task has no per-host result in either tool; ansible-core announces it, rigger
    # does not: only what a meta task does (handlers run, hosts end) is compared.
    tasks = [t for t in tasks if not (t["_module"].rpartition(".")[2] == "meta" and not t["status"])]
    return {"exit_code": exit_code, "plays": plays, "tasks": tasks, "recap": recap, "_output": output[-3000:]}


def _rigger_debug_value(event: dict[str, Any], module: str) -> Any:
    if module.rpartition(".")[2] != "debug" or event.get("status") != "ok":
        return None
    return dict(event.get("data") or {})


# ---- comparing ------------------------------------------------------------------------
def _normalise_inventory(listing: Any) -> Any:
    if not isinstance(listing, dict) or "exit_code" in listing:
        return listing
    groups = {
        name: {"hosts": list(body.get("hosts", [])), "children": list(body.get("children", []))}
        for name, body in listing.items()
        if name != "_meta"
    }
    return {"groups": groups, "hostvars": listing.get("_meta", {}).get("hostvars", {})}


def differences(path: str, ansible: Any, rigger: Any) -> Iterator[tuple[str, Any, Any]]:
    """Every place the two answers differ, with types (1 is not '1', True is not 1)."""
    if isinstance(ansible, dict) and isinstance(rigger, dict):
        for key in dict.fromkeys([*ansible, *rigger]):
            if str(key).startswith("_"):
                continue
            sub = f"{path}.{key}" if path else str(key)
            if key not in ansible or key not in rigger:
                yield sub, ansible.get(key, "<absent>"), rigger.get(key, "<absent>")
            else:
                yield from differences(sub, ansible[key], rigger[key])
    elif isinstance(ansible, list) and isinstance(rigger, list):
        if len(ansible) != len(rigger):
            yield path, ansible, rigger
            return
        for index, (a, r) in enumerate(zip(ansible, rigger, strict=True)):
            yield from differences(f"{path}[{index}]", a, r)
    elif _masked_secret(ansible, rigger):
        return  # a deliberate difference: rigger never shows a secret (docs/safety.md), ansible-core does
    elif type(ansible) is not type(rigger) or ansible != rigger:
        yield path, ansible, rigger


_MASKED = re.compile(r"<hidden: [^<>]+>")


def _masked_secret(ansible: Any, rigger: Any) -> bool:
    """rigger's answer is ansible's with secrets shown as ``<hidden: NAME>`` (engine/mask.py)."""
    if not (isinstance(ansible, str) and isinstance(rigger, str) and _MASKED.search(rigger)):
        return False
    pieces = _MASKED.split(rigger)
    return re.fullmatch(".+?".join(re.escape(piece) for piece in pieces), ansible, re.DOTALL) is not None


_PATH_STEP = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]")


def _sort_at(answer: Any, path: str) -> None:
    """Sort the list at ``path`` (e.g. ``run.plays[1].hosts``) in place, when it is there."""
    steps = [int(index) if index else key for key, index in _PATH_STEP.findall(path)]
    node = answer
    for step in steps[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return
    try:
        found = node[steps[-1]]
    except (KeyError, IndexError, TypeError):
        return
    if isinstance(found, list):
        node[steps[-1]] = sorted(found, key=json.dumps)


def compare(case: Case) -> Verdict:
    with tempfile.TemporaryDirectory(prefix=f"diff-{case.name}-") as tmp:
        # the same folder name for both, so playbook_dir | basename compares equal
        work_a, work_r = Path(tmp) / "ansible" / case.name, Path(tmp) / "rigger" / case.name
        shutil.copytree(case.folder, work_a)
        shutil.copytree(case.folder, work_r)
        ansible = observe_ansible(case, work_a)
        rigger = observe_rigger(case, work_r)
    verdict = Verdict(case, ansible_s=ansible.seconds, rigger_s=rigger.seconds)
    answers = [{"inventory": _normalise_inventory(o.inventory), "run": o.run} for o in (ansible, rigger)]
    for path in case.unordered:
        for answer in answers:
            _sort_at(answer, path)
    verdict.differences += differences("inventory", answers[0]["inventory"], answers[1]["inventory"])
    if case.playbook:
        verdict.differences += differences("run", answers[0]["run"], answers[1]["run"])
        verdict.output = {"ansible": ansible.run["_output"], "rigger": rigger.run["_output"]}
    seen = [d[0] for d in verdict.differences]
    verdict.stale_known = [
        prefix
        for prefix, _ in case.known
        if not any(p == prefix or p.startswith(prefix + ".") or p.startswith(prefix + "[") for p in seen)
    ]
    return verdict


def main(names: list[str]) -> int:
    cases = [c for c in all_cases() if not names or c.name in names]
    agree = known = 0
    total_a = total_r = 0.0
    for case in cases:
        verdict = compare(case)
        total_a += verdict.ansible_s
        total_r += verdict.rigger_s
        if verdict.agrees:
            agree += 1
            state = "agrees"
        elif not verdict.unexpected and not verdict.stale_known:
            known += 1
            state = f"known differences ({len(verdict.differences)})"
        else:
            state = f"DIFFERS ({len(verdict.unexpected)} unexpected)"
        print(f"{case.name:40} {state:32} ansible {verdict.ansible_s:5.1f}s  rigger {verdict.rigger_s:5.1f}s")
        if verdict.unexpected or verdict.stale_known:
            print("    " + verdict.explain().replace("\n", "\n    "))
    print(
        f"{len(cases)} cases: {agree} agree, {known} agree but for known differences, "
        f"{len(cases) - agree - known} differ; ansible {total_a:.1f}s, rigger {total_r:.1f}s"
    )
    return 0 if agree + known == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
