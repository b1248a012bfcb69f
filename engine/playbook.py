"""The playbook and inventory as frozen values. Built by the loaders, read by the runner."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

LOCALHOST_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class Location:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class TaskOptions:
    """Keywords that a block passes down to the tasks inside it."""

    when: tuple[Any, ...] = ()
    tags: tuple[str, ...] = ()
    become: bool | None = None
    environment: Mapping[str, Any] = field(default_factory=dict)
    no_log: bool | None = None
    ignore_errors: bool | None = None


@dataclass(frozen=True)
class Task:
    name: str
    module: str
    args: Any
    location: Location
    options: TaskOptions = TaskOptions()
    loop: Any = None
    loop_var: str = "item"
    register: str | None = None
    changed_when: tuple[Any, ...] = ()
    failed_when: tuple[Any, ...] = ()
    until: tuple[Any, ...] = ()
    retries: int = 3
    delay_s: float = 5.0
    notify: tuple[str, ...] = ()
    listen: tuple[str, ...] = ()
    timeout_s: float | None = None

    @property
    def display_name(self) -> str:
        return self.name or self.module


@dataclass(frozen=True)
class Block:
    name: str
    block: tuple[Step, ...]
    location: Location
    rescue: tuple[Step, ...] = ()
    always: tuple[Step, ...] = ()
    options: TaskOptions = TaskOptions()


Step = Task | Block


@dataclass(frozen=True)
class Play:
    name: str
    hosts: str
    location: Location
    tasks: tuple[Step, ...] = ()
    handlers: tuple[Task, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    vars_files: tuple[str, ...] = ()
    gather_facts: bool = True
    serial: tuple[int | str, ...] = ()
    max_fail_percentage: float | None = None
    any_errors_fatal: bool = False
    options: TaskOptions = TaskOptions()


@dataclass(frozen=True)
class Playbook:
    path: str
    plays: tuple[Play, ...]


@dataclass(frozen=True)
class Host:
    name: str
    vars: Mapping[str, Any]
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Inventory:
    """``groups``: every group (``all`` and ``ungrouped`` too) with its hosts in Ansible's
    order; ``direct_hosts``: only those written in the group itself; ``implicit_localhost``:
    the host ``localhost`` names when the inventory has none (in no group, not even all)."""

    hosts: Mapping[str, Host]
    groups: Mapping[str, tuple[str, ...]]
    sources: tuple[str, ...] = ()
    children: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    direct_hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    implicit_localhost: Host | None = None

    def host(self, name: str) -> Host:
        if name in self.hosts:
            return self.hosts[name]
        if self.implicit_localhost is not None and name in LOCALHOST_NAMES:
            return replace(self.implicit_localhost, name=name)
        raise KeyError(name)


def all_tasks(book: Playbook) -> Iterator[Task]:
    """Every task of the playbook, handlers included, blocks (block, rescue, always) opened."""
    for play in book.plays:
        yield from play_tasks(play)


def play_tasks(play: Play) -> Iterator[Task]:
    """Every task of one play, handlers included, blocks opened."""
    yield from _tasks(play.tasks + play.handlers)


def _tasks(steps: tuple[Step, ...]) -> Iterator[Task]:
    for step in steps:
        if isinstance(step, Block):
            yield from _tasks(step.block + step.rescue + step.always)
        else:
            yield step
