"""The rollout's endpoints file: a host leaves it and comes back, a missing file starts
from the whole fleet, and a file rigger did not write is refused and left as it was.

Real: the local connection and its guarded write (the probes run in a host process), real
files under the test's temp dir. Nothing is faked; no load balancer is involved here (the
rollout tests drive the file beside a real HAProxy).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import TaskFailed
from modules.routing.endpoints_file import KIND, Endpoint, EndpointsFile, url_for

FLEET = {n: Endpoint(n, f"http://10.0.0.{i}:8000", "kimi") for i, n in enumerate(("h1", "h2", "h3"), start=1)}


def endpoints(path: Path) -> list[str]:
    doc = json.loads(path.read_text())
    assert doc["kind"] == KIND and doc["backend"] == "vllm"
    return [e["name"] for e in doc["endpoints"]]


@pytest.fixture
def conn() -> ScopedConnection:
    return ScopedConnection(LocalConnection())


def test_a_host_leaves_and_comes_back_a_missing_file_starts_from_the_fleet(
    conn: ScopedConnection, tmp_path: Path
) -> None:
    path = tmp_path / "endpoints.json"
    file = EndpointsFile(str(path), "vllm", FLEET)
    out = file.without(conn, "h1")
    assert endpoints(path) == ["h2", "h3"] and out["in_file"] == ["h2", "h3"] and out["left"] == "h1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    file.without(conn, "h2")
    assert endpoints(path) == ["h3"]
    file.with_(conn, "h2")
    file.with_(conn, "h1")
    assert endpoints(path) == ["h1", "h2", "h3"]
    doc = json.loads(path.read_text())
    assert doc["endpoints"][0] == {"name": "h1", "url": "http://10.0.0.1:8000", "model": "kimi"}


def test_a_host_already_listed_is_listed_once(conn: ScopedConnection, tmp_path: Path) -> None:
    path = tmp_path / "endpoints.json"
    file = EndpointsFile(str(path), "vllm", FLEET)
    file.with_(conn, "h1")
    file.with_(conn, "h1")
    assert endpoints(path) == ["h1", "h2", "h3"]


@pytest.mark.parametrize(
    "content, why",
    [
        ("model_list:\n  - model_name: kimi\n", "not JSON"),
        ('{"endpoints": []}', f"not a {KIND} document"),
        ('[{"name": "h1"}]', f"not a {KIND} document"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_a_file_rigger_did_not_write_is_refused_and_kept(
    conn: ScopedConnection, tmp_path: Path, content: str | bytes, why: str
) -> None:
    path = tmp_path / "endpoints.json"
    data = content if isinstance(content, bytes) else content.encode()
    path.write_bytes(data)
    before = os.stat(path)
    with pytest.raises(TaskFailed) as failed:
        EndpointsFile(str(path), "vllm", FLEET).without(conn, "h1")
    assert why in failed.value.msg and str(path) in failed.value.msg
    assert path.read_bytes() == data and os.stat(path).st_ino == before.st_ino


def test_the_write_does_not_follow_a_planted_link(conn: ScopedConnection, tmp_path: Path) -> None:
    """A link at the path (to a file rigger must not rewrite) is replaced by the new file
    (the guarded write renames over it), never written through."""
    victim = tmp_path / "victim"
    victim.write_text(json.dumps({"kind": KIND, "backend": "vllm", "endpoints": []}))
    link = tmp_path / "endpoints.json"
    link.symlink_to(victim)
    EndpointsFile(str(link), "vllm", FLEET).without(conn, "h1")
    assert json.loads(victim.read_text())["endpoints"] == []
    assert not link.is_symlink() and "h1" not in endpoints(link)


def test_the_url_is_the_inventory_address() -> None:
    assert url_for({"ansible_host": "10.1.2.3"}, "gpu7", 8000) == "http://10.1.2.3:8000"
    assert url_for({}, "gpu7", 8000) == "http://gpu7:8000"
    assert url_for({"ansible_host": "fd00::7"}, "gpu7", 8000) == "http://[fd00::7]:8000"
