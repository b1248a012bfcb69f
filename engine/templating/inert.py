"""Text that came from an inventory or a host: never a template, whatever it holds.

Inventory host and group names are names, not code: a host called
``x{{ lookup('pipe', 'id') }}`` is shown and compared as those characters, as
ansible-core 2.19 treats them (untrusted). The magic variables that carry them
(``inventory_hostname``, ``group_names``, ``groups``, ``ansible_play_hosts``...) hold
``Inert`` strings, and ``is_template`` says no to an ``Inert`` string, so no render, lazy
variable or ``hostvars`` lookup ever evaluates one.
"""

from __future__ import annotations

from collections.abc import Iterable


class Inert(str):
    """A str that is data: rendering leaves it as it is."""

    __slots__ = ()


def inert_names(names: Iterable[str]) -> list[str]:
    return [Inert(name) for name in names]
