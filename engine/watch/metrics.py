"""Prometheus text-format metrics of the watcher, served on a local port when asked
(``--metrics-port``): bound to 127.0.0.1 only, GET /metrics, nothing else."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from engine.errors import OptionsError
from engine.mask import MASK
from engine.watch.store import WatchState

STATES = ("converged", "repaired", "repair failed", "drift", "backoff", "paused", "unreachable", "plan failed")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(state: WatchState, now: float, window_s: float) -> str:
    lines = [
        "# HELP rigger_watch_cycles_total Rounds the watcher has run.",
        "# TYPE rigger_watch_cycles_total counter",
        f"rigger_watch_cycles_total {state.cycles}",
        "# HELP rigger_watch_fleet_paused 1 while the fleet circuit breaker holds every host.",
        "# TYPE rigger_watch_fleet_paused gauge",
        f"rigger_watch_fleet_paused {int(state.fleet_pause is not None)}",
        "# HELP rigger_watch_host_paused 1 while a host is paused (no changes until cleared).",
        "# TYPE rigger_watch_host_paused gauge",
    ]
    hosts = sorted(state.hosts.items())
    lines += [f'rigger_watch_host_paused{{host="{_label(n)}"}} {int(h.pause is not None)}' for n, h in hosts]
    lines += [
        "# HELP rigger_watch_host_repairs_in_window Repairs of a host within the budget window.",
        "# TYPE rigger_watch_host_repairs_in_window gauge",
    ]
    lines += [
        f'rigger_watch_host_repairs_in_window{{host="{_label(n)}"}} {h.repairs_in(now, window_s)}' for n, h in hosts
    ]
    lines += [
        "# HELP rigger_watch_host_state 1 for the state a host was found in at its last check.",
        "# TYPE rigger_watch_host_state gauge",
    ]
    for name, host in hosts:
        for known in STATES:
            lines.append(f'rigger_watch_host_state{{host="{_label(name)}",state="{known}"}} {int(host.state == known)}')
    lines += [
        "# HELP rigger_watch_host_last_check_timestamp_seconds When a host was last planned.",
        "# TYPE rigger_watch_host_last_check_timestamp_seconds gauge",
    ]
    lines += [
        f'rigger_watch_host_last_check_timestamp_seconds{{host="{_label(n)}"}} {h.last_check:.3f}' for n, h in hosts
    ]
    return "\n".join(lines) + "\n"


class MetricsServer:
    def __init__(self, port: int, snapshot: Callable[[], str]):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = MASK.text(snapshot()).encode()  # an output like any other: masked
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None  # scrapes are not news

        try:
            self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        except OSError as exc:  # in use, or a privileged port: the operator's option, not a bug
            raise OptionsError(
                f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc} "
                "(another process has it, or it needs privileges: pick another port, or 0 for any free one)"
            ) from None
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="rigger-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
