"""A command in a network namespace of its own, with only a loopback interface (a test
harness, not a fake).

The README's demo serves on 127.0.0.1:8000, and the module examples and the tour name that
port as written. A test that runs them in check mode must see this machine without the
demo (issue 29: the fast tier passes beside a running demo): in its own network namespace
nothing listens and every port is free, while files, processes and GPUs are this machine's.
Real: util-linux unshare (root), the kernel's loopback, brought up by this file's own
ioctl (no iproute2 needed).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import sys

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def in_own_network(argv: list[str]) -> list[str]:
    """``argv`` as a command that runs in a new network namespace with loopback up."""
    return ["unshare", "--net", sys.executable, __file__, *argv]


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


if __name__ == "__main__":
    _loopback_up()
    os.execvp(sys.argv[1], sys.argv[1:])
