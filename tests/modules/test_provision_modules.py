"""The provisioning modules (ping, sysctl, ...) through the module contract on this machine.

Real: the local connection, the probes running in a Python process of their own, the file
primitive writing, the sysctl(8) of this host reading the running kernel. Not real: the
files live in tmp_path, never /etc (sysctl_file points there), and no kernel value is
changed: a live value is only ever "set" to what it already is.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import json
import os
import pwd
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, Result, TaskContext, Unchanged
from engine.probes import ProbeError


def ctx(planning: bool) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext(host_name="localhost", conn=conn.planning() if planning else conn, facts={}, vars={})


def plan(name: str, args: dict[str, Any]) -> Any:
    spec = registry.get(name)
    return spec.plan(ctx(True), spec.with_defaults(spec.coerced(args)))


def converge(name: str, args: dict[str, Any]) -> tuple[Any, Result | None, Any]:
    """plan, apply when there is a change, plan again (which must then say nothing to do)."""
    spec = registry.get(name)
    full = spec.with_defaults(spec.coerced(args))
    change = spec.plan(ctx(True), full)
    result = spec.apply(ctx(False), full, change) if isinstance(change, Change) and spec.apply else None
    return change, result, spec.plan(ctx(True), full)


def test_ping_is_a_round_trip_through_the_hosts_python() -> None:
    outcome = plan("ping", {"data": "marker-7f3a"})
    assert isinstance(outcome, Unchanged) and outcome.data == {"ping": "marker-7f3a"}
    with pytest.raises(TaskFailed, match="crash"):
        plan("ping", {"data": "crash"})


def _sysctl(key: str) -> str:
    outcome = LocalConnection().run(["sysctl", "-n", key], read_only=True)
    return outcome.stdout.strip()


def test_sysctl_writes_the_file_as_ansible_and_is_idempotent(tmp_path: Path) -> None:
    conf = tmp_path / "90-gpu.conf"
    conf.write_text("# kept\nvm.overcommit_memory = 0\n")
    current = _sysctl("vm.swappiness")
    args = {"name": "vm.swappiness", "value": current, "sysctl_file": str(conf), "sysctl_set": True, "reload": False}
    change, result, again = converge("sysctl", args)
    assert isinstance(change, Change) and result is not None and result.changed
    assert conf.read_text() == f"# kept\nvm.overcommit_memory=0\nvm.swappiness={current}\n"
    assert isinstance(again, Unchanged)
    assert _sysctl("vm.swappiness") == current


def test_sysctl_absent_removes_the_line_only(tmp_path: Path) -> None:
    conf = tmp_path / "sysctl.conf"
    conf.write_text("vm.swappiness=10\n; note\nkernel.numa_balancing=0\n")
    converge("sysctl", {"name": "vm.swappiness", "state": "absent", "sysctl_file": str(conf), "reload": False})
    assert conf.read_text() == "; note\nkernel.numa_balancing=0\n"


def test_sysctl_reload_loads_the_changed_file(tmp_path: Path) -> None:
    """`sysctl -p FILE` runs for real: a file setting a value to what the kernel has loads fine."""
    conf = tmp_path / "sysctl.conf"
    current = _sysctl("vm.swappiness")
    change, result, _ = converge("sysctl", {"name": "vm.swappiness", "value": current, "sysctl_file": str(conf)})
    assert isinstance(change, Change) and result is not None and conf.read_text() == f"vm.swappiness={current}\n"


def test_sysctl_unknown_key_in_the_running_kernel_fails_before_any_write(tmp_path: Path) -> None:
    conf = tmp_path / "sysctl.conf"
    with pytest.raises(TaskFailed, match=r"no sysctl net\.rigger\.no_such_key"):
        converge(
            "sysctl", {"name": "net.rigger.no_such_key", "value": "1", "sysctl_file": str(conf), "sysctl_set": True}
        )
    assert not conf.exists()


def test_the_kernel_modules_probe_reads_boot_configuration_through_the_file_primitive(tmp_path: Path) -> None:
    """The probe for real on this host's Python: files and trusted links in the load directory
    are read, a subdirectory is not, a missing options directory answers no files."""
    load = tmp_path / "modules-load.d"
    load.mkdir()
    (load / "gpu.conf").write_text("nvidia-peermem\n")
    (tmp_path / "modules").write_text("nvidia-uvm\n")
    (load / "modules.conf").symlink_to(tmp_path / "modules")
    (load / "sub").mkdir()
    (load / "sub" / "x.conf").write_text("ignored\n")
    args = {"name": "rigger_no_such_module", "load_dir": str(load), "options_dir": str(tmp_path / "absent")}
    answer = LocalConnection().run_probe("kernel_modules", args)
    assert answer["loaded"] is False
    assert answer["load_files"] == {f"{load}/gpu.conf": "nvidia-peermem\n", f"{load}/modules.conf": "nvidia-uvm\n"}
    assert answer["options_files"] == {}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small model directory: files at two depths, a hidden file, a link, old and new."""
    (tmp_path / "m" / "shards").mkdir(parents=True)
    (tmp_path / "m" / "config.json").write_text('{"model_type": "llama"}\n')
    (tmp_path / "m" / ".cache").write_text("x")
    (tmp_path / "m" / "shards" / "a.safetensors").write_bytes(b"\0" * 2048)
    (tmp_path / "m" / "shards" / "b.safetensors").write_bytes(b"\0" * 10)
    (tmp_path / "m" / "latest").symlink_to(tmp_path / "m" / "shards")
    old = tmp_path / "m" / "shards" / "b.safetensors"
    os.utime(old, (1, 1))
    return tmp_path / "m"


def _found(args: dict[str, Any]) -> list[str]:
    outcome = plan("find", args)
    assert isinstance(outcome, Unchanged)
    return sorted(Path(entry["path"]).name for entry in outcome.data["files"])


def test_find_filters_as_ansible(tree: Path) -> None:
    top = str(tree)
    assert _found({"paths": top}) == ["config.json"]
    assert _found({"paths": top, "hidden": True}) == [".cache", "config.json"]
    assert _found({"paths": top, "recurse": True, "patterns": "*.safetensors"}) == ["a.safetensors", "b.safetensors"]
    assert _found({"paths": top, "recurse": True, "size": "1k"}) == ["a.safetensors"]
    assert _found({"paths": top, "recurse": True, "age": "1d", "patterns": "*.safetensors"}) == ["b.safetensors"]
    assert _found({"paths": top, "recurse": True, "contains": '.*"model_type"'}) == ["config.json"]
    assert _found({"paths": top, "file_type": "link"}) == ["latest"]
    assert _found({"paths": top, "file_type": "directory", "recurse": True}) == ["shards"]
    assert _found({"paths": top, "recurse": True, "depth": 1, "patterns": "*.safetensors"}) == []
    assert _found({"paths": top, "recurse": True, "use_regex": True, "patterns": r"[ab]\.", "excludes": "b"}) == [
        "a.safetensors"
    ]


def test_find_never_descends_a_link_and_reports_checksums(tree: Path) -> None:
    outcome = plan("find", {"paths": str(tree), "recurse": True, "file_type": "any", "get_checksum": True})
    paths = {entry["path"]: entry for entry in outcome.data["files"]}
    assert f"{tree}/latest/a.safetensors" not in paths  # the link is reported, not walked
    assert paths[f"{tree}/latest"]["islnk"] and paths[f"{tree}/shards"]["isdir"]
    digest = hashlib.sha1(b"\0" * 10).hexdigest()
    assert paths[f"{tree}/shards/b.safetensors"]["checksum"] == digest
    assert "checksum" not in paths[f"{tree}/shards"]


def test_find_skips_a_missing_path_with_a_warning(tree: Path) -> None:
    outcome = plan("find", {"paths": [str(tree / "gone"), str(tree)]})
    assert [Path(e["path"]).name for e in outcome.data["files"]] == ["config.json"]
    assert list(outcome.data["skipped_paths"]) == [str(tree / "gone")] and outcome.warnings


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Files for GET; POST answers JSON saying what it received (an API stand-in that is a real server)."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        seen = {"body": body, "type": self.headers.get("Content-Type"), "auth": self.headers.get("Authorization")}
        payload = json.dumps(seen).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Request-Id", "r-1")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real HTTP server (Python's http.server) on a port the kernel chose, serving a folder;
    one for the module's tests (each serves files of its own names), stopped once."""
    root = tmp_path_factory.mktemp("www")
    handler = functools.partial(_Handler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_get_url_downloads_verifies_and_is_idempotent(web: tuple[str, Path], tmp_path: Path) -> None:
    base, root = web
    (root / "keyring.deb").write_bytes(b"deb-bytes\n")
    digest = hashlib.sha256(b"deb-bytes\n").hexdigest()
    dest = tmp_path / "keyring.deb"
    args = {"url": f"{base}/keyring.deb", "dest": str(dest), "checksum": f"sha256:{digest}", "mode": "0600"}
    change, result, again = converge("get_url", args)
    assert isinstance(change, Change) and result is not None and result.changed
    assert dest.read_bytes() == b"deb-bytes\n" and oct(dest.stat().st_mode & 0o777) == "0o600"
    assert result.data["status_code"] == 200 and result.data["checksum_src"] == hashlib.sha1(b"deb-bytes\n").hexdigest()
    assert isinstance(again, Unchanged) and again.msg == "file already exists"


def test_get_url_refuses_a_body_whose_checksum_differs(web: tuple[str, Path], tmp_path: Path) -> None:
    base, root = web
    (root / "tampered.deb").write_bytes(b"not what was published\n")
    dest = tmp_path / "tampered.deb"
    args = {"url": f"{base}/tampered.deb", "dest": str(dest), "checksum": "sha256:" + "0" * 64}
    with pytest.raises(ProbeError, match="did not match"):
        converge("get_url", args)
    assert not dest.exists()


def test_get_url_without_checksum_asks_if_modified_and_keeps_the_file(web: tuple[str, Path], tmp_path: Path) -> None:
    base, root = web
    (root / "model.cfg").write_text("tp=8\n")
    dest = tmp_path / "model.cfg"
    dest.write_text("tp=8\n")  # newer than the served file: the server answers 304
    spec = registry.get("get_url")
    full = spec.with_defaults({"url": f"{base}/model.cfg", "dest": str(dest)})
    change = spec.plan(ctx(True), full)
    assert isinstance(change, Change)  # no checksum proves it: a download is planned
    result = spec.apply(ctx(False), full, change)
    assert not result.changed and result.data["status_code"] == 304


def test_get_url_fetches_a_checksums_file_and_writes_into_a_directory(web: tuple[str, Path], tmp_path: Path) -> None:
    base, root = web
    (root / "tool.tar").write_bytes(b"tar")
    (root / "SHA256SUMS").write_text(f"{hashlib.sha256(b'other').hexdigest()}  other.tar\n")
    (root / "SHA256SUMS").write_text(
        (root / "SHA256SUMS").read_text() + f"{hashlib.sha256(b'tar').hexdigest()}  tool.tar\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    args = {"url": f"{base}/tool.tar", "dest": str(out), "checksum": f"sha256:{base}/SHA256SUMS"}
    _, result, again = converge("get_url", args)
    assert result is not None and result.changed and (out / "tool.tar").read_bytes() == b"tar"
    assert isinstance(again, Unchanged)  # the checksums file proves the file: no download planned


def test_get_url_fails_on_a_missing_file(web: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = web
    with pytest.raises(TaskFailed, match="Request failed: HTTP Error 404"):
        converge("get_url", {"url": f"{base}/nope.deb", "dest": str(tmp_path / "nope.deb")})


def test_uri_posts_json_and_returns_ansibles_keys(web: tuple[str, Path]) -> None:
    base, _ = web
    args = {
        "url": f"{base}/v1/reload",
        "method": "POST",
        "body": {"model": "llama"},
        "body_format": "json",
        "status_code": 201,
        "url_username": "ops",
        "url_password": "s3cret-pw",
        "force_basic_auth": True,
    }
    change, result, _ = converge("uri", args)
    assert isinstance(change, Change) and "s3cret-pw" not in repr(change)
    assert result is not None and not result.changed  # a call changes the server, not the host
    seen = result.data["json"]
    assert json.loads(seen["body"]) == {"model": "llama"} and seen["type"] == "application/json"
    assert seen["auth"] == "Basic " + base64.b64encode(b"ops:s3cret-pw").decode()
    assert result.data["status"] == 201 and result.data["x_request_id"] == "r-1" and not result.data["redirected"]
    assert "s3cret-pw" not in repr(result)


def test_uri_fails_on_an_unexpected_status_with_the_content(web: tuple[str, Path]) -> None:
    base, _ = web
    with pytest.raises(TaskFailed, match=r"Status code was 404 and not \[200\]") as failed:
        converge("uri", {"url": f"{base}/missing"})
    assert failed.value.data["status"] == 404 and "content" in failed.value.data


def test_uri_writes_dest_and_skips_with_creates(web: tuple[str, Path], tmp_path: Path) -> None:
    base, root = web
    (root / "served.txt").write_text("hello\n")
    dest = tmp_path / "got.txt"
    _, result, _ = converge("uri", {"url": f"{base}/served.txt", "dest": str(dest), "return_content": True})
    assert result is not None and result.changed and dest.read_text() == "hello\n"
    assert result.data["content"] == "hello\n" and result.data["path"] == str(dest)
    again = plan("uri", {"url": f"{base}/served.txt", "creates": str(dest)})
    assert isinstance(again, Unchanged) and again.msg == f"skipped, since '{dest}' exists"


KEY_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIHNPMkJeUzgWGObZW174yR2U7cq6SBbgx06tc1bOYI3 ops@laptop"
KEY_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeButWellFormedBase64BlobForTestsOnly0001 ci@runner"


def test_authorized_key_writes_as_the_user_and_is_idempotent(tmp_path: Path) -> None:
    """A real account (nobody) and a real file: the directory 0700 and the file 0600, both the user's."""
    nobody = pwd.getpwnam("nobody")
    keys = tmp_path / "home" / ".ssh" / "authorized_keys"
    (tmp_path / "home").mkdir()
    args = {"user": "nobody", "key": f"{KEY_A}\n# a note\n{KEY_B}", "path": str(keys)}
    change, result, again = converge("authorized_key", args)
    assert isinstance(change, Change) and result is not None and isinstance(again, Unchanged)
    assert keys.read_text() == f"{KEY_A}\n{KEY_B}\n"
    for path, mode in ((keys, 0o600), (keys.parent, 0o700)):
        st = path.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (nobody.pw_uid, nobody.pw_gid, mode), path
    converge("authorized_key", {"user": "nobody", "key": KEY_B, "path": str(keys), "state": "absent"})
    assert keys.read_text() == f"{KEY_A}\n"


def test_authorized_key_fetches_keys_from_a_url(web: tuple[str, Path], tmp_path: Path) -> None:
    base, root = web
    (root / "ops.keys").write_text(f"{KEY_B}\n")
    keys = tmp_path / "authorized_keys"
    _, result, _ = converge("authorized_key", {"user": "nobody", "key": f"{base}/ops.keys", "path": str(keys)})
    assert result is not None and keys.read_text() == f"{KEY_B}\n"


def test_get_url_force_replaces_the_file_and_keeps_a_backup(web: tuple[str, Path], tmp_path: Path) -> None:
    base, root = web
    (root / "limits.conf").write_text("new\n")
    dest = tmp_path / "limits.conf"
    dest.write_text("old\n")
    _, result, _ = converge("get_url", {"url": f"{base}/limits.conf", "dest": str(dest), "force": True, "backup": True})
    assert result is not None and result.changed and dest.read_text() == "new\n"
    assert Path(result.data["backup_file"]).read_text() == "old\n"
    assert re.fullmatch(r"limits\.conf\.\d+\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d~", Path(result.data["backup_file"]).name)
