"""An endpoints file: the servers in routing as a JSON document, for a gateway or router
that watches a file instead of being told over an API (llm-d / LiteLLM-style discovery,
Envoy or Prometheus file-based service discovery, a script).

The rollout keeps it beside the load balancer: a host leaves the file before HAProxy drains
it (a file-watching router stops sending new work at the same time) and comes back after
HAProxy sees it UP again. The document, written whole and atomically through the
connection's guarded write (a reader never sees half of it)::

    {"kind": "rigger-endpoints", "backend": "vllm", "updated_at": 1764650000.0,
     "endpoints": [{"name": "h1", "url": "http://10.0.0.1:8000", "model": "kimi"}, ...]}

Entries are sorted by name; only rigger's own kind of file is rewritten: any other content
at the path fails the rollout before anything changes, naming the path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.module_api import ScopedConnection, TaskFailed

KIND = "rigger-endpoints"
MODE = 0o644


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str
    model: str

    def as_data(self) -> dict[str, str]:
        return {"name": self.name, "url": self.url, "model": self.model}


@dataclass(frozen=True)
class EndpointsFile:
    path: str
    backend: str
    fleet: Mapping[str, Endpoint]  # every host of the rollout: what a missing file starts from

    def current(self, conn: ScopedConnection) -> list[dict[str, Any]] | None:
        """The file's endpoints, or None when there is no file yet."""
        raw = conn.read_file(self.path)
        if raw is None:
            return None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TaskFailed(self._not_ours(f"not JSON ({exc})")) from None
        if not isinstance(doc, dict) or doc.get("kind") != KIND or not isinstance(doc.get("endpoints"), list):
            raise TaskFailed(self._not_ours(f"not a {KIND} document"))
        return [dict(e) for e in doc["endpoints"] if isinstance(e, dict)]

    def without(self, conn: ScopedConnection, name: str) -> dict[str, Any]:
        """The file with ``name`` out of it (a missing file: every other host of the fleet)."""
        found = self.current(conn)
        entries = [e for e in (found if found is not None else self._all()) if e.get("name") != name]
        return self._write(conn, entries, left=name)

    def with_(self, conn: ScopedConnection, name: str) -> dict[str, Any]:
        """The file with ``name`` back in it, at its current address."""
        found = self.current(conn)
        entries = [e for e in (found if found is not None else self._all()) if e.get("name") != name]
        return self._write(conn, [*entries, self.fleet[name].as_data()], joined=name)

    def _all(self) -> list[dict[str, Any]]:
        return [e.as_data() for e in self.fleet.values()]

    def _write(self, conn: ScopedConnection, entries: Sequence[Mapping[str, Any]], **what: str) -> dict[str, Any]:
        ordered = sorted(entries, key=lambda e: str(e.get("name")))
        doc = {"kind": KIND, "backend": self.backend, "updated_at": round(time.time(), 3), "endpoints": ordered}
        conn.write_file(self.path, (json.dumps(doc, indent=2) + "\n").encode("utf-8"), mode=MODE)
        return {"endpoints_file": self.path, **what, "in_file": [str(e.get("name")) for e in ordered]}

    def _not_ours(self, why: str) -> str:
        return (
            f"endpoints file {self.path}: {why}; rigger rewrites only the files it writes: "
            "move that file away or point router.endpoints_file elsewhere"
        )


def url_for(host_vars: Mapping[str, Any], name: str, port: int) -> str:
    """The server's address as a router elsewhere reaches it: the inventory address."""
    address = str(host_vars.get("ansible_host") or name)
    return f"http://{f'[{address}]' if ':' in address else address}:{port}"
