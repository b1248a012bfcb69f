"""rigger's own state (the baselines store, quarantine.json, watch's state.json and
events.jsonl, the run lock) is kept only in a directory of its user's, never through a link,
never in a FIFO or another file's hard link.

Real: the baselines store (SQLite), the quarantine and watch stores, the run-lock code that
runs on hosts, `rigger quarantine list` as a process, FIFOs, symlinks and hard links on
the decoy tmpfs of a private mount namespace (decoyns.py), where /srv stands in for the
places a state directory could be. The other user is a passwd line in the namespace. A
call that could hang runs in a daemon thread given two seconds: a hang is a failure, not
a stuck suite. Each test was seen red on the code before fileio's state-file rules.
"""

from __future__ import annotations

from decoyns import run_in_decoy_namespace

SETUP = """
import threading
from pathlib import Path
from engine.baselines.store import BaselineKey, BaselineStore, Measurement
from engine.run import quarantine
from engine.runlock import lockfile
from engine.watch import store as watch_store

add_decoy_user("rigger-decoy-u", 4243, "/srv/u")
os.makedirs("/srv/rootonly")
os.chmod("/srv/rootonly", 0o700)
write("/srv/rootonly/precious", "root's data\\n")
os.makedirs("/srv/u")
os.chown("/srv/u", 4243, 4243)


def as_user_dir(path):
    os.makedirs(path, exist_ok=True)
    os.chown(path, 4243, 4243)


def user_link(target, name):
    os.symlink(target, name)
    os.lchown(name, 4243, 4243)


def bounded(call, seconds=2.0):
    box = {}

    def run():
        try:
            box["value"] = repr(call())
        except Exception as exc:
            box["error"] = type(exc).__name__ + ": " + str(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return box or {"hung": True}


def measurement():
    return Measurement(BaselineKey(host="h", model="m"), 1.0, None, None, 1, 0)


def rootonly():
    return sorted(os.listdir("/srv/rootonly"))
"""


def test_a_state_directory_another_user_made_or_links_is_refused():
    """Fails before: the store followed u's link and created a root file where u chose,
    SQLite added its tables to another root database through a link at its name, and
    watch wrote state.json through u's link into a root-only directory."""
    result = run_in_decoy_namespace(
        SETUP
        + """
out = {}
as_user_dir("/srv/u/state")                       # u made RIGGER_STATE_DIR first
user_link("/srv/rootonly/made.sqlite", "/srv/u/state/baselines.sqlite")
out["owned by u"] = bounded(lambda: BaselineStore(Path("/srv/u/state/baselines.sqlite")).record(measurement()))
os.makedirs("/srv/mine")                          # root's own directory, a link at the store's name
os.chmod("/srv/mine", 0o700)
os.symlink("/srv/rootonly/other.sqlite", "/srv/mine/baselines.sqlite")
import sqlite3
sqlite3.connect("/srv/rootonly/other.sqlite").execute("create table root_only (a)").connection.commit()
out["link at the name"] = bounded(lambda: BaselineStore(Path("/srv/mine/baselines.sqlite")).record(measurement()))
user_link("/srv/rootonly", "/srv/u/watch")        # watch's folder is u's link to a root-only dir
out["watch"] = bounded(lambda: watch_store.save(watch_store.WatchState(), Path("/srv/u/watch")))
os.makedirs("/srv/open")
os.chmod("/srv/open", 0o777)                      # anyone may replace entries here
out["writable"] = bounded(lambda: BaselineStore(Path("/srv/open/baselines.sqlite")).record(measurement()))
os.environ["RIGGER_STATE_DIR"] = "/srv/fresh/state"
out["fresh"] = bounded(lambda: quarantine.add([("h1", "bad GPU", "task")]))
fresh = os.stat("/srv/fresh/state")
tables = sqlite3.connect("/srv/rootonly/other.sqlite").execute("select name from sqlite_master").fetchall()
result = {"out": out, "rootonly": rootonly(), "tables": tables, "fresh": [fresh.st_uid, oct(fresh.st_mode & 0o777)]}
"""
    )
    out = result["out"]
    for case in ("owned by u", "link at the name", "watch", "writable"):
        assert "error" in out[case] and "refusing" in out[case]["error"], (case, out[case])
    assert "belongs to uid 4243" in out["owned by u"]["error"]
    assert result["rootonly"] == ["other.sqlite", "precious"]
    assert result["tables"] == [["root_only"]]
    assert out["fresh"] == {"value": "None"} and result["fresh"] == [0, "0o700"]


def test_a_fifo_or_a_hard_link_at_a_state_path_is_refused_at_once():
    """Fails before: a FIFO at quarantine.json, the run lock or the store hung the call
    (`rigger run`, `quarantine list`, `watch`), and the run lock truncated root's file that u
    had hard-linked under the lock's name in a shared sticky directory."""
    result = run_in_decoy_namespace(
        SETUP
        + """
out = {}
os.makedirs("/srv/state")
os.chmod("/srv/state", 0o700)
for name in ("quarantine.json", "run-0.lock", "baselines.sqlite", "watch/state.json", "watch/events.jsonl"):
    os.makedirs(os.path.dirname("/srv/state/" + name), mode=0o700, exist_ok=True)
    os.mkfifo("/srv/state/" + name)
os.environ["RIGGER_STATE_DIR"] = "/srv/state"
out["quarantine"] = bounded(quarantine.load)
out["lock"] = bounded(lambda: lockfile.acquire({"path": "/srv/state/run-{uid}.lock", "record": {}}))
out["store"] = bounded(lambda: BaselineStore(Path("/srv/state/baselines.sqlite")).measurements())
out["watch"] = bounded(lambda: watch_store.load(Path("/srv/state/watch")))
from engine.watch.journal import Journal
out["journal"] = bounded(lambda: Journal(Path("/srv/state/watch/events.jsonl")))
cli = subprocess.run([sys.executable, "-m", "engine.cli", "quarantine", "list"], capture_output=True, text=True,
                     timeout=20)
os.makedirs("/srv/shared")
os.chmod("/srv/shared", 0o1777)
os.link("/srv/rootonly/precious", "/srv/shared/run-0.lock")  # as u could with protected_hardlinks=0
out["linked lock"] = bounded(lambda: lockfile.acquire({"path": "/srv/shared/run-{uid}.lock", "record": {}}))
result = {"out": out, "cli": [cli.returncode, cli.stdout, cli.stderr],
          "precious": open("/srv/rootonly/precious").read()}
"""
    )
    out = result["out"]
    for case in ("quarantine", "store", "watch", "journal"):
        assert "error" in out[case] and "FIFO" in out[case]["error"], (case, out[case])
    for case in ("lock", "linked lock"):
        assert "'acquired': False" in out[case].get("value", ""), (case, out[case])
        assert "refusing" in out[case]["value"], (case, out[case])
    assert "FIFO" in out["lock"]["value"] and "hard links" in out["linked lock"]["value"]
    code, _, stderr = result["cli"]
    assert code == 5 and "FIFO" in stderr and "Traceback" not in stderr, result["cli"]
    assert result["precious"] == "root's data\n"


def test_login_users_lock_in_roots_shared_sticky_directory_but_not_in_another_users():
    """The run lock of every login user of a host lives in one $RIGGER_STATE_DIR: root's
    sticky directory works for `nobody`; a directory another user made does not. Real: the
    host-side lock code run by the system python as uid 65534."""
    result = run_in_decoy_namespace(
        SETUP
        + """
os.makedirs("/srv/shared")
os.chmod("/srv/shared", 0o1777)
as_user_dir("/srv/u/state")
code = ("import json; from engine.runlock import lockfile; "
        "answer = lockfile.acquire({'path': sys.argv[1] + '/run-{uid}.lock', 'record': {}}); "
        "print(json.dumps({k: answer.get(k) for k in ('acquired', 'refused')}))")
def as_nobody(directory):
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                           "-c", "import sys; " + code, directory], capture_output=True, text=True, timeout=20,
                          env={"PYTHONPATH": os.getcwd()})
    return json.loads(done.stdout) if done.returncode == 0 else {"rc": done.returncode, "err": done.stderr[-500:]}
result = {"shared": as_nobody("/srv/shared"), "users": as_nobody("/srv/u/state"),
          "lock": oct(os.stat("/srv/shared/run-65534.lock").st_mode & 0o777)
          if os.path.exists("/srv/shared/run-65534.lock") else None}
"""
    )
    assert result["shared"] == {"acquired": True, "refused": None}, result
    assert result["lock"] == "0o600"
    assert result["users"]["acquired"] is False and "belongs to uid 4243" in result["users"]["refused"], result
