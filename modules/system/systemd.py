"""Start, stop, restart, reload, enable, disable and mask systemd units (ansible.builtin.systemd).

Ansible's `systemd` is its `systemd_service` under an older name: the same arguments,
return values and check mode (see `systemd_service`).
"""

from __future__ import annotations

from modules.system.systemd_service import SCHEMA, apply, plan

__all__ = ["SCHEMA", "apply", "plan"]
