"""The playbook and inventory as frozen values. Built by the loaders, read by the runner."""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine.errors import ValidationError

LOCALHOST_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# ansible_connection values rigger honours -> the transport that does it (Ansible's smart and
# paramiko mean SSH). Anything else is refused by name, never silently taken for SSH.
CONNECTION_TYPES = {"local": "local", "ssh": "ssh", "smart": "ssh", "paramiko": "ssh", "paramiko_ssh": "ssh"}


def unknown_connection(value: Any) -> str | None:
    """What is wrong with an ``ansible_connection`` value; None when rigger has that transport
    (or when it is a template, checked once rendered)."""
    if not isinstance(value, str) or value in CONNECTION_TYPES or "{{" in value:
        return None
    close = difflib.get_close_matches(value, list(CONNECTION_TYPES), n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"ansible_connection {value!r} is not a connection type rigger has{hint}: use local or ssh"


@dataclass(frozen=True)
class Location:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class RoleContext:
    """The role a task came from: its variables by precedence level, and where it lives.
    ``defaults`` and ``vars`` include those of its dependencies and of the roles that
    pulled it in (Ansible's dependency chain)."""

    name: str
    path: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    vars: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskOptions:
    """Keywords that a block (or an import, or a role) passes down to the tasks inside it."""

    when: tuple[Any, ...] = ()
    tags: tuple[Any, ...] = ()
    become: bool | None = None
    become_user: Any = None  # a name or a template rendering to one; None: ansible_become_user, else root
    # each level's ``environment:`` (play, block, task), outermost first: a mapping or a
    # template rendering to one; merged in order when the task runs, as Ansible does
    environment: tuple[Any, ...] = ()
    # each level's ``module_defaults`` mappings, outermost first (engine/playbook/module_defaults.py)
    module_defaults: tuple[Mapping[str, Any], ...] = ()
    no_log: Any = None  # a flag or a template rendering to one
    # Ansible's ``diff`` and ``check_mode`` keywords (a flag or a template; None: not set):
    # diff false hides the task's diffs everywhere, check_mode true plans it in a real run
    diff: Any = None
    check_mode: Any = None
    notify: tuple[str, ...] = ()  # a block's notify, for the tasks inside that name none
    connection: str | None = None  # a task's or block's `connection:` (host variables win)
    ignore_errors: bool | None = None
    vars: Mapping[str, Any] = field(default_factory=dict)
    run_once: Any = None
    delegate_to: Any = None
    delegate_facts: bool | None = None
    role: RoleContext | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    pinned: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Include:
    """A dynamic include (``include_tasks`` / ``include_role``): what it loads is decided when
    it runs, per host. ``preloaded`` is what a literal target loads to, read once at load
    time so that validation and the static check see inside it."""

    kind: str
    playbook_dir: str
    base_dir: str
    role_dir: str
    target: str
    options: TaskOptions
    preloaded: tuple[Step, ...] | None = None


@dataclass(frozen=True)
class Task:
    name: str
    module: str
    args: Any
    location: Location
    options: TaskOptions = TaskOptions()
    loop: Any = None
    loop_kind: str = "loop"
    loop_var: str = "item"
    register: str | None = None
    changed_when: tuple[Any, ...] = ()
    failed_when: tuple[Any, ...] = ()
    until: tuple[Any, ...] = ()
    # retries, delay_s and timeout_s may be templates, rendered when the task runs
    retries: int | str = 3
    delay_s: float | str = 5.0
    notify: tuple[str, ...] = ()
    listen: tuple[str, ...] = ()
    timeout_s: float | str | None = None
    index_var: str | None = None
    loop_label: Any = None  # loop_control.label: what output shows for each item (a template)
    include: Include | None = None

    @property
    def display_name(self) -> str:
        """As Ansible shows it: a role's tasks are ``role : name``, an unnamed include_role
        ``include_role : role``."""
        name = self.name or self.module
        if not self.name and self.include is not None and self.include.kind == "include_role":
            name = f"{self.module} : {self.include.target}"
        return f"{self.options.role.name} : {name}" if self.options.role is not None else name


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
    gather_subset: tuple[str, ...] = ("all",)  # Ansible's spec, read by the setup_facts probe
    serial: tuple[int | str, ...] = ()
    # a template until the runner renders the play (Ansible renders these when the play runs)
    max_fail_percentage: float | str | None = None
    any_errors_fatal: bool | str = False
    options: TaskOptions = TaskOptions()
    role_defaults: Mapping[str, Any] = field(default_factory=dict)
    role_vars: Mapping[str, Any] = field(default_factory=dict)
    connection_vars: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Playbook:
    path: str
    plays: tuple[Play, ...]


@dataclass(frozen=True)
class Host:
    name: str
    vars: Mapping[str, Any]
    groups: tuple[str, ...] = ()
    source: str = ""  # the inventory file that named it first ("" for the implicit localhost)


@dataclass(frozen=True)
class Inventory:
    """``groups``: every group (``all`` and ``ungrouped`` too) with its hosts in Ansible's
    order; ``direct_hosts``: only those written in the group itself; ``implicit_localhost``:
    the host ``localhost`` names when the inventory has none (in no group, not even all);
    ``unusable``: hosts whose ``ansible_connection`` rigger has no transport for, with the
    error (and where it was written) to raise when a play targets one."""

    hosts: Mapping[str, Host]
    groups: Mapping[str, tuple[str, ...]]
    sources: tuple[str, ...] = ()
    children: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    direct_hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    implicit_localhost: Host | None = None
    unusable: Mapping[str, ValidationError] = field(default_factory=dict)

    def host(self, name: str) -> Host:
        if name in self.hosts:
            return self.hosts[name]
        if self.implicit_localhost is not None and name in LOCALHOST_NAMES:
            return replace(self.implicit_localhost, name=name)
        raise KeyError(name)


def host_patterns(book: Playbook) -> list[str]:
    """Each play's ``hosts`` as one pattern (a list joined as the runner joins it)."""
    return [":".join(map(str, p.hosts)) if isinstance(p.hosts, list) else str(p.hosts) for p in book.plays]


def all_tasks(book: Playbook) -> Iterator[Task]:
    """Every task of the playbook, handlers included, blocks (block, rescue, always) opened."""
    for play in book.plays:
        yield from play_tasks(play)


def play_tasks(play: Play) -> Iterator[Task]:
    """Every task of one play, handlers included, blocks opened."""
    yield from _tasks(play.tasks + play.handlers)


def _tasks(steps: tuple[Step, ...]) -> Iterator[Task]:
    for task, _ in walk(steps):
        yield task


def walk(steps: tuple[Step, ...], loop_names: frozenset[str] = frozenset()) -> Iterator[tuple[Task, frozenset[str]]]:
    """Every task inside blocks and inside the includes read at load time, with the loop
    variables an enclosing include defines for it."""
    for step in steps:
        if isinstance(step, Block):
            yield from walk(step.block + step.rescue + step.always, loop_names)
            continue
        yield step, loop_names
        if step.include is not None and step.include.preloaded is not None:
            names = {step.loop_var, step.index_var or ""} - {""} if step.loop is not None else set()
            yield from walk(step.include.preloaded, loop_names | names)
