"""apt_key, apt_repository and apt against a signed local APT repository, as the CUDA one is served.

Real: two .deb packages built here with dpkg-deb (`rgt-repo-hello`, which depends on
`rgt-repo-lib`), a flat repository like NVIDIA's (`deb [signed-by=...] URL /`) whose
Packages and Release files this helper writes by hand (the same fields apt-ftparchive
writes; neither it nor dpkg-scanpackages is on a fresh Debian), its Release signed into
InRelease by gpg with a throwaway ed25519 key, served by Python's http.server on a free
loopback port; the key fetched by apt_key from that server into a keyring under
/etc/apt/keyrings; real `apt-get update` checking the signature with gpgv; real apt-get
and dpkg installing and autoremoving the packages. Nothing is mocked.

This machine's apt state is not touched: everything that runs apt runs as root in a
private mount namespace (`unshare --mount --propagation private`) where /etc, /var, /usr
and /opt are overlays whose writes land in a tmpfs that goes with the namespace. The
namespace's copy of the machine's sources is emptied there so that `apt-get update`
reads only the local repository. Before anything runs, the inner code checks that it is
not in the machine's mount namespace and that each of those four is the overlay it
mounted; otherwise it stops without touching anything.
"""

from __future__ import annotations

import email.utils
import functools
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
OVERLAID = ("/etc", "/var", "/usr", "/opt")
RESULT = "\x1eapt-repo-result "
KEYRING = "/etc/apt/keyrings/rigger-test-repo.gpg"
WRONG_KEYRING = "/etc/apt/keyrings/rigger-test-wrong.gpg"
SOURCES_FILE = "/etc/apt/sources.list.d/rigger-test-repo.list"
HELLO, LIB = "rgt-repo-hello", "rgt-repo-lib"
INSTALLED_FILE = "/opt/rigger-apt-test/hello"


def gpg(home: Path, *words: str) -> bytes:
    done = subprocess.run(["gpg", "--homedir", str(home), "--batch", *words], capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def build_deb(out: Path, name: str, version: str, depends: str = "") -> Path:
    """A real .deb that installs one file under /opt/rigger-apt-test."""
    root = out / "build" / name
    (root / "DEBIAN").mkdir(parents=True)
    (root / "opt" / "rigger-apt-test").mkdir(parents=True)
    (root / "opt" / "rigger-apt-test" / name.removeprefix("rgt-repo-")).write_text(f"{name} {version}\n")
    control = f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
    control += f"Depends: {depends}\n" if depends else ""
    control += "Maintainer: rigger tests <t@example.invalid>\nDescription: made by a rigger test\n"
    (root / "DEBIAN" / "control").write_text(control)
    deb = out / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True, capture_output=True)
    return deb


def packages_stanza(deb: Path) -> str:
    """The deb's control fields, then where it is and its digests (what apt-ftparchive adds)."""
    control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout
    data = deb.read_bytes()
    return (
        control.rstrip("\n")
        + f"\nFilename: ./{deb.name}\nSize: {len(data)}\nMD5sum: {hashlib.md5(data).hexdigest()}"
        + f"\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
    )


def signed_repository(root: Path, home: Path, signer: str) -> None:
    """Packages, Release and InRelease (the Release clear-signed by ``signer``) of a flat repository."""
    debs = [build_deb(root, LIB, "1.0"), build_deb(root, HELLO, "1.0", depends=LIB)]
    packages = "\n".join(packages_stanza(deb) for deb in debs).encode()
    (root / "Packages").write_bytes(packages)
    release = (
        "Origin: rigger-test\nLabel: rigger-test\n"
        f"Date: {email.utils.formatdate(usegmt=True)}\n"
        f"SHA256:\n {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n"
    )
    (root / "Release").write_text(release)
    gpg(home, "--local-user", signer, "--clearsign", "--output", str(root / "InRelease"), str(root / "Release"))


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The signed repository on http://127.0.0.1:PORT/ and both keys (the signer's and another)."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    fingerprints = {}
    for name in ("signer", "wrong"):
        gpg(home, "--passphrase", "", "--quick-gen-key", f"{name} <{name}@example.org>", "ed25519", "sign", "never")
        listing = gpg(home, "--with-colons", "--list-keys", f"{name}@example.org").decode()
        fingerprints[name] = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    root = tmp_path_factory.mktemp("repo")
    root.chmod(0o755)
    for name, fingerprint in fingerprints.items():
        (root / f"{name}.asc").write_bytes(gpg(home, "--armor", "--export", fingerprint))
    signed_repository(root, home, fingerprints["signer"])
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)  # the agent gpg started
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_address[1]}/", "signer": fingerprints["signer"]}
    finally:
        server.shutdown()
        server.server_close()


def test_a_signed_repository_is_added_its_package_installed_and_autoremoved_and_a_wrong_key_put_back(
    served: dict[str, str], tmp_path: Path
) -> None:
    seen = in_private_apt(served, tmp_path)
    url, signer = served["url"], served["signer"]

    # check mode: the key and the repository are planned, nothing is written
    assert seen["check"]["apt_key"].startswith("add key") and seen["check"]["apt_repository"].startswith("add deb")
    assert seen["check"]["written"] == {"keyring": False, "sources": []}

    # the key from the server into the keyring; its fingerprint is the signer's
    assert seen["key"]["fp"] == signer and seen["key"]["keyring_fps"] == [signer]

    # a keyring holding another key: apt-get update fails, the task says why, the file is as it was
    wrong = seen["wrong_key"]
    assert wrong["status"] == "failed" and "Failed to update apt cache" in wrong["msg"], wrong
    assert "NO_PUBKEY" in wrong["msg"] or "not signed" in wrong["msg"], wrong["msg"]
    assert wrong["sources_after"] == "# kept as it was\n"
    assert wrong["new_file"]["status"] == "failed" and wrong["new_file"]["left"] == [], "a file it made is not left"
    assert not wrong["lists_from_repo"], "apt kept an index of the repository it could not verify"

    # the right keyring: the line is written, apt-get update reads the repository, a rerun changes nothing
    added = seen["added"]
    assert added["status"] == "changed" and added["sources"] == (
        f"# kept as it was\ndeb [signed-by={KEYRING}] {url} /\n"
    )
    assert added["lists_from_repo"] and added["again"] == "unchanged"

    # the package from it, with its dependency, as apt's simulation planned it
    installed = seen["installed"]
    assert sorted((installed["plan_diff_after"] or "").splitlines()) == [f"{HELLO} 1.0", f"{LIB} 1.0"], installed
    assert installed["after_plan"] == {HELLO: None, LIB: None}, "planning installed something"
    assert installed["versions"] == {HELLO: "1.0", LIB: "1.0"} and installed["file"] == f"{HELLO} 1.0\n"

    # a named removal with autoremove (and purge) takes the dependency along in the same apt-get
    both = seen["absent_autoremove"]
    assert both["msg"] == f"purge {HELLO} with --auto-remove" and both["versions"] == {HELLO: None, LIB: None}, both

    # autoremove alone: what nothing needs any more goes, listed first in check mode, then nothing to do
    gone = seen["autoremove"]
    assert gone["check_diff_before"] == f"{LIB} 1.0\n" and gone["check_left"] == {HELLO: None, LIB: "1.0"}
    assert gone["status"] == "changed" and gone["versions"] == {HELLO: None, LIB: None}
    assert gone["again"] == "unchanged"


def in_private_apt(served: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    """Run ``inside`` as root in a private mount namespace; return what it saw."""
    if os.geteuid() != 0:
        pytest.fail("this test needs root: it runs apt in a private mount namespace")
    layers = tmp_path / "layers"
    layers.mkdir()
    script = (
        "import json, sys\n"
        f"sys.path[:0] = [{str(REPO)!r}, {str(HERE)!r}]\n"
        "from test_apt_local_repo import inside\n"
        f"print({RESULT!r} + json.dumps(inside({json.dumps(served)!r}, {str(layers)!r})))\n"
    )
    env = {**os.environ, "RIGGER_HOST_MNT_NS": os.readlink("/proc/self/ns/mnt")}
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    for line in reversed(proc.stdout.split("\n")):  # not splitlines(): RESULT's \x1e ends a line there
        if line.startswith(RESULT):
            result: dict[str, Any] = json.loads(line[len(RESULT) :])
            return result
    pytest.fail(f"the private apt run failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


# --- what runs inside the namespace -------------------------------------------------


def _private_overlays(layers: str) -> None:
    """/etc, /var, /usr and /opt as overlays over a tmpfs; refuse to go on unless they are."""
    if os.readlink("/proc/self/ns/mnt") == os.environ["RIGGER_HOST_MNT_NS"]:
        sys.exit("still in the machine's mount namespace: refusing to run")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "rigger-apt-layers", layers], check=True)
    for top in OVERLAID:
        layer = f"{layers}/{top.strip('/')}"
        os.makedirs(f"{layer}/upper")
        os.makedirs(f"{layer}/work")
        # xino=on: without it a file from the upper tmpfs reports the tmpfs's st_dev, not the
        # overlay's, and rigger's path walk rightly refuses it as another filesystem
        options = f"lowerdir={top},upperdir={layer}/upper,workdir={layer}/work,xino=on"
        subprocess.run(["mount", "-t", "overlay", "-o", options, "rigger-apt-overlay", top], check=True)
    with open("/proc/self/mountinfo") as mounts:
        overlaid = {fields[4] for fields in (line.split() for line in mounts) if "rigger-apt-overlay" in fields}
    if not set(OVERLAID) <= overlaid:
        sys.exit(f"overlays missing on {set(OVERLAID) - overlaid}: refusing to run")


def _only_the_local_repository() -> None:
    """The namespace's copy of the machine's sources and lists emptied (the overlay's, not the machine's)."""
    for folder in ("/etc/apt/sources.list.d", "/var/lib/apt/lists"):
        for name in os.listdir(folder):
            if os.path.isfile(f"{folder}/{name}"):
                os.remove(f"{folder}/{name}")
    if os.path.exists("/etc/apt/sources.list"):
        os.remove("/etc/apt/sources.list")
    os.makedirs("/etc/apt/keyrings", exist_ok=True)


def _ctx(planning: bool) -> Any:
    from engine.connection.base import ScopedConnection
    from engine.connection.local import LocalConnection
    from engine.module_api import TaskContext

    conn = ScopedConnection(LocalConnection())
    return TaskContext("localhost", conn.planning() if planning else conn, {}, {})


def _plan(module: str, args: dict[str, Any]) -> dict[str, Any]:
    """What check mode says: the change's summary and its first diff, or why not."""
    from engine import registry
    from engine.errors import TaskFailed
    from engine.module_api import Change

    spec = registry.get(module)
    try:
        change = spec.plan(_ctx(True), spec.with_defaults(spec.coerced(args)))
    except TaskFailed as exc:
        return {"status": "failed", "msg": str(exc)}
    if not isinstance(change, Change):
        return {"status": "unchanged", "msg": change.msg}
    diff = change.diffs[0] if change.diffs else None
    return {"status": "change", "msg": change.summary, "before": diff and diff.before, "after": diff and diff.after}


def _converge(module: str, args: dict[str, Any]) -> dict[str, Any]:
    from engine import registry
    from engine.errors import TaskFailed
    from engine.module_api import Change

    spec = registry.get(module)
    full = spec.with_defaults(spec.coerced(args))
    try:
        change = spec.plan(_ctx(True), full)
        if not isinstance(change, Change):
            return {"status": "unchanged", "msg": change.msg, "data": dict(change.data or {})}
        result = spec.apply(_ctx(False), full, change)
    except TaskFailed as exc:
        return {"status": "failed", "msg": str(exc)}
    return {"status": "changed" if result.changed else "ok", "msg": result.msg, "data": dict(result.data or {})}


def _lists_from_repo() -> bool:
    return any(name.startswith("127.0.0.1") for name in os.listdir("/var/lib/apt/lists"))


def _read(path: str) -> str | None:
    return Path(path).read_text() if os.path.exists(path) else None


def _versions() -> dict[str, str | None]:
    from engine.connection.base import ScopedConnection
    from engine.connection.local import LocalConnection
    from engine.module_api import TaskContext
    from modules.system.apt import installed

    return installed(TaskContext("localhost", ScopedConnection(LocalConnection()), {}, {}), [HELLO, LIB])


def inside(served_json: str, layers: str) -> dict[str, Any]:
    """The steps, in the private namespace: what each one left, for the test to judge."""
    _private_overlays(layers)
    _only_the_local_repository()
    served = json.loads(served_json)
    url, seen = served["url"], {}
    repo = f"deb [signed-by={KEYRING}] {url} /"
    key_args = {"url": f"{url}signer.asc", "id": served["signer"], "keyring": KEYRING}
    repo_args = {"repo": repo, "filename": "rigger-test-repo"}

    seen["check"] = {
        "apt_key": _plan("apt_key", key_args)["msg"],
        "apt_repository": _plan("apt_repository", repo_args)["msg"],
        "written": {"keyring": os.path.exists(KEYRING), "sources": os.listdir("/etc/apt/sources.list.d")},
    }
    key = _converge("apt_key", key_args)
    from modules.system import openpgp

    seen["key"] = {**key["data"], "keyring_fps": [k.fingerprint for k in openpgp.keys(Path(KEYRING).read_bytes())]}

    _converge("apt_key", {"url": f"{url}wrong.asc", "keyring": WRONG_KEYRING})
    wrong_args = {**repo_args, "repo": repo.replace(KEYRING, WRONG_KEYRING)}
    new_file = {**_converge("apt_repository", wrong_args), "left": os.listdir("/etc/apt/sources.list.d")}
    Path(SOURCES_FILE).write_text("# kept as it was\n")
    wrong = _converge("apt_repository", wrong_args)
    seen["wrong_key"] = {
        **wrong,
        "new_file": new_file,
        "sources_after": _read(SOURCES_FILE),
        "lists_from_repo": _lists_from_repo(),
    }

    added = _converge("apt_repository", repo_args)
    again = _converge("apt_repository", repo_args)["status"]
    seen["added"] = {**added, "sources": _read(SOURCES_FILE), "lists_from_repo": _lists_from_repo(), "again": again}

    planned = _plan("apt", {"name": HELLO})
    after_plan = _versions()
    installed = _converge("apt", {"name": HELLO})
    seen["installed"] = {
        **installed,
        "plan_diff_after": planned.get("after"),
        "after_plan": after_plan,
        "versions": _versions(),
        "file": _read(INSTALLED_FILE),
    }

    # a named removal with autoremove (and purge): the dependency goes in the same apt-get (nvidia-docker's way)
    absent = {"name": HELLO, "state": "absent", "autoremove": True, "purge": True}
    seen["absent_autoremove"] = {**_converge("apt", absent), "versions": _versions()}

    # autoremove alone: the dependency installed again, then marked as installed automatically
    _converge("apt", {"name": LIB})
    subprocess.run(["apt-mark", "auto", LIB], check=True, capture_output=True)
    check = _plan("apt", {"autoremove": True})
    seen["autoremove"] = {"check_diff_before": check.get("before"), "check_left": _versions()}
    if check.get("before") != f"{LIB} 1.0\n":  # never remove anything else, even in the namespace
        return seen
    removed = _converge("apt", {"autoremove": True})
    again = _converge("apt", {"autoremove": True})["status"]
    seen["autoremove"].update({**removed, "versions": _versions(), "again": again})
    return seen
