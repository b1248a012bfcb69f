"""After a serving group stops: GPU memory must come back to its level before the launch.

Real: group_teardown's wait, the scoped connection and the probe parser. Not real: the GPUs,
a RecordedHost answering the `gpus` probe in order (memory still held, then released).
"""

from __future__ import annotations

from typing import Any

import pytest
from recorded_host import RecordedHost

from engine.connection.base import ScopedConnection
from engine.module_api import TaskFailed
from modules.serving import group_teardown

UUID = "GPU-00000000-fake"


def gpus(used_mib: int) -> dict[str, Any]:
    return {"backend": "nvml", "gpus": [{"uuid": UUID, "memory_used_mib": used_mib}], "errors": []}


def test_waits_until_the_memory_is_back_to_the_launch_level() -> None:
    host = RecordedHost(probes={"gpus": [gpus(80_000), gpus(40_000), gpus(3)]})
    group_teardown.wait_gpu_baseline(ScopedConnection(host), {UUID: 3}, timeout_s=30)
    assert host.calls == [("probe", "gpus")] * 3


def test_memory_still_held_at_the_deadline_fails_naming_the_gpu() -> None:
    host = RecordedHost(probes={"gpus": gpus(80_000)})
    with pytest.raises(TaskFailed, match=f"{UUID}: 80000 MiB \\(was 3\\)"):
        group_teardown.wait_gpu_baseline(ScopedConnection(host), {UUID: 3}, timeout_s=0)


def test_a_node_without_gpus_has_nothing_to_wait_for() -> None:
    host = RecordedHost(probes={})
    group_teardown.wait_gpu_baseline(ScopedConnection(host), {}, timeout_s=0)
    assert host.calls == []
