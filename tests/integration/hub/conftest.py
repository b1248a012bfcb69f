"""One olah mirror (real hub server on loopback) per test module, over a tiny repo."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from olah_mirror import OlahMirror, build_repo


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OlahMirror]:
    server = OlahMirror(tmp_path_factory.mktemp("olah"))
    try:
        server.commit = build_repo(server.mirror_root)
        server.start()
    except RuntimeError as exc:  # a missing prerequisite is a failure, not a skip
        pytest.fail(f"hub mirror unavailable: {exc}")
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def hub_env(mirror: OlahMirror, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_ENDPOINT", mirror.endpoint)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "5")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return mirror.workdir
