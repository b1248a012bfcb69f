"""Human output, Ansible-shaped: TASK headers, a line per host, grouped diffs, a recap.

Every piece of text that came from a playbook, an inventory or a host goes through the one
renderer (engine/hosttext.py: ``terminal``) before it is put in a line: a newline or an
escape sequence in a segment name, a message or a diff line is shown escaped, so it never
starts a line of its own (no forged ``ok: [localhost]: ...``) and never moves the cursor.
"""

from __future__ import annotations

import difflib
import json
import threading
from collections import defaultdict
from typing import TextIO

from engine.hosttext import terminal
from engine.module_api import Diff
from engine.output.events import (
    COUNTERS,
    Event,
    HostResult,
    Interruption,
    Notice,
    PlayStarted,
    Progress,
    Recap,
    TaskFinished,
    TaskStarted,
)

_COLOURS = {
    "ok": "32",
    "changed": "33",
    "failed": "31",
    "unreachable": "1;31",
    "skipped": "36",
    "rescued": "35",
    "ignored": "35",
    "warning": "35",
    "+": "32",
    "-": "31",
    "@": "36",
}


def unified(diff: Diff) -> list[str]:
    lines = list(
        difflib.unified_diff(
            diff.before.splitlines(keepends=True),
            diff.after.splitlines(keepends=True),
            fromfile=f"before: {diff.label}",
            tofile=f"after: {diff.label}",
        )
    )
    return [terminal(line.removesuffix("\n")) + "\n" for line in lines]


class ConsoleSink:
    def __init__(self, stream: TextIO, *, colour: bool, show_diff: bool, verbosity: int = 0):
        self._out = stream
        self._colour = colour
        self._show_diff = show_diff
        self._verbosity = verbosity
        self._lock = threading.Lock()
        self._pending_diffs: dict[tuple[str, ...], list[str]] = defaultdict(list)
        self._status_shown = False

    def _paint(self, key: str, text: str) -> str:
        code = _COLOURS.get(key)
        return f"\x1b[{code}m{text}\x1b[0m" if self._colour and code else text

    def _write(self, text: str) -> None:
        if self._status_shown:
            self._out.write("\r\x1b[K")
            self._status_shown = False
        self._out.write(text)
        self._out.flush()

    def _status(self, text: str) -> None:
        """On a terminal, progress redraws one line in place; elsewhere it is a plain line."""
        if not self._colour:
            self._write(text + "\n")
            return
        self._out.write("\r\x1b[K" + text[:160])
        self._out.flush()
        self._status_shown = True

    def emit(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, PlayStarted):
                mode = " (check mode)" if event.check_mode else ""
                self._write(f"\nPLAY [{terminal(event.name)}]{mode} {'*' * 40}\n")
            elif isinstance(event, TaskStarted):
                kind = "RUNNING HANDLER" if event.handler else "TASK"
                self._write(f"\n{kind} [{terminal(event.name)}] {'*' * 40}\n")
            elif isinstance(event, HostResult):
                self._host_line(event.masked())
            elif isinstance(event, TaskFinished):
                self._flush_diffs()
            elif isinstance(event, Progress):
                self._status(f"  {terminal(event.host)}: {terminal(event.message)}")
            elif isinstance(event, Notice):
                where = f"[{terminal(event.host)}] " if event.host else ""
                # rigger's own notices may span lines: each is escaped, the rest indented
                message = "\n    ".join(terminal(line) for line in event.message.split("\n"))
                self._write(self._paint("warning", f"[{event.level.upper()}] {where}{message}") + "\n")
            elif isinstance(event, Interruption):
                self._interruption(event)
            elif isinstance(event, Recap):
                self._recap(event)

    def _host_line(self, result: HostResult) -> None:
        label: str = result.status
        if result.ignored:
            label = f"{label} (ignored)"
        host = terminal(result.host)
        item = f" => (item={terminal(_short(result.item))})" if result.item is not None else ""
        msg = f": {terminal(result.msg)}" if result.msg else ""
        self._write(self._paint(result.status, f"{label}: [{host}]{item}{msg}") + "\n")
        for warning in result.warnings:
            self._write(self._paint("warning", f"[WARNING] [{host}] {terminal(warning)}") + "\n")
        if self._verbosity and result.data:
            self._write(json.dumps(dict(result.data), indent=2, default=str) + "\n")
        if self._show_diff or result.diff:  # `diff: true` shows it without --diff, as in Ansible
            for diff in result.diffs:
                self._pending_diffs[tuple(unified(diff))].append(result.host)

    def _flush_diffs(self) -> None:
        for lines, hosts in self._pending_diffs.items():
            if not lines:
                continue
            self._write(f"--- diff on {terminal(', '.join(sorted(hosts)))}\n")
            for line in lines:
                self._write(self._paint(line[:1], line) if line[:1] in "+-@" else line)
        self._pending_diffs.clear()

    def _interruption(self, event: Interruption) -> None:
        head = f"[INTERRUPTED] {event.signal}: no new task started; the commands rigger started were ended"
        self._write(self._paint("failed", head) + "\n")
        for host, task in event.in_flight.items():
            done = event.touched.get(host)
            after = f" (it had already: {', '.join(done)})" if done else ""
            self._write(f"  {host}: '{task}' was running{after}\n")
        for host, servers in event.left_running.items():
            for server in servers:
                self._write(f"  {host}: left running by design: {server}\n")

    def _recap(self, recap: Recap) -> None:
        self._write(f"\nPLAY RECAP {'*' * 40}\n")
        width = max((len(h) for h in recap.stats), default=0)
        for host, counts in recap.stats.items():
            parts = [
                self._paint(key, f"{key}={counts.get(key, 0)}") if counts.get(key, 0) else f"{key}=0"
                for key in COUNTERS
            ]
            stopped = recap.stopped.get(host)
            suffix = f"  (stopped at: {terminal(stopped)})" if stopped else ""
            self._write(f"{terminal(host).ljust(width)} : {'  '.join(parts)}{suffix}\n")
        for host, why in recap.quarantined.items():
            self._write(self._paint("failed", f"quarantined: {terminal(host)}: {terminal(why)}") + "\n")
        mode = " in check mode (nothing was changed)" if recap.check_mode else ""
        self._write(f"finished in {recap.duration_s:.2f}s{mode}\n")

    def close(self) -> None:
        self._out.flush()


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
