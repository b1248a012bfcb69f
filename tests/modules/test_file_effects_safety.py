"""Every module that deletes, writes or reads a host file goes through the guarded
primitives (path_judge/remove_path for deletes, fileio for writes and reads), whatever
module it is and however the path is spelled.

Real: the file, copy, template, lineinfile, blockinfile, write_file and wait_for modules and their
probes on the local connection, the kernel's path resolution, symlinks, FIFOs, /dev/zero,
tmpfs and bind mounts. What could be destroyed for real lives in a private mount namespace
(decoyns.py): /srv, /opt, /media, /mnt and /home are decoy tmpfs, /etc and /root overlays
whose writes never reach this machine. Nothing is mocked. Each test was seen red on the
code before the primitives (the commit message says how).
"""

from __future__ import annotations

import pytest
from decoyns import run_in_decoy_namespace

# -- delete --------------------------------------------------------------------------------

DELETE_SPELLINGS = [
    "/",
    "//",
    "/srv",
    "//srv",
    "/srv/",
    "/./srv",
    "/srv/.",
    "/srv/www/..",
    "/media/srvlink/.",
    "/media/rootlink/srv/",
    "/home",
    "/srv/homes/ops",
    "//srv/homes/ops/",
    "/srv/homes",
    "/srv/data",
    "/srv/data/bound",
    "srv",
    "srv/www",
]

DELETE_SETUP = """
for top in DECOY_DIRS:
    write(top + "/keep/file")
write("/srv/www/index.html")
os.symlink("/srv", "/media/srvlink")
os.symlink("/", "/media/rootlink")
write("/srv/homes/ops/.bashrc")
add_decoy_user("rigger-decoy-ops", 4242, "/srv/homes/ops")
write("/opt/bindsrc/inner")
os.makedirs("/srv/data/bound")
write("/srv/data/keep")
subprocess.run(["mount", "--bind", "/opt/bindsrc", "/srv/data/bound"], check=True)
"""


def test_file_absent_refuses_protected_objects_in_every_spelling():
    """Broken before: `//srv`, `/srv/www/..`, `<link to a dir>/` and a directory holding a
    bind mount each removed what they reach, `/` was planned as a removal of the root."""
    result = run_in_decoy_namespace(
        DELETE_SETUP
        + f"""
before = {{top: tree(top) for top in DECOY_DIRS}}
planned = {{p: plan("file", {{"path": p, "state": "absent"}}) for p in {DELETE_SPELLINGS!r}}}
done = {{p: converge("file", {{"path": p, "state": "absent"}}) for p in {DELETE_SPELLINGS!r} if p not in ("/", "//")}}
after = {{top: tree(top) for top in DECOY_DIRS}}
result = {{"planned": planned, "done": done, "lost": {{t: sorted(set(before[t]) - set(after[t])) for t in before}}}}
"""
    )
    assert result["lost"] == {top: [] for top in ("/srv", "/opt", "/media", "/mnt", "/home")}
    for spelling in DELETE_SPELLINGS:
        for phase in ("planned", "done"):
            outcome = result[phase].get(spelling)
            if outcome is not None:
                assert outcome["status"] == "failed" and "refusing" in outcome["msg"], (phase, spelling, outcome)
    assert "mount point /srv/data/bound" in result["done"]["/srv/data"]["msg"]
    assert "rigger-decoy-ops" in result["done"]["/srv/homes"]["msg"]


def test_file_absent_removes_a_link_not_its_target_and_names_the_real_path():
    """Broken before: `link/` removed the link target's files; the plan showed the spelling."""
    result = run_in_decoy_namespace(
        """
write("/opt/victim/file")
write("/srv/work/models/a")
os.symlink("/opt/victim", "/srv/work/link")
os.symlink("/srv", "/media/srvlink")
os.symlink("/srv/work", "/media/worklink")
models = plan("file", {"path": "//media/worklink/./models/", "state": "absent"})
link = converge("file", {"path": "/srv/work/link/", "state": "absent"})
srvlink = converge("file", {"path": "/media/srvlink/", "state": "absent"})
result = {"link": link, "srvlink": srvlink, "models": models, "opt": tree("/opt"), "srv": tree("/srv"),
          "media": tree("/media")}
"""
    )
    assert result["link"]["status"] == "changed" and "/srv/work/link" in result["link"]["msg"]
    assert result["opt"] == ["/opt/victim", "/opt/victim/file"]
    assert "/srv/work/link" not in result["srv"]
    assert result["srvlink"]["status"] == "changed" and result["media"] == ["/media/worklink"]
    assert "/srv/work/models/a" in result["srv"]
    assert result["models"]["msg"] == "remove directory /srv/work/models"


# -- write and create ----------------------------------------------------------------------

WRITE_SETUP = """
os.makedirs("/home/u")
os.chown("/home/u", 4242, 4242)
add_decoy_user("rigger-decoy-u", 4242, "/home/u")
write("/root/.ssh/authorized_keys", "root-key\\n")
write("/root/only-root/keep", "root only\\n")
for name, target in ((".ssh", "/root/.ssh"), ("drop", "/root/only-root")):
    os.symlink(target, "/home/u/" + name)
    os.lchown("/home/u/" + name, 4242, 4242)  # u made these links in u's own home
write("/opt/tpl.j2", "attacker-key {{ 1 + 1 }}\\n")

def root_side():
    found = {}
    for top in ("/root/.ssh", "/root/only-root"):
        for path in tree(top):
            found[path] = open(path).read() if os.path.isfile(path) else "dir"
    return found
"""

KEYS = "/home/u/.ssh/authorized_keys"
WRITES_THROUGH_A_USERS_LINK = {
    "write_file": ("write_file", {"path": KEYS, "content": "attacker-key\n"}),
    "copy content": ("copy", {"dest": KEYS, "content": "attacker-key\n"}),
    "copy DIR/": ("copy", {"src": "/opt/tpl.j2", "dest": "/home/u/drop/"}),
    "lineinfile": ("lineinfile", {"path": KEYS, "line": "attacker-key", "create": True}),
    "blockinfile": ("blockinfile", {"path": KEYS, "block": "attacker-key", "create": True}),
    "template": ("template", {"src": "/opt/tpl.j2", "dest": KEYS}),
    "file touch": ("file", {"path": "/home/u/.ssh/planted", "state": "touch"}),
    "file directory": ("file", {"path": "/home/u/drop/newdir", "state": "directory"}),
    "file directories": ("file", {"path": "/home/u/drop/new/deeper", "state": "directory"}),
    "file mode": ("file", {"path": KEYS, "state": "file", "mode": "0666"}),
    "file link": ("file", {"path": "/home/u/.ssh/id_link", "state": "link", "src": "/etc/shadow"}),
    # refused before the hub is asked (nothing listens on the endpoint): the download would
    # have written the model, and its manifest, into the root-only directory
    "ensure_model": (
        "ensure_model",
        {"repo_id": "o/r", "local_dir": "/home/u/drop/m", "endpoint": "http://127.0.0.1:9"},
    ),
}


@pytest.mark.parametrize("case", sorted(WRITES_THROUGH_A_USERS_LINK))
def test_root_never_writes_through_a_link_another_user_made(case):
    """Broken before: as root, each of these followed /home/u/.ssh -> /root/.ssh (or
    /home/u/drop -> /root/only-root), made by u, and rewrote root's authorized_keys or
    wrote into the root-only directory; check mode planned the write."""
    module, args = WRITES_THROUGH_A_USERS_LINK[case]
    result = run_in_decoy_namespace(
        WRITE_SETUP
        + f"""
before = root_side()
planned = plan({module!r}, {args!r})
outcome = converge({module!r}, {args!r})
result = {{"planned": planned, "outcome": outcome, "before": before, "after": root_side()}}
"""
    )
    assert result["after"] == result["before"], result["outcome"]
    assert result["outcome"]["status"] == "failed", result["outcome"]
    assert "symlink owned by uid 4242" in result["outcome"]["msg"], result["outcome"]
    # refused in the plan already: check mode shows it
    assert result["planned"]["status"] == "failed" and "symlink owned by uid 4242" in result["planned"]["msg"]


def test_write_file_onto_a_link_to_a_secret_replaces_the_link_and_never_reads_the_secret():
    """Broken before: the plan's diff (shown by --diff, kept in the plan file) held the
    secret the link pointed to."""
    result = run_in_decoy_namespace(
        """
write("/root/secret", "TOPSECRET\\n")
os.makedirs("/srv/app")
os.symlink("/root/secret", "/srv/app/app.conf")
spec = registry.get("write_file")
args = spec.with_defaults({"path": "/srv/app/app.conf", "content": "setting=1\\n"})
change = spec.plan(_ctx(True), args)
shown = repr((change.summary, change.diffs, change.payload, change.fingerprint))
done = spec.apply(_ctx(False), args, change)
result = {"shown": shown, "secret": open("/root/secret").read(), "is_link": os.path.islink("/srv/app/app.conf"),
          "content": open("/srv/app/app.conf").read(), "msg": done.msg}
"""
    )
    assert "TOPSECRET" not in result["shown"]
    assert "symlink -> /root/secret" in result["shown"]
    assert result["secret"] == "TOPSECRET\n"
    assert (result["is_link"], result["content"]) == (False, "setting=1\n")


FOLLOW_SETUP = (
    WRITE_SETUP
    + """
write("/root/app/app.conf", "old=1\\n")
os.makedirs("/srv/etc")
os.symlink("/root/app/app.conf", "/srv/etc/app.conf")  # root's own link: trusted, as the kernel trusts it
os.symlink("/root/.ssh/authorized_keys", "/home/u/keys")  # u's link to root's file
os.lchown("/home/u/keys", 4242, 4242)
write("/home/u/own.conf", "u=1\\n")
os.chown("/home/u/own.conf", 4242, 4242)
os.symlink("/home/u/own.conf", "/home/u/own-link")  # u's link to u's own file
os.lchown("/home/u/own-link", 4242, 4242)

def seen(path):
    return {"is_link": os.path.islink(path), "target": open(os.path.realpath(path)).read(),
            "mode": oct(os.stat(path).st_mode & 0o7777)}
"""
)

FOLLOWED_WRITES = {
    "copy content": ("copy", {"content": "new=2\n"}),
    "template": ("template", {"src": "/opt/tpl.j2"}),
    "lineinfile": ("lineinfile", {"line": "new=2"}),
    "blockinfile": ("blockinfile", {"block": "new=2"}),
}


@pytest.mark.parametrize("case", sorted(FOLLOWED_WRITES))
def test_follow_true_writes_what_a_judged_link_points_to_and_only_then(case):
    """`follow: true` (Ansible's copy/template `follow`): root's own link is followed and
    its target written, the link stays; another user's link to root's file is refused in
    the plan and at apply; that user's link to its own file is followed. Without follow a
    link fails the task naming `follow: true`, and its target is neither written nor read
    into the message. Real: the modules and probes on the local connection, the kernel's
    links, in the decoy namespace. Red before: `follow` was an unknown argument (exit 4)."""
    module, extra = FOLLOWED_WRITES[case]
    key = "path" if module in ("lineinfile", "blockinfile") else "dest"
    result = run_in_decoy_namespace(
        FOLLOW_SETUP
        + f"""
before = root_side()
args = {extra!r}
planned = plan({module!r}, {{**args, {key!r}: "/srv/etc/app.conf", "follow": True}})
followed = converge({module!r}, {{**args, {key!r}: "/srv/etc/app.conf", "follow": True}})
again = converge({module!r}, {{**args, {key!r}: "/srv/etc/app.conf", "follow": True}})
app = seen("/srv/etc/app.conf")
unfollowed = converge({module!r}, {{**args, {key!r}: "/srv/etc/app.conf"}})
app_after = seen("/srv/etc/app.conf")
escape_plan = plan({module!r}, {{**args, {key!r}: "/home/u/keys", "follow": True}})
escape = converge({module!r}, {{**args, {key!r}: "/home/u/keys", "follow": True}})
own = converge({module!r}, {{**args, {key!r}: "/home/u/own-link", "follow": True}})
result = {{"planned": planned, "followed": followed, "again": again, "app": app, "unfollowed": unfollowed,
          "app_after": app_after, "escape_plan": escape_plan, "escape": escape, "keys": before == root_side(),
          "own": own, "own_seen": seen("/home/u/own-link")}}
"""
    )
    assert result["planned"]["status"] == "change", result["planned"]
    assert "/root/app/app.conf (through the link /srv/etc/app.conf)" in result["planned"]["msg"]
    assert result["followed"]["status"] == "changed", result["followed"]
    assert result["again"]["status"] == "unchanged", result["again"]
    assert result["app"]["is_link"], "the link was replaced, not followed"
    assert ("attacker-key 2" if module == "template" else "new=2") in result["app"]["target"], result["app"]
    # without follow: refused, naming what to do; the target is not in the message
    assert result["unfollowed"]["status"] == "failed" and "follow: true" in result["unfollowed"]["msg"]
    assert "old=1" not in result["unfollowed"]["msg"] and result["app_after"] == result["app"]
    for outcome in (result["escape_plan"], result["escape"]):
        assert outcome["status"] == "failed" and "symlink owned by uid 4242" in outcome["msg"], outcome
    assert result["keys"], "root's files changed through u's link"
    assert result["own"]["status"] == "changed", result["own"]
    assert result["own_seen"]["is_link"]


def test_file_follows_a_judged_link_by_default_as_ansible_and_a_link_has_no_mode():
    """`file` follows a link at path by default (Ansible's follow: true): the mode of root's
    link's target is set, once; another user's link to root's file is refused; with
    `follow: false` the link itself is the path: a link has no mode, so asking one is no
    change (it was planned forever before: the link's 0777 never matched). Real: the file
    module and fileio on the local connection, in the decoy namespace."""
    result = run_in_decoy_namespace(
        FOLLOW_SETUP
        + """
before = root_side()
followed = converge("file", {"path": "/srv/etc/app.conf", "mode": "0640"})
again = converge("file", {"path": "/srv/etc/app.conf", "mode": "0640"})
unfollowed = converge("file", {"path": "/srv/etc/app.conf", "mode": "0600", "follow": False})
escape = converge("file", {"path": "/home/u/keys", "mode": "0666"})
touched = converge("file", {"path": "/home/u/keys", "state": "touch"})
result = {"followed": followed, "again": again, "unfollowed": unfollowed, "escape": escape, "touched": touched,
          "app": seen("/srv/etc/app.conf"), "root_same": before == root_side(),
          "keys_mode": oct(os.stat("/root/.ssh/authorized_keys").st_mode & 0o777)}
"""
    )
    assert result["followed"]["status"] == "changed", result["followed"]
    assert "/root/app/app.conf" in result["followed"]["msg"]
    assert result["app"]["mode"] == "0o640" and result["app"]["is_link"]
    assert result["again"]["status"] == "unchanged", result["again"]
    assert result["unfollowed"]["status"] == "unchanged", result["unfollowed"]
    for outcome in (result["escape"], result["touched"]):
        assert outcome["status"] == "failed" and "symlink owned by uid 4242" in outcome["msg"], outcome
    assert result["root_same"] and result["keys_mode"] != "0o666"


def test_plan_file_and_log_never_write_through_a_planted_link():
    """Broken before: `rigger plan -o` opened the predictable `.NAME.PID.tmp` without
        O_EXCL|O_NOFOLLOW, so a link planted there made it overwrite the link's target; a
        dangling link at vLLM's log_path made root create its target (here it is rotated aside
    as a link and a file of its own is created)."""
    result = run_in_decoy_namespace(
        """
from engine import probes
from engine.errors import OptionsError
from engine.plans import planfile
write("/opt/victim", "precious\\n")
os.makedirs("/srv/plans")
os.symlink("/opt/victim", f"/srv/plans/.plan.json.{os.getpid()}.tmp")
os.symlink("/opt/victim", "/srv/plans/linked.json")
empty = planfile.Plan("x", 0.0, "salt", planfile.Inputs("p.yml", {}, "inv", ""), planfile.Options(), ())
planfile.save(empty, "/srv/plans/plan.json")
planfile.save(empty, "/srv/plans/linked.json")
os.makedirs("/srv/logs")
os.symlink("/opt/created-by-root", "/srv/logs/vllm.log")
try:
    launched = probes.run_in_process("vllm_launch", {"argv": ["true"], "log_path": "/srv/logs/vllm.log",
                                                     "state_path": "/srv/state/vllm.json"})
except probes.ProbeError as exc:
    launched = {"error": str(exc)}
result = {"victim": open("/opt/victim").read(), "linked_is_link": os.path.islink("/srv/plans/linked.json"),
          "created": os.path.lexists("/opt/created-by-root"), "launched": launched,
          "plan_ok": open("/srv/plans/plan.json").read().startswith("{"),
          "log_is_file": os.path.isfile("/srv/logs/vllm.log") and not os.path.islink("/srv/logs/vllm.log"),
          "prev_is_link": os.path.islink("/srv/logs/vllm.log.prev")}
"""
    )
    assert result["victim"] == "precious\n"
    assert result["plan_ok"] and not result["linked_is_link"]
    assert not result["created"]
    # the link is rotated aside as a link (LOG.prev), and the log is a new file of its own
    assert result["log_is_file"] and result["prev_is_link"], result["launched"]


# -- read ----------------------------------------------------------------------------------

READS = {
    "lineinfile on a FIFO": ("lineinfile", {"path": "/srv/fifo", "line": "x"}, "a FIFO"),
    "lineinfile on /dev/zero": ("lineinfile", {"path": "/dev/zero", "line": "x"}, "a character device"),
    "blockinfile on a FIFO": ("blockinfile", {"path": "/srv/fifo", "block": "x"}, "a FIFO"),
    "copy remote_src /dev/zero": ("copy", {"src": "/dev/zero", "dest": "/srv/out", "remote_src": True}, "device"),
    "copy remote_src FIFO": ("copy", {"src": "/srv/fifo", "dest": "/srv/out", "remote_src": True}, "a FIFO"),
    "lineinfile over the bound": ("lineinfile", {"path": "/srv/big", "line": "x"}, "over the limit of 67108864"),
    "wait_for a FIFO": ("wait_for", {"path": "/srv/fifo", "search_regex": "x", "timeout": 2, "sleep": 0.2}, "FIFO"),
    "copy remote_src loop": ("copy", {"src": "/srv/loop/", "dest": "/opt/out", "remote_src": True}, "not followed"),
}


@pytest.mark.parametrize("case", sorted(READS))
def test_reads_refuse_what_blocks_never_ends_or_does_not_fit(case):
    """Broken before: lineinfile and wait_for (even with timeout 2) blocked on a FIFO
    forever, /dev/zero was read until MemoryError, copy remote_src of a tree with a link
    loop never finished, even planned. Planned here (check mode) and applied."""
    module, args, why = READS[case]
    result = run_in_decoy_namespace(
        f"""
os.mkfifo("/srv/fifo")
with open("/srv/big", "wb") as handle:
    handle.truncate((64 << 20) + 1)  # sparse: no tmpfs space used
os.makedirs("/srv/loop/a/b")
os.symlink("/srv/loop", "/srv/loop/a/b/back")
os.symlink("..", "/srv/loop/a/up")
result = {{"planned": plan({module!r}, {args!r}), "done": converge({module!r}, {args!r})}}
""",
        timeout_s=60,
    )
    for phase in ("planned", "done"):
        outcome = result[phase]
        if module == "wait_for" and phase == "planned":
            continue  # wait_for looks only when it runs
        assert outcome["status"] == "failed" and why in outcome["msg"], (phase, outcome)


def test_another_users_link_is_followed_to_that_users_own_files_only():
    """A model cache owned by a service user (snapshot links into its blobs, all uid 4243)
    stays readable and writable as root; the same user's link out of its own files is not.
    Broken once (every other user's link refused): the cache read failed."""
    result = run_in_decoy_namespace(
        """
write("/srv/cache/blobs/abc", '{"quantization_config": {}}\\n')
os.makedirs("/srv/cache/snapshots/r1")
os.symlink("../../blobs/abc", "/srv/cache/snapshots/r1/config.json")
os.symlink("/srv/cache/blobs", "/srv/cache/snapshots/r1/blobdir")
os.symlink("/etc", "/srv/cache/snapshots/r1/etc")
for base, dirs, files in os.walk("/srv/cache"):
    for name in [base] + [os.path.join(base, n) for n in dirs + files]:
        os.lchown(name, 4243, 4243)
read = converge("lineinfile", {"path": "/srv/cache/snapshots/r1/blobdir/abc", "line": "# patched"})
out = converge("lineinfile", {"path": "/srv/cache/snapshots/r1/etc/hostname", "line": "x", "create": True})
result = {"read": read, "out": out, "blob": open("/srv/cache/blobs/abc").read()}
"""
    )
    assert result["read"]["status"] == "changed", result["read"]
    assert result["blob"].endswith("# patched\n")
    assert result["out"]["status"] == "failed" and "owned by uid 0" in result["out"]["msg"], result["out"]


def test_recursive_attributes_stop_at_a_mount_before_changing_anything():
    """Broken before: `file state=directory recurse=true owner=...` walked into a bind mount
    (another filesystem) and chowned what it holds. `path: /` with recurse: run against
    main once, it chmodded the host's top-level directories (this test then applied it;
    now it is planned only, which cannot change anything).
    A trailing slash on a directory is still fine."""
    result = run_in_decoy_namespace(
        """
write("/opt/bindsrc/inner")
write("/srv/data/keep")
os.makedirs("/srv/data/bound")
subprocess.run(["mount", "--bind", "/opt/bindsrc", "/srv/data/bound"], check=True)
tree_args = {"path": "/srv/data", "state": "directory", "owner": "4242", "recurse": True}
planned = plan("file", tree_args)
done = converge("file", tree_args)
# `/` is planned only: it cannot be a decoy (a mount namespace shares the root
# filesystem), and a plan cannot change anything
root = plan("file", {"path": "/", "state": "directory", "mode": "0777", "recurse": True})
slash = converge("file", {"path": "/srv/app/", "state": "directory", "mode": "0750"})
owners = {p: os.lstat(p).st_uid for p in ["/srv/data", "/srv/data/keep", "/opt/bindsrc/inner"]}
result = {"planned": planned, "done": done, "root": root, "slash": slash, "owners": owners,
          "app_mode": oct(os.stat("/srv/app").st_mode & 0o777)}
"""
    )
    assert result["owners"] == {"/srv/data": 0, "/srv/data/keep": 0, "/opt/bindsrc/inner": 0}
    for phase in ("planned", "done"):
        assert result[phase]["status"] == "failed" and "another filesystem" in result[phase]["msg"], result[phase]
    assert result["root"]["status"] == "failed" and "another filesystem" in result["root"]["msg"], result["root"]
    assert result["slash"]["status"] == "changed" and result["app_mode"] == "0o750", result["slash"]


def test_an_entry_swapped_for_a_link_after_its_lstat_keeps_the_targets_mode(tmp_path):
    """A recursive chmod lstats an entry, then changes it; a user racing it in its own
    directory swaps the entry for a link to a file it wants opened up. Linux chmod follows
    links, so changing it by name gave the link's target the mode (red before: the victim
    became 0666). The swap is made deterministic here by calling the step with the stale
    lstat. Real: fileio's step, the kernel's O_PATH and links, files under tmp_path only."""
    import os

    from engine.probes import fileio

    victim = tmp_path / "victim"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    (tmp_path / "tree").mkdir()
    entry = tmp_path / "tree" / "entry"
    entry.write_text("mine\n")
    stale = os.lstat(entry)
    entry.unlink()
    entry.symlink_to(victim)
    directory = os.open(tmp_path / "tree", os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(fileio.Refused, match="replaced while being changed"):
            fileio._set_attrs(directory, "entry", stale, -1, -1, lambda current, is_dir: 0o666)
    finally:
        os.close(directory)
    assert victim.stat().st_mode & 0o777 == 0o600


# -- hard links ------------------------------------------------------------------------------

HARDLINK_SETUP = """
add_decoy_user("rigger-decoy-u", 4243, "/srv/u")
write("/srv/root/secret", "root secret\\n")
os.chmod("/srv/root/secret", 0o600)
os.chmod("/srv/root", 0o700)
for place in ("/srv/u", "/srv/u/tree"):
    os.makedirs(place, exist_ok=True)
    os.chown(place, 4243, 4243)
os.makedirs("/srv/tmp")
os.chmod("/srv/tmp", 0o1777)
# what u could do with fs.protected_hardlinks=0: link root's file into its own places
for name in ("/srv/u/secret", "/srv/u/tree/secret", "/srv/tmp/x"):
    os.link("/srv/root/secret", name)
os.symlink("/srv/root", "/srv/rootlink")
os.link("/srv/rootlink", "/srv/u/cfg", follow_symlinks=False)  # a root-owned symlink in u's dir
write("/srv/u/own", "mine\\n")
os.chown("/srv/u/own", 4243, 4243)
os.link("/srv/u/own", "/srv/u/own2")  # u's own hard link: u's business
os.utime("/srv/root/secret", (1000, 1000))
"""


def _secret_state():
    return """
st = os.stat("/srv/root/secret")
result["secret"] = [st.st_uid, oct(st.st_mode & 0o7777), open("/srv/root/secret").read(), st.st_mtime]
result["copies"] = sorted(
    p for p in tree("/srv") if os.path.isfile(p) and not os.path.islink(p)
    and os.stat(p).st_uid == 4243 and "root secret" in open(p).read())
"""


def test_another_owners_hard_link_is_never_chowned_chmodded_read_or_trusted():
    """Fails today: `file owner/mode` and `recurse` handed root's file to u, lineinfile with
    `owner: u` gave u a copy of it, and root's symlink hard-linked into u's directory was
    trusted because root owns it. Real: hard links and symlinks on a decoy tmpfs; the user is
    a passwd line in the namespace."""
    result = run_in_decoy_namespace(
        HARDLINK_SETUP
        + """
u = "rigger-decoy-u"
outcomes = {
    "chown": converge("file", {"path": "/srv/u/secret", "owner": u}),
    "chmod": converge("file", {"path": "/srv/u/secret", "mode": "0644"}),
    "recurse": converge("file", {"path": "/srv/u/tree", "state": "directory", "owner": u, "recurse": True}),
    "lineinfile owner": converge("lineinfile", {"path": "/srv/tmp/x", "line": "more", "owner": u}),
    "blockinfile owner": converge("blockinfile", {"path": "/srv/tmp/x", "block": "more", "owner": u}),
    "lineinfile in u's dir": converge("lineinfile", {"path": "/srv/u/secret", "line": "more"}),
    "through the linked symlink": converge("copy", {"dest": "/srv/u/cfg/secret", "content": "pwned\\n"}),
    "touch": converge("file", {"path": "/srv/u/secret", "state": "touch"}),
    "u's own hard link": converge("file", {"path": "/srv/u/own2", "mode": "0600"}),
}
result = {"outcomes": outcomes}
"""
        + _secret_state()
    )
    outcomes = result["outcomes"]
    for case, outcome in outcomes.items():
        if case == "u's own hard link":
            assert outcome["status"] == "changed", (case, outcome)
            continue
        assert outcome["status"] == "failed", (case, outcome)
        assert "hard link" in outcome["msg"] or "symlink owned by" in outcome["msg"], (case, outcome)
    assert result["secret"] == [0, "0o600", "root secret\n", 1000.0]
    assert result["copies"] == []
