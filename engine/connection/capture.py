"""Read a child's stdout and stderr together, keeping at most a cap of each."""

from __future__ import annotations

import os
import selectors
import time
from dataclasses import dataclass
from typing import IO

DEFAULT_CAP_BYTES = 8 * 2**20
TRUNCATION_NOTE = "\n[rigger: output truncated at {cap} bytes; {dropped} bytes dropped]\n"


@dataclass
class CappedBuffer:
    """Keeps the first ``cap`` bytes, counts the rest."""

    cap: int
    data: bytearray
    dropped: int = 0

    @classmethod
    def new(cls, cap: int = DEFAULT_CAP_BYTES) -> CappedBuffer:
        return cls(cap=cap, data=bytearray())

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        body = self.data.decode("utf-8", errors="replace")
        if self.dropped:
            body += TRUNCATION_NOTE.format(cap=self.cap, dropped=self.dropped)
        return body


def drain(
    streams: dict[str, IO[bytes]], deadline: float | None, cap: int = DEFAULT_CAP_BYTES
) -> tuple[dict[str, CappedBuffer], bool]:
    """Read every stream to EOF (or the deadline). Returns buffers and whether it timed out."""
    buffers = {name: CappedBuffer.new(cap) for name in streams}
    selector = selectors.DefaultSelector()
    for name, stream in streams.items():
        selector.register(stream, selectors.EVENT_READ, name)
    try:
        while selector.get_map():
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return buffers, True
            for key, _ in selector.select(wait):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    buffers[key.data].feed(chunk)
                else:
                    selector.unregister(key.fileobj)
    finally:
        selector.close()
    return buffers, False
