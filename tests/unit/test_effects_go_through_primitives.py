"""Every effect on a host file goes through its guarded primitive: a structural check.

Real: the source of every module and probe (``modules/``) and of the whole engine
(``engine/``: probes, connections, the run lock, state stores, plans, templating), parsed
with Python's ``ast``. The check fails when code deletes, writes, reads or walks files any
other way than through the primitive of that kind of effect, also through library calls
that open a file by its path (``sqlite3.connect``, ``io.open``), unless the place is on the
reviewed allow-list below with its reason.

The table is by kind of effect: a kind is its forbidden calls, the primitive (the one
place those calls belong) and the allowed places. Adding a kind (signals, command lines)
is one more entry in EFFECTS.

Signals: every kill goes through ``signal_procs`` (identity re-checked on the host just
before each signal). Command lines: no module or probe starts a process itself, runs a
shell, or hands a connection a command built as one string (``"apt-get install " + name``,
an f-string, ``" ".join``): argv lists only, user values through engine/commandline.py.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WRITE_MODE_CHARS = set("wax+")
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


@dataclass(frozen=True)
class Effect:
    """``calls``: dotted names as written (``os.unlink``) or ``.name`` for a method on any
    object (``.unlink`` of a Path); ``primitives``: the files that implement the kind;
    ``allowed``: {file: why it may do this itself}."""

    calls: frozenset[str]
    primitives: tuple[str, ...]
    allowed: dict[str, str] = field(default_factory=dict)


# Reasons shared by several entries of the allow-list.
CONTROLLER = "reads the playbook's own files on the controller (templates, copy sources), not a host file"
KERNEL = "reads or lists kernel-made /proc, /sys or /etc/os-release entries: small, never a FIFO a user plants"
SHM = "the /dev/shm segment probes: fd-relative to the tmpfs they judged (the GPU/signal safety's area)"
FIND = (
    "Ansible's find: opens directories O_NOFOLLOW below a start path fileio judged and lists them "
    "(read-only; file content and checksums go through fileio and file_facts)"
)
CHECKPOINT_HASH = "hashes checkpoint shards of many GiB in blocks: a bound would refuse real models"
EXEC_CALLS = {f"os.{name}" for name in ("system", "popen", "posix_spawn", "posix_spawnp", "fork", "forkpty")}
EXEC_CALLS |= {f"os.exec{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}
EXEC_CALLS |= {f"os.spawn{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}
EXEC_CALLS |= {f"subprocess.{name}" for name in ("run", "Popen", "call", "check_call", "check_output", "getoutput")}
OPERATOR = "reads a file the operator names on the controller (a plan file, a record, a limit file, ansible.cfg)"
OWN_SOURCE = "reads this checkout's own source or schema files on the controller"
INVENTORY = "lists inventory directories (group_vars, host_vars) on the controller"
OWN_CHILD = "signals its own child process (started a few lines above, still its child), never another"
ALIVE = "os.kill(pid, 0): asks whether a process lives, sends no signal"
PASSWORD_LOOKUP = (
    "Ansible's password lookup: the password file on the controller, created O_EXCL|O_NOFOLLOW 0600, "
    "replaced atomically"
)

EFFECTS: dict[str, Effect] = {
    "delete": Effect(
        calls=frozenset(
            {"os.remove", "os.unlink", "os.rmdir", "os.removedirs", "shutil.rmtree", "shutil.move", ".unlink", ".rmdir"}
        ),
        primitives=("engine/probes/remove_path.py", "engine/probes/fileio.py"),
        allowed={"modules/gpu/probes/shm_clean.py": SHM, "engine/templating/password_lookup.py": PASSWORD_LOOKUP},
    ),
    "write": Effect(
        calls=frozenset(
            {
                "open:write",
                "os.open:write",
                "os.rename",
                "os.replace",
                "os.symlink",
                "os.link",
                "os.chmod",
                "os.chown",
                "os.lchown",
                "os.fchmod",
                "os.fchown",
                "os.mkdir",
                "os.makedirs",
                "os.mkfifo",
                "os.truncate",
                "os.utime",
                "shutil.copy",
                "shutil.copy2",
                "shutil.copyfile",
                "shutil.copytree",
                "tempfile.mkstemp",
                "tempfile.NamedTemporaryFile",
                ".write_text",
                ".write_bytes",
                ".touch",
                ".mkdir",
                ".symlink_to",
                ".rename",
                ".chmod",
                "sqlite3.connect",
            }
        ),
        primitives=("engine/probes/fileio.py", "engine/probes/remove_path.py"),
        allowed={
            "engine/baselines/store.py": "hands SQLite the real path fileio's state-file rules verified "
            "(open_state_dir/open_state_file) and checks the name is that file again after connecting",
            "engine/connection/ssh/hostkeys.py": "records a host key in the controller's own known_hosts "
            "(a 0700 directory of the operator's)",
            "engine/connection/ssh/sftp.py": "the SFTP fallback's chmod of its own random temp file "
            "(docs/safety.md: writes over plain SFTP)",
            "engine/templating/password_lookup.py": PASSWORD_LOOKUP,
        },
    ),
    "read": Effect(
        calls=frozenset({"open:read", "os.open:read", ".read_text", ".read_bytes"}),
        primitives=("engine/probes/fileio.py", "engine/probes/path_judge.py", "engine/probes/remove_path.py"),
        allowed={
            "engine/probes/__init__.py": "reads the probe sources of this checkout on the controller",
            "engine/connection/local.py": "calls fileio.read_bytes itself (the name reads as a method)",
            "engine/connection/remote_python/server.py": "opens os.devnull for a child's stdin",
            "engine/connection/remote_python/client.py": OWN_SOURCE,
            "engine/connection/ssh/hostkeys.py": "reads the controller's known_hosts files",
            "engine/baselines/rollout_view.py": OPERATOR,
            "engine/config.py": OPERATOR,
            "engine/docs.py": OWN_SOURCE,
            "engine/inventory/patterns.py": OPERATOR,
            "engine/plans/commands.py": OPERATOR,
            "engine/plans/planfile.py": OPERATOR,
            "engine/playbook/loader.py": OWN_SOURCE,
            "engine/runlock/__init__.py": OWN_SOURCE + " (sent to hosts as the lock's program)",
            "engine/templating/lookups.py": "Ansible's file lookup on the controller, bounded by size",
            "engine/templating/password_lookup.py": PASSWORD_LOOKUP,
            "engine/yamlload.py": "the playbook and inventory YAML on the controller: O_NONBLOCK, regular files only",
            "engine/controller_files.py": CONTROLLER,
            "modules/basic/write_file.py": CONTROLLER,
            "modules/basic/script.py": CONTROLLER + " (the script, sent to the host through the write primitive)",
            "modules/files/copy.py": CONTROLLER,
            "modules/files/template.py": CONTROLLER,
            "modules/files/unarchive.py": CONTROLLER + " (an archive, at most MAX_ARCHIVE_BYTES, sent to the host)",
            "modules/checkpoints/compat.py": CONTROLLER,
            "engine/probes/host.py": KERNEL,
            "engine/probes/procs.py": KERNEL,
            "engine/probes/port_owner.py": KERNEL,
            "engine/probes/setup_facts.py": KERNEL,
            "engine/probes/setup_virtual.py": KERNEL + " (and /etc/mtab, as Ansible's mount facts read it)",
            "modules/basic/include_vars.py": CONTROLLER + " (vars files, bounded to 16 MiB)",
            "modules/files/probes/file_mode.py": KERNEL,
            "modules/system/probes/wait_check.py": KERNEL,
            "modules/gpu/probes/shm.py": SHM,
            "modules/gpu/probes/shm_clean.py": SHM,
            "modules/checkpoints/probes/model_verify.py": CHECKPOINT_HASH,
            "modules/checkpoints/probes/model_peer_write.py": "hashes its own part file back through /proc/self/fd of "
            "the descriptor fileio opened for it (the same inode, checked), never by path",
            "modules/files/probes/file_facts.py": "checksums a path lstat found to be a regular file, in 1 MiB blocks",
            "modules/checkpoints/probes/model_vllm_info.py": "reads one source file of the installed vLLM package",
            "modules/system/probes/account_facts.py": "reads /etc/shadow (root-owned) to compare password hashes",
            "modules/system/probes/venv_dists.py": "reads dist-info metadata of a venv rigger manages",
            "modules/system/probes/find_files.py": FIND,
            "modules/serving/probes/vllm_log_scan.py": "scans vLLM's log (opened by fileio at launch) up to its budget",
            "modules/serving/probes/vllm_wait.py": "tails vLLM's log, at most MAX_CHUNK bytes per look",
            "modules/serving/probes/vllm_liveness.py": KERNEL,
            "modules/gpu/probes/gpu_health.py": "tails the kernel log: O_NOFOLLOW|O_NONBLOCK, regular files only, "
            "the last KERNEL_LOG_MAX bytes",
        },
    ),
    "signal": Effect(
        calls=frozenset(
            {
                "os.kill",
                "os.killpg",
                "signal.pthread_kill",
                "signal.pidfd_send_signal",
                "os.pidfd_send_signal",
                ".send_signal",
                ".terminate",
                ".kill",
            }
        ),
        primitives=("engine/probes/signal_procs.py",),
        allowed={
            "engine/connection/local.py": OWN_CHILD + " (a command past its timeout, by its own session)",
            "engine/connection/remote_python/server.py": OWN_CHILD + " (the host's remote python ends what it ran)",
            "engine/runlock/__init__.py": ALIVE,
            "engine/runlock/lockfile.py": ALIVE,
            "engine/runlock/holders.py": OWN_CHILD + " (the run-lock holder it started)",
        },
    ),
    "command": Effect(
        calls=frozenset({*EXEC_CALLS, "shell=True", "run:text"}),
        primitives=("engine/commandline.py",),
        allowed={
            "modules/serving/probes/vllm_launch.py": "starts its own fixed detach program under sys.executable; "
            "the server's argv is a list built by serve_vllm/ray_cluster (spec.build_argv: secret options refused)",
            "modules/gpu/probes/gpus.py": "runs nvidia-smi with a fixed argv: no user value on it",
            "modules/gpu/probes/gpu_health.py": "runs nvidia-smi, dmesg and journalctl -k with fixed argv",
            "engine/connection/local.py": "the local connection itself: runs a task's argv list (no shell)",
            "engine/connection/remote_python/server.py": "the host's remote python: spawns a task's argv list",
            "engine/runlock/holders.py": "starts the run-lock holder: the host's python with a fixed program",
            "engine/templating/lookups.py": "Ansible's pipe lookup runs its term as a shell command on the "
            "controller, by design (ansible-core does the same)",
            "modules/gpu/probes/collective_smoke.py": "starts its own fixed rank program under sys.executable (the "
            "vLLM venv's python); its arguments on stdin, no user value on argv; ends ranks through signal_procs",
        },
    ),
    "walk": Effect(
        calls=frozenset({"os.walk", "os.scandir", "os.listdir", ".rglob", ".glob", ".iterdir", "glob.glob"}),
        primitives=("engine/probes/fileio.py", "engine/probes/path_judge.py", "engine/probes/remove_path.py"),
        allowed={
            "engine/probes/__init__.py": "finds the probe files of this checkout on the controller",
            "modules/files/copy.py": CONTROLLER,
            "engine/probes/procs.py": KERNEL,
            "engine/probes/port_owner.py": KERNEL,
            "engine/probes/setup_facts.py": KERNEL,
            "engine/probes/setup_virtual.py": "lists udev's /dev/disk/by-uuid links (their targets are only named)",
            "modules/basic/include_vars.py": CONTROLLER + " (a vars dir: include_vars dir=)",
            "engine/templating/lookups.py": CONTROLLER + " (fileglob: one folder's matches of a pattern)",
            "modules/serving/probes/vllm_liveness.py": KERNEL,
            "modules/gpu/probes/shm.py": SHM,
            "modules/checkpoints/probes/model_files.py": "lists one model directory (no recursion)",
            "modules/checkpoints/probes/model_verify.py": CHECKPOINT_HASH,
            "modules/system/probes/venv_dists.py": "globs a venv's site-packages for dist-info directories",
            "modules/system/probes/find_files.py": FIND,
            "engine/inventory/__init__.py": INVENTORY,
            "engine/inventory/varsources.py": INVENTORY,
            "engine/registry.py": "finds the rooms of this checkout on the controller",
        },
    ),
}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else f".{node.attr}"
    return None


def _names_in(node: ast.AST) -> set[str]:
    return {
        n.attr if isinstance(n, ast.Attribute) else n.id
        for n in ast.walk(node)
        if isinstance(n, (ast.Attribute, ast.Name))
    }


def _open_kind(call: ast.Call, name: str) -> str:
    """``open:write``/``open:read`` (builtin open by its mode), ``os.open:...`` by its flags."""
    if name == "open":
        mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
        text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"
        return (
            "open:write"
            if WRITE_MODE_CHARS & set(text) or (mode is not None and not isinstance(mode, ast.Constant))
            else "open:read"
        )
    flags = call.args[1] if len(call.args) > 1 else None
    return "os.open:write" if flags is None or WRITE_FLAGS & _names_in(flags) else "os.open:read"


def _built_as_text(node: ast.expr) -> bool:
    """A command made as one string: a literal, an f-string, ``+``/``%``, ``.join``/``.format``."""
    if isinstance(node, (ast.JoinedStr, ast.BinOp)):
        return True
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("join", "format")


def _command_shape(call: ast.Call, name: str) -> list[tuple[int, str]]:
    """``shell=True`` anywhere; ``run:text`` for a ``.run(...)`` given its command as text."""
    found = []
    if any(k.arg == "shell" and not (isinstance(k.value, ast.Constant) and not k.value.value) for k in call.keywords):
        found.append((call.lineno, "shell=True"))
    if name.rsplit(".", 1)[-1] == "run" and call.args and _built_as_text(call.args[0]):
        found.append((call.lineno, "run:text"))
    return found


def effect_calls(source: str) -> list[tuple[int, str]]:
    """(line, call as EFFECTS names it) of every file effect in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name is None:
            continue
        if name == "io.open":
            name = "open"
        if name in ("open", "os.open"):
            found.append((node.lineno, _open_kind(node, name)))
            continue
        found += _command_shape(node, name)
        method = "." + name.rsplit(".", 1)[-1]
        found.append(
            (
                node.lineno,
                name
                if "." in name
                and not name.startswith(".")
                and name.split(".")[0] in ("os", "shutil", "tempfile", "glob", "signal", "subprocess", "sqlite3")
                else method,
            )
        )
    return found


def checked_files() -> list[str]:
    files = sorted((REPO / "modules").rglob("*.py")) + sorted((REPO / "engine").rglob("*.py"))
    return [path.relative_to(REPO).as_posix() for path in files]


def violations(rel: str, source: str) -> list[str]:
    found = []
    for line, call in effect_calls(source):
        for kind, effect in EFFECTS.items():
            if call in effect.calls and rel not in effect.primitives and rel not in effect.allowed:
                found.append(f"{rel}:{line}: {call} ({kind}) outside its primitive {effect.primitives[0]}")
    return found


@pytest.mark.parametrize("rel", checked_files())
def test_file_effects_go_through_their_primitive(rel):
    assert violations(rel, (REPO / rel).read_text(encoding="utf-8")) == []


def test_the_allow_list_names_only_files_that_exist_and_need_it():
    """An entry whose file is gone, or that no longer does what it is allowed, is removed."""
    for kind, effect in EFFECTS.items():
        for rel in effect.allowed:
            assert (REPO / rel).is_file(), (kind, rel)
            calls = {call for _, call in effect_calls((REPO / rel).read_text(encoding="utf-8"))}
            assert calls & effect.calls, f"{rel} is allowed to {kind} but does not: drop the entry"


@pytest.mark.parametrize(
    "planted",
    [
        "import shutil\nshutil.rmtree('/srv')\n",
        "import os\nos.unlink('/etc/x')\n",
        "from pathlib import Path\nPath('/etc/x').write_text('y')\n",
        "open('/etc/x', 'w').write('y')\n",
        "import os\nos.open('/etc/x', os.O_WRONLY | os.O_CREAT)\n",
        "open('/dev/zero').read()\n",
        "import os\nos.walk('/srv')\n",
        "import os\nos.kill(1234, 9)\n",
        "import os, signal\nos.killpg(0, signal.SIGKILL)\n",
        "import signal\nsignal.pthread_kill(1, 9)\n",
        "import psutil\npsutil.Process(1234).terminate()\n",
        "proc.send_signal(9)\n",
        "import subprocess\nsubprocess.run(['apt-get', 'install', name])\n",
        "import subprocess\nsubprocess.run('apt-get install ' + name, shell=True)\n",
        "import os\nos.system('pip install ' + name)\n",
        "import os\nos.execvp('apt-get', ['apt-get', name])\n",
        "ctx.conn.run('apt-get install ' + name)\n",
        "ctx.conn.run(f'pip install {name}')\n",
        "ctx.conn.run(' '.join(['pip', 'install', name]))\n",
        "import sqlite3\nsqlite3.connect('/srv/state/baselines.sqlite')\n",
        "import io\nio.open('/etc/x', 'w')\n",
    ],
)
def test_a_raw_effect_planted_in_a_module_is_caught(planted):
    """The check itself can fail: each of these, added to a module, is a violation."""
    source = (REPO / "modules/files/file.py").read_text(encoding="utf-8") + "\n" + planted
    assert violations("modules/files/file.py", source)
