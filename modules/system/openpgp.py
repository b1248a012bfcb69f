"""OpenPGP public keys as apt reads them from a `signed-by` keyring: armor, packets, fingerprints.

Enough of RFC 4880 / 9580 to tell which keys a keyring file holds and to add or drop one:
ASCII armor is decoded (its CRC line skipped), packets are split by their headers (old
and new format, no partial lengths), a key is its primary public-key packet (tag 6) with
every packet up to the next one, and its fingerprint is the v4 SHA-1 (or v6 SHA-256) of
that packet. No signature is verified: apt (gpgv) does that when it reads the repository.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

ARMOR_BEGIN = b"-----BEGIN PGP PUBLIC KEY BLOCK-----"
PUBLIC_KEY = 6


class KeyFormatError(ValueError):
    """Not an OpenPGP public key (or keyring) rigger can read."""


@dataclass(frozen=True)
class Key:
    fingerprint: str  # upper-case hex
    data: bytes  # the key's packets, binary

    @property
    def key_id(self) -> str:
        return self.fingerprint[-16:] if len(self.fingerprint) == 40 else self.fingerprint[:16]

    def matches(self, wanted: str) -> bool:
        """Ansible's id: a fingerprint, a long or a short key id (with or without 0x)."""
        wanted = wanted.upper().removeprefix("0X").replace(" ", "")
        return len(wanted) >= 8 and (self.fingerprint == wanted or self.key_id.endswith(wanted))


def dearmor(data: bytes) -> bytes:
    """The binary packets of an armored block (or the data itself when it is binary)."""
    text = data.strip()
    if not text.startswith(b"-----BEGIN PGP"):
        return data
    lines = text.splitlines()[1:]
    body: list[bytes] = []
    in_headers = True
    for line in lines:
        line = line.strip()
        if line.startswith(b"-----END PGP"):
            return base64.b64decode(b"".join(body))
        if in_headers:
            in_headers = bool(line) and b":" in line
            if in_headers or not line:
                continue
        if line.startswith(b"=") and len(line) == 5:
            continue  # the CRC-24 line
        body.append(line)
    raise KeyFormatError("the armored key has no END line")


def _packet(data: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of the body, end of the body) of the packet at ``at``."""
    first = data[at]
    if not first & 0x80:
        raise KeyFormatError(f"not an OpenPGP packet at byte {at}")
    if first & 0x40:  # new format
        tag, octet = first & 0x3F, data[at + 1]
        if octet < 192:
            return tag, at + 2, at + 2 + octet
        if octet < 224:
            length = ((octet - 192) << 8) + data[at + 2] + 192
            return tag, at + 3, at + 3 + length
        if octet == 255:
            length = int.from_bytes(data[at + 2 : at + 6], "big")
            return tag, at + 6, at + 6 + length
        raise KeyFormatError("a partial-length packet is not part of a public key")
    tag, kind = (first >> 2) & 0x0F, first & 0x03
    if kind == 3:
        raise KeyFormatError("an indeterminate-length packet is not part of a public key")
    size = (1, 2, 4)[kind]
    length = int.from_bytes(data[at + 1 : at + 1 + size], "big")
    return tag, at + 1 + size, at + 1 + size + length


def _fingerprint(body: bytes) -> str:
    if body[:1] == b"\x04":
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if body[:1] == b"\x06":
        return hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise KeyFormatError(f"an OpenPGP key of version {body[:1].hex()} (rigger reads versions 4 and 6)")


def keys(data: bytes) -> list[Key]:
    """The keys of a keyring file or key export, armored or binary."""
    binary = dearmor(data)
    starts: list[tuple[int, str]] = []
    at = 0
    try:
        while at < len(binary):
            tag, start, end = _packet(binary, at)
            if end > len(binary):
                raise KeyFormatError("a packet runs past the end of the data")
            if tag == PUBLIC_KEY:
                starts.append((at, _fingerprint(binary[start:end])))
            elif not starts:
                raise KeyFormatError("the data does not start with a public key")
            at = end
    except IndexError:
        raise KeyFormatError("the data ends inside a packet header") from None
    bounds = [s for s, _ in starts] + [len(binary)]
    return [Key(fp, binary[bounds[i] : bounds[i + 1]]) for i, (_, fp) in enumerate(starts)]
