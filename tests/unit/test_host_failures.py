"""A failure on the host is the task's failure, saying what and where; "(a bug)" is kept
for real bugs in rigger.

Real: the executor, the module (ensure_gpus_idle), the scoped connection and the probe
parser. Stand-in: the host, a RecordedHost whose gpus probe answers with the error a
probe raises on a host where the NVIDIA device cannot be opened.
"""

from __future__ import annotations

from recorded_host import RecordedHost

from engine.model import Location, Task
from engine.run.executor import ExecOptions, TaskRunner
from engine.templating import Scope


def _run(module: str, args: dict[str, object], host: RecordedHost) -> tuple[str, str]:
    task = Task(name="t", module=module, args=args, location=Location("site.yml", 3))
    outcome = TaskRunner(task, "gpu1", host, Scope({}, {"facts": {}}), ExecOptions(), lambda _: None).run()
    return outcome.status, outcome.results[0].msg


def test_a_probe_error_from_ensure_gpus_idle_is_a_task_failure_not_a_bug() -> None:
    host = RecordedHost(probes={"gpus": {"error": "PermissionError: [Errno 13] Permission denied: '/dev/nvidiactl'"}})
    status, msg = _run("ensure_gpus_idle", {}, host)
    assert status == "failed"
    assert "a bug" not in msg
    assert "gpu1" in msg and "Permission denied: '/dev/nvidiactl'" in msg and "probe gpus failed" in msg


def test_a_real_bug_in_a_module_is_still_called_one() -> None:
    host = RecordedHost(probes={"gpus": {"gpus": "not a list"}, "procs": {"processes": []}})
    status, msg = _run("ensure_gpus_idle", {}, host)
    assert status == "failed" and "(a bug)" in msg
