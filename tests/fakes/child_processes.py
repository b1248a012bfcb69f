"""Waiting for a real process a rigger process started (a test harness, not a fake)."""

from __future__ import annotations

import time

import psutil


def wait_for_child(parent: psutil.Process, name: str, timeout_s: float = 60) -> psutil.Process:
    """The first descendant of ``parent`` named ``name``, once it runs (AssertionError after
    ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in parent.children(recursive=True):
            if child.name() == name:
                return child
        time.sleep(0.05)
    raise AssertionError(f"{name} never started under pid {parent.pid}")
