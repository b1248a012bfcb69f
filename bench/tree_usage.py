"""Run one command as a child subreaper and report its whole process tree's usage.

    python bench/tree_usage.py REPORT.json COMMAND [ARGS...]

Everything the command starts stays under this process, even what it daemonizes (ansible's
ControlPersist ssh masters): orphans are re-parented here, not to init. When the command
exits, what it left behind is stopped and reaped, so RUSAGE_CHILDREN holds the CPU of the
whole tree. REPORT.json gets ``wall_s`` (the command alone, not this wrapper's start-up) and
``cpu_s`` (user + sys of the tree, this wrapper excluded). The command's exit status is ours.
A separate process on purpose: a subreaper higher up (the benchmark itself, which also starts
the sshds) would adopt the hosts' orphans too and count their CPU as the controller's.
"""

from __future__ import annotations

import ctypes
import json
import resource
import subprocess
import sys
import time

import psutil

PR_SET_CHILD_SUBREAPER = 36


def main() -> int:
    report, argv = sys.argv[1], sys.argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    started = time.perf_counter()
    rc = subprocess.call(argv)
    wall = time.perf_counter() - started
    left = psutil.Process().children()  # only the command's descendants can be here: ours
    for child in left:
        child.terminate()
    _, alive = psutil.wait_procs(left, timeout=5)
    for child in alive:
        child.kill()
    psutil.wait_procs(alive, timeout=5)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(report, "w", encoding="utf-8") as handle:
        json.dump({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime}, handle)
    return rc


if __name__ == "__main__":
    sys.exit(main())
