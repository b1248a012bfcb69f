"""ensure_absent judges a path by what it is on the host, and removes only what it judged.

Real: the module and its probes on the local connection, the kernel's path resolution,
symlinks, tmpfs mounts. Everything that could be removed for real lives in a private
mount namespace (decoyns.py) where /srv, /opt, /media, /mnt and /home are decoy tmpfs
that the test filled; system directories the namespace cannot replace (/usr, /etc,
/root...) are only ever planned, and planning cannot remove anything.
"""

from __future__ import annotations

import pytest
from decoyns import run_in_decoy_namespace

DECOY_SPELLINGS = [
    "/srv",
    "//srv",
    "///srv//",
    "/srv/",
    "/./srv/./",
    "/srv/.",
    "/opt/../srv",
    "/srv/work/..",
    "/srv/work/link-to-opt/..",
    "/media/rootlink/srv",
    "/media/rootlink/srv/",
    "/media/rootlink/./opt//",
    "/media/srvlink/.",
    "/mnt/../mnt",
    "/home",
    "/srv/homes/ops",
    "//srv/homes/ops/",
    "/srv/homes",
    "/srv/data/mnt",
    "/srv/data/mnt/",
    "/srv/data",
]


def test_protected_decoys_are_refused_in_every_spelling_and_survive():
    """Fails on the string check (`//srv` emptied /srv; `x/link/..` emptied the link
    target's parent): the refusal must come from the object's device and inode."""
    result = run_in_decoy_namespace(
        f"""
        spellings = {DECOY_SPELLINGS!r}
        for top in ("/srv", "/opt", "/media", "/mnt", "/home"):
            write(top + "/keep/file")
        write("/srv/work/models/x")
        os.makedirs("/opt/victim/sub")
        os.symlink("/opt/victim/sub", "/srv/work/link-to-opt")
        os.symlink("/", "/media/rootlink")
        os.symlink("/srv", "/media/srvlink")
        write("/srv/homes/ops/.bashrc")
        add_decoy_user("rigger-decoy-ops", 4242, "/srv/homes/ops")
        write("/srv/data/keep")
        os.makedirs("/srv/data/mnt")
        subprocess.run(["mount", "-t", "tmpfs", "rigger-decoy-inner", "/srv/data/mnt"], check=True)
        write("/srv/data/mnt/inner")
        before = {{top: tree(top) for top in DECOY_DIRS}}
        outcomes = {{p: converge("ensure_absent", {{"path": p}}) for p in spellings}}
        after = {{top: tree(top) for top in DECOY_DIRS}}
        result = {{"outcomes": outcomes, "lost": {{t: sorted(set(before[t]) - set(after[t])) for t in before}}}}
        """
    )
    assert result["lost"] == {top: [] for top in ("/srv", "/opt", "/media", "/mnt", "/home")}
    for spelling, outcome in result["outcomes"].items():
        assert outcome["status"] == "failed" and "refusing" in outcome["msg"], (spelling, outcome)
    assert "mount point /srv/data/mnt" in result["outcomes"]["/srv/data"]["msg"]
    assert "rigger-decoy-ops" in result["outcomes"]["/srv/homes"]["msg"]


SYSTEM_DIRECTORIES = [
    "/",
    "//",
    "//usr",
    "/usr/",
    "/usr//./",
    "//etc//",
    "/var/../usr",
    "/usr/bin/..",
    "/usr/lib/../..",
    "/bin",
    "/bin/",
    "/lib64//",
    "/usr/local",
    "/var/lib/",
    "/root",
    "//root/",
    "/proc",
    "/dev/shm/..",
    "/tmp/",
]


@pytest.fixture(scope="module")
def system_directory_plans() -> dict[str, dict[str, str]]:
    """Each path planned in one decoy namespace: plans are read-only and independent, so
    one python in one namespace answers for all of them."""
    plans: dict[str, dict[str, str]] = run_in_decoy_namespace(
        f"result = {{path: plan('ensure_absent', {{'path': path}}) for path in {SYSTEM_DIRECTORIES!r}}}"
    )
    return plans


@pytest.mark.parametrize("path", SYSTEM_DIRECTORIES)
def test_system_directories_are_refused_in_check_mode(path, system_directory_plans):
    """Fails on the string check: `//usr` planned "would remove dir //usr". Plan only:
    these cannot be decoys, and a plan cannot remove anything."""
    outcome = system_directory_plans[path]
    assert outcome["status"] == "failed" and "refusing" in outcome["msg"], outcome


def test_a_symlink_is_removed_as_a_link_whatever_slashes_follow():
    """Fails today: `link/` (a trailing slash) removed the target's files."""
    result = run_in_decoy_namespace(
        """
        write("/opt/victim/file")
        os.makedirs("/srv/work")
        outcomes = {}
        for spelling in ("link/", "link//", "link"):
            os.symlink("/opt/victim", "/srv/work/link")
            os.symlink("/opt", "/srv/work/opt-link")
            outcomes[spelling] = converge("ensure_absent", {"path": "/srv/work/" + spelling})
            outcomes["opt-link " + spelling] = converge("ensure_absent", {"path": "/srv/work/opt-" + spelling})
            outcomes["left " + spelling] = sorted(os.listdir("/srv/work"))
        result = {"outcomes": outcomes, "victim": tree("/opt")}
        """
    )
    assert result["victim"] == ["/opt/victim", "/opt/victim/file"]
    for spelling in ("link/", "link//", "link"):
        outcome = result["outcomes"][spelling]
        assert outcome["status"] == "changed" and "symlink /srv/work/link " in outcome["plan"], outcome
        assert result["outcomes"]["left " + spelling] == []


def test_check_mode_names_the_real_path_and_the_run_removes_exactly_it():
    """Fails today: the plan repeated the spelling (`//srv/...`, `x/link/../y`)."""
    result = run_in_decoy_namespace(
        """
        write("/srv/work/models/a/shard", "0" * 1000)
        write("/srv/work/other/keep")
        os.symlink("/srv/work", "/media/worklink")
        os.makedirs("/media/deep/er")
        os.symlink("/srv/work/other", "/media/deep/er/otherlink")
        spelled = "//media/deep/er/otherlink/../models//"
        planned = plan("ensure_absent", {"path": spelled})
        planned_via_link = plan("ensure_absent", {"path": "/media/worklink/./models"})
        done = converge("ensure_absent", {"path": spelled})
        again = plan("ensure_absent", {"path": spelled})
        result = {"planned": planned, "via_link": planned_via_link, "done": done, "again": again,
                  "left": tree("/srv")}
        """
    )
    assert result["planned"]["msg"].startswith("remove dir /srv/work/models (")
    assert result["via_link"]["msg"] == result["planned"]["msg"]
    assert result["done"]["status"] == "changed" and "/srv/work/models" in result["done"]["msg"]
    assert result["again"]["status"] == "unchanged"
    assert result["left"] == ["/srv/work", "/srv/work/other", "/srv/work/other/keep"]


def test_what_was_judged_is_what_is_removed():
    """Fails today: a directory swapped in between plan and apply was removed unjudged.
    A symlink swapped in for a directory inside the tree is removed as a link."""
    result = run_in_decoy_namespace(
        """
        write("/srv/work/models/x")
        write("/srv/work/fresh/precious")
        write("/opt/victim/file")

        def swap():
            os.rename("/srv/work/models", "/srv/work/old")
            os.rename("/srv/work/fresh", "/srv/work/models")

        swapped = converge("ensure_absent", {"path": "/srv/work/models"}, between=swap)
        write("/srv/tree/sub/file")

        def plant_link():
            os.rename("/srv/tree/sub", "/srv/tree/sub.old")
            os.symlink("/opt/victim", "/srv/tree/sub")

        planted = converge("ensure_absent", {"path": "/srv/tree"}, between=plant_link)
        result = {"swapped": swapped, "planted": planted, "srv": tree("/srv"), "opt": tree("/opt")}
        """
    )
    assert result["swapped"]["status"] == "failed" and "not the object that was planned" in result["swapped"]["msg"]
    assert "/srv/work/models/precious" in result["srv"]
    assert result["planted"]["status"] == "changed"
    assert result["opt"] == ["/opt/victim", "/opt/victim/file"]
    assert not any(p.startswith("/srv/tree") for p in result["srv"])


def test_a_mount_appearing_inside_the_tree_stops_the_removal():
    """The walk never crosses into another filesystem, even one mounted after the plan."""
    result = run_in_decoy_namespace(
        """
        write("/srv/tree/a")
        os.makedirs("/srv/tree/sub")

        def mount_inside():
            subprocess.run(["mount", "-t", "tmpfs", "rigger-decoy-late", "/srv/tree/sub"], check=True)
            write("/srv/tree/sub/inner")

        outcome = converge("ensure_absent", {"path": "/srv/tree"}, between=mount_inside)
        result = {"outcome": outcome, "srv": tree("/srv")}
        """
    )
    assert result["outcome"]["status"] == "failed", result
    assert "/srv/tree/sub/inner" in result["srv"]


def test_a_tree_too_deep_to_remove_safely_is_refused_before_anything_is_removed():
    result = run_in_decoy_namespace(
        """
        deep = "/srv/deep"
        os.makedirs(deep)
        fd = os.open(deep, os.O_RDONLY)
        for _ in range(450):  # openat keeps each path short
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(fd)
        outcome = converge("ensure_absent", {"path": deep})
        result = {"outcome": outcome, "still_there": os.path.isdir(deep + "/d/d/d")}
        """
    )
    assert result["outcome"]["status"] == "failed" and "nested more than 400" in result["outcome"]["msg"]
    assert result["still_there"]


def test_an_unreadable_parent_fails_the_task_clearly():
    """As `nobody`, a path under a 0700 directory cannot be judged: a task failure, not a crash."""
    result = run_in_decoy_namespace(
        """
        write("/srv/private/inner/file")
        os.chmod("/srv/private", 0o700)
        os.setgid(65534)
        os.setuid(65534)
        result = plan("ensure_absent", {"path": "/srv/private/inner"})
        """
    )
    assert result["status"] == "failed" and "cannot judge /srv/private/inner" in result["msg"], result


def test_a_path_through_a_proc_magic_link_is_refused():
    """/proc/PID/root/srv/x is another namespace's /srv/x to the kernel but /srv/x to a
    string resolver: the judge refuses rather than remove the wrong one."""
    result = run_in_decoy_namespace(
        """
        write("/srv/victim/file")
        keeper = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                   "mount -t tmpfs other /srv && mkdir /srv/victim && echo ready && exec sleep 60"],
                                  stdout=subprocess.PIPE, text=True)
        assert keeper.stdout.readline().strip() == "ready"
        outcome = converge("ensure_absent", {"path": f"/proc/{keeper.pid}/root/srv/victim"})
        keeper.kill()
        result = {"outcome": outcome, "srv": tree("/srv")}
        """
    )
    assert result["outcome"]["status"] == "failed" and "magic link" in result["outcome"]["msg"], result
    assert result["srv"] == ["/srv/victim", "/srv/victim/file"]


def test_a_delete_through_another_users_link_is_refused_and_roots_file_survives():
    """Fails on the realpath judgement: as root, `~u/.cache/backup` where u made `~u/.cache`
    a link to a root-only directory (or to a root process's /proc/PID/cwd) removed the root
    file behind it. Real: the decoy user is a passwd line in the namespace; the links, the
    root-only directory and the root process are real."""
    result = run_in_decoy_namespace(
        """
        add_decoy_user("rigger-decoy-u", 4243, "/home/u")
        write("/srv/rootonly/backup", "root secret")
        os.chmod("/srv/rootonly", 0o700)
        os.makedirs("/home/u")
        os.chown("/home/u", 4243, 4243)
        keeper = subprocess.Popen(["sleep", "60"], cwd="/srv/rootonly")
        for name, target in ((".cache", "/srv/rootonly"), (".work", f"/proc/{keeper.pid}/cwd")):
            os.symlink(target, "/home/u/" + name)
            os.lchown("/home/u/" + name, 4243, 4243)
        os.symlink("/srv", "/media/rootlink")  # root's own link: still followed
        write("/srv/mine/old")
        outcomes = {
            "ensure_absent": converge("ensure_absent", {"path": "/home/u/.cache/backup"}),
            "file": converge("file", {"path": "/home/u/.cache/backup", "state": "absent"}),
            "dotdot": converge("ensure_absent", {"path": "/home/u/.cache/../rootonly/backup"}),
            "cwd": converge("ensure_absent", {"path": "/home/u/.work/backup"}),
            "proc": converge("ensure_absent", {"path": f"/proc/{keeper.pid}/cwd/backup"}),
            "root's link": converge("ensure_absent", {"path": "/media/rootlink/mine/old"}),
        }
        keeper.kill()
        result = {"outcomes": outcomes, "srv": tree("/srv")}
        """
    )
    assert "/srv/rootonly/backup" in result["srv"], result
    outcomes = result["outcomes"]
    for case in ("ensure_absent", "file", "dotdot", "cwd"):
        assert outcomes[case]["status"] == "failed", (case, outcomes[case])
        assert "owned by uid 4243" in outcomes[case]["msg"], (case, outcomes[case])
    assert outcomes["proc"]["status"] == "failed" and "magic link" in outcomes["proc"]["msg"]
    assert outcomes["root's link"]["status"] == "changed" and "/srv/mine/old" not in result["srv"]


def test_system_files_and_top_level_entries_are_refused_whatever_their_type():
    """Fails today: only directories and mount points were protected, so a file directly
    in /etc (the namespace's /etc is an overlay: nothing reaches the host) or a file at the
    top level was removed. A file in a directory below /etc still goes."""
    result = run_in_decoy_namespace(
        """
        write("/etc/rigger-decoy.conf")
        write("/etc/rigger-decoy.d/drop-in.conf")
        outcomes = {
            "etc file": converge("ensure_absent", {"path": "/etc/rigger-decoy.conf"}),
            "file module": converge("file", {"path": "/etc/rigger-decoy.conf", "state": "absent"}),
            "drop-in": converge("ensure_absent", {"path": "/etc/rigger-decoy.d/drop-in.conf"}),
            "top file": plan("ensure_absent", {"path": "/.dockerenv"}) if os.path.lexists("/.dockerenv")
            else {"status": "failed", "msg": "refusing (no top-level file here)"},
            "top link": plan("ensure_absent", {"path": "/bin"}) if os.path.islink("/bin")
            else {"status": "failed", "msg": "refusing (no top-level link here)"},
        }
        result = {"outcomes": outcomes, "conf": os.path.exists("/etc/rigger-decoy.conf"),
                  "drop_in": os.path.exists("/etc/rigger-decoy.d/drop-in.conf")}
        """
    )
    outcomes = result["outcomes"]
    for case in ("etc file", "file module", "top file", "top link"):
        assert outcomes[case]["status"] == "failed" and "refusing" in outcomes[case]["msg"], (case, outcomes[case])
    assert "system directory /etc" in outcomes["etc file"]["msg"]
    assert result["conf"] and not result["drop_in"]
    assert outcomes["drop-in"]["status"] == "changed"
