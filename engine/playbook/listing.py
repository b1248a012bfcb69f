"""``--list-hosts``, ``--list-tasks`` and ``--syntax-check``: the playbook described in
ansible-playbook's shape, without running anything. Names are shown as written (Ansible
does not render templated names here either); implicit handler flushes are left out."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from engine.model import Block, Play, Playbook, Step, Task
from engine.playbook import tags as tags_mod

HostSelector = Callable[[Play], Sequence[str]]


def describe(book: Playbook, shown: str, select: HostSelector | None, with_tasks: bool) -> str:
    """The text ansible-playbook prints for ``--list-hosts`` (``select`` given) and/or
    ``--list-tasks``; with neither it is ``--syntax-check``'s one line."""
    lines = ["", f"playbook: {shown}"]
    if select is None and not with_tasks:
        return "\n".join(lines) + "\n"
    for number, play in enumerate(book.plays, start=1):
        play_tags = _sorted_tags(play.options.tags)
        lines += ["", f"  play #{number} ({play.hosts}): {play.name}\tTAGS: [{', '.join(play_tags)}]"]
        if select is not None:
            hosts = list(select(play))
            lines.append(f"    pattern: {[p for p in play.hosts.split(':') if p]!r}")
            lines.append(f"    hosts ({len(hosts)}):")
            lines += [f"      {host}" for host in hosts]
        if with_tasks:
            lines.append("    tasks:")
            for task in _listed(play.tasks):
                lines.append(f"      {task.display_name}\tTAGS: [{', '.join(_sorted_tags(task.options.tags))}]")
    return "\n".join(lines) + "\n"


def _sorted_tags(raw: tuple[object, ...]) -> list[str]:
    return sorted(tags_mod.flatten(t for t in raw if isinstance(t, (str, list, int))))


def _listed(steps: tuple[Step, ...]) -> Iterator[Task]:
    for step in steps:
        if isinstance(step, Block):
            yield from _listed(step.block + step.rescue + step.always)
        elif not (step.module == "meta" and not step.name):
            yield step
