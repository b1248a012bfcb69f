"""serve_vllm and ray_cluster end only the processes whose recorded identity still matches.

Real: the modules and probes (vllm_state, ray_node_state, recorded_tree, signal_procs) on
the local connection, /proc, real processes and signals, util-linux unshare. Every case runs
as root in a private mount and PID namespace (tests/modules/decoyns.py, pid=True): the
state files live on a decoy tmpfs and the only processes the code can see or reach are the
decoys the case starts, so a wrong kill ends nothing outside. Not real: the vLLM server,
whose processes are decoys with vLLM's process titles (`exec -a`).
"""

from __future__ import annotations

import textwrap

from decoyns import run_in_decoy_namespace
from ports import free_port

PORT = free_port()  # the cases share this machine's network, where the README's demo may serve on 8000

# A decoy session: its leader (pid D) exits at once, leaving a vLLM-like child in session D.
# The state file then says what a dead rigger server said once the kernel handed its pid and
# session id to someone else: pid D, sid D, started a little earlier than today's holder.
REUSED_SESSION = textwrap.dedent("""
    import time
    def start_time(pid):
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19])
    def alive(pid):
        try:
            return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False
    def child_of_session(sid):
        for _ in range(3000):
            for entry in os.listdir("/proc"):
                if entry.isdigit() and int(entry) != sid:
                    try:
                        stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
                        cmd = open(f"/proc/{entry}/cmdline", "rb").read()
                    except OSError:
                        continue
                    if int(stat[3]) == sid and cmd.startswith(b"python -m vllm"):
                        return int(entry)
            time.sleep(0.01)
        raise SystemExit("the decoy never started")
    launcher = subprocess.Popen(
        ["bash", "-c", "(exec -a 'python -m vllm.entrypoints.openai.api_server --port PORT' sleep 300) & exit 0"],
        start_new_session=True,
    )
    stranger = child_of_session(launcher.pid)
    launcher.wait()
    os.makedirs("/srv/state", exist_ok=True)
    def record(**extra):
        base = {"pid": launcher.pid, "sid": launcher.pid, "start_time": start_time(stranger) - 1,
                "port": PORT, "spec_hash": "0" * 64, "log_path": "/srv/state/s.log"}
        write("/srv/state/s.json", json.dumps({**base, **extra}))
""").replace("PORT", str(PORT))

SERVE_STOPPED = {"name": "s", "model": "/srv/model", "state": "stopped", "state_dir": "/srv/state", "port": PORT}


def test_serve_vllm_never_stops_a_process_that_reuses_the_recorded_session_id() -> None:
    """Issue 18: after rigger's server died, a process in a session with its old id was ended
    by `serve_vllm state: stopped` (and by a re-run, which stops the old server first)."""
    result = run_in_decoy_namespace(
        REUSED_SESSION
        + textwrap.dedent("""
        record()
        outcome = converge("serve_vllm", SERVE_STOPPED)
        result = {"outcome": outcome, "alive": alive(stranger)}
        """).replace("SERVE_STOPPED", repr(SERVE_STOPPED)),
        pid=True,
    )
    assert result["alive"], result
    assert result["outcome"]["status"] == "unchanged", result


def test_an_identity_recorded_on_another_boot_names_nothing() -> None:
    """pid + start time match a live vLLM-like process, but the record's boot id is another
    boot's: start times count from boot, so it is not the process rigger started."""
    result = run_in_decoy_namespace(
        REUSED_SESSION
        + textwrap.dedent("""
        write("/srv/state/s.json", json.dumps({"pid": stranger, "sid": launcher.pid, "start_time": start_time(stranger),
              "boot_id": "00000000-0000-0000-0000-000000000000", "port": PORT}))
        outcome = converge("serve_vllm", SERVE_STOPPED)
        result = {"outcome": outcome, "alive": alive(stranger)}
        """)
        .replace("SERVE_STOPPED", repr(SERVE_STOPPED))
        .replace("PORT", str(PORT)),
        pid=True,
    )
    assert result["alive"], result
    assert result["outcome"]["status"] == "unchanged", result


def test_recorded_members_are_still_ours_once_their_parent_is_gone() -> None:
    """The other side: an orphaned EngineCore whose identity serve_vllm recorded once the
    server was ready is stopped, though the API server that started it is gone."""
    result = run_in_decoy_namespace(
        REUSED_SESSION
        + textwrap.dedent("""
        from engine.probes.procs import boot_id
        record(members=[{"pid": stranger, "start_time": start_time(stranger)}], boot_id=boot_id())
        outcome = converge("serve_vllm", SERVE_STOPPED)
        result = {"outcome": outcome, "alive": alive(stranger)}
        """).replace("SERVE_STOPPED", repr(SERVE_STOPPED)),
        pid=True,
    )
    assert not result["alive"], result
    assert result["outcome"]["status"] == "changed", result


def test_ray_node_state_counts_no_process_of_a_reused_session_as_the_nodes() -> None:
    """ray_cluster state: stopped signals, and `ray stop --force` is allowed by, the node's
    processes as ray_node_state reports them: none of a reused session's."""
    result = run_in_decoy_namespace(
        REUSED_SESSION
        + textwrap.dedent("""
        record()
        from engine.probes import run_in_process
        answer = run_in_process("ray_node_state", {"state_path": "/srv/state/s.json"})
        result = {"session": [p["pid"] for p in answer["session"]], "alive": alive(stranger)}
        """),
        pid=True,
    )
    assert result == {"session": [], "alive": True}
