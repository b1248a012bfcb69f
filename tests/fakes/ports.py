"""A TCP port for a test's server: the kernel's choice, never a fixed one (a README demo
may serve on 8000 beside the suite)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
