"""Put an OpenPGP key into a `signed-by` keyring file (or take it out), for an APT repository.

Ansible's `apt_key` with `keyring`: the key (`data`, a `file` on the host, or a `url`
fetched from the host) is added to the keyring file unless a key with its fingerprint is
there already; with `id` (fingerprint, long or short id) a keyring already holding that
key is left alone without fetching anything, and a key that does not carry that id
fails the task. `state: absent` removes the key `id` names. A binary keyring (`.gpg`,
what `gpg --dearmor` and `apt-key --keyring` make) takes the key's packets appended; an
`.asc` keyring holds one armored key, written as given. The file is written atomically
through the file primitive (mode 0644), read and parsed by rigger, never by gpg; no
signature is verified here (apt's gpgv does that when it reads the repository). Without
`keyring` Ansible runs `apt-key add` into apt's shared trusted.gpg, which trusts the key
for every repository (apt-key is deprecated and gone from Debian 13 and Ubuntu 24.04):
refused, as is `keyserver`; name the keyring in the repository line's
`signed-by=` instead. Returns `fp`, `id`, `key_id`, `short_id`, `before` and `after` (the
keyring's fingerprints).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Diff, ProbeError, Result, TaskContext, TaskFailed, Unchanged, content_digest
from modules.system import openpgp

HOST_PATHS = ("file", "keyring")
MAX_KEY_BYTES = 1 << 20

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "description": "The key's fingerprint, long or short id; required for absent."},
        "data": {"type": "string", "description": "The key itself (armored or binary as text)."},
        "file": {"type": "string", "description": "A file on the host holding the key."},
        "url": {"type": "string", "description": "Where the host downloads the key from."},
        "keyring": {
            "type": "string",
            "description": "The keyring file (`/usr/share/keyrings/NAME.gpg`) signed-by names.",
        },
        "keyserver": {"type": "string", "description": "Refused by rigger: fetch the key from a URL instead."},
        "state": {
            "type": "string",
            "enum": ["present", "absent"],
            "default": "present",
            "description": "present or absent.",
        },
        "validate_certs": {"type": "boolean", "default": True, "description": "Verify the TLS certificate of url."},
    },
    # Ansible's mutually_exclusive: data, file, url
    "not": {"anyOf": [{"required": ["data", "file"]}, {"required": ["data", "url"]}, {"required": ["file", "url"]}]},
}


def _refusals(args: Mapping[str, Any]) -> None:
    if args.get("keyserver"):
        raise TaskFailed("keyserver is not supported by rigger: give the key's url (the vendor's .pub or .asc file)")
    if not args.get("keyring"):
        raise TaskFailed(
            "apt_key without keyring adds the key to apt's shared trusted.gpg (apt-key, deprecated and gone from "
            "Debian 13 and Ubuntu 24.04), trusting it for every repository; rigger refuses that: give keyring: "
            "/usr/share/keyrings/NAME.gpg and name it in the repository's signed-by=[...]"
        )
    if args["state"] == "absent" and not args.get("id"):
        raise TaskFailed("id is required when state is absent")


def _material(ctx: TaskContext, args: Mapping[str, Any]) -> bytes:
    if args.get("data") is not None:
        return str(args["data"]).encode("latin-1", "replace")
    if args.get("file"):
        data = ctx.conn.read_file(args["file"])
        if data is None:
            raise TaskFailed(f"file {args['file']} does not exist")
        return data
    if args.get("url"):
        request = {"url": args["url"], "method": "GET", "headers": {"User-Agent": "ansible-httpget"}, "timeout": 10,
                   "validate_certs": args["validate_certs"], "use_proxy": True, "follow_redirects": "safe",
                   "max_bytes": MAX_KEY_BYTES}  # fmt: skip
        try:
            answer = ctx.conn.run_probe("http_get", request)
        except ProbeError as exc:
            raise TaskFailed(f"error getting key id from url: {args['url']}: {exc}") from None
        if answer["error"] or answer["status"] != 200:
            raise TaskFailed(f"error getting key id from url: {args['url']}: {answer['msg']}")
        return base64.b64decode(answer["body"])
    raise TaskFailed("one of data, file or url is needed to add a key that is not in the keyring")


def _parsed(data: bytes | None, what: str) -> list[openpgp.Key]:
    try:
        return openpgp.keys(data or b"")
    except openpgp.KeyFormatError as exc:
        raise TaskFailed(f"{what}: {exc}") from None


def _ids(key: openpgp.Key) -> dict[str, str]:
    return {"fp": key.fingerprint, "key_id": key.key_id, "short_id": key.key_id[-8:]}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    _refusals(args)
    keyring, wanted = args["keyring"], str(args.get("id") or "")
    current = ctx.conn.read_file(keyring)
    held = _parsed(current, keyring)
    before = [key.fingerprint for key in held]
    data = {"id": wanted or None, "before": before, "after": before}
    armored = keyring.endswith(".asc")
    if args["state"] == "absent":
        kept = [key for key in held if not key.matches(wanted)]
        if len(kept) == len(held):
            return Unchanged(f"no key {wanted} in {keyring}", data)
        content = None if armored and not kept else b"".join(key.data for key in kept)
        return _change(
            keyring,
            current,
            content,
            f"remove key {wanted} from {keyring}",
            {**data, "after": [k.fingerprint for k in kept]},
        )
    if wanted and any(key.matches(wanted) for key in held):
        found = next(key for key in held if key.matches(wanted))
        return Unchanged(f"key {wanted} is in {keyring}", {**data, **_ids(found)})
    material = _material(ctx, args)
    new = _parsed(material, "the key")
    if not new:
        raise TaskFailed("the key data holds no OpenPGP public key")
    if wanted and not any(key.matches(wanted) for key in new):
        raise TaskFailed(f"the key fetched does not have the id {wanted} ({', '.join(k.fingerprint for k in new)})")
    added = [key for key in new if key.fingerprint not in before]
    if not added:
        return Unchanged(f"the key is in {keyring}", {**data, **_ids(new[0])})
    if armored and held:
        raise TaskFailed(f"{keyring} is an .asc keyring holding a key already; an .asc keyring holds one key")
    if armored and not material.strip().startswith(openpgp.ARMOR_BEGIN):
        raise TaskFailed(f"{keyring} is an .asc keyring: give the key armored (-----BEGIN PGP PUBLIC KEY BLOCK-----)")
    content = material if armored else (current or b"") + b"".join(key.data for key in added)
    after = before + [key.fingerprint for key in added]
    return _change(
        keyring, current, content, f"add key {added[0].key_id} to {keyring}", {**data, "after": after, **_ids(added[0])}
    )


def _change(keyring: str, current: bytes | None, content: bytes | None, summary: str, data: dict[str, Any]) -> Change:
    diff = Diff(
        f"{keyring} (keys)", "".join(f"{fp}\n" for fp in data["before"]), "".join(f"{fp}\n" for fp in data["after"])
    )
    payload = {"content": None if content is None else base64.b64encode(content).decode(), "data": data}
    return Change(summary, (diff,), payload, {f"file:{keyring}": content_digest(current)})


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    keyring, content = args["keyring"], change.payload["content"]
    if content is not None:
        ctx.conn.write_file(keyring, base64.b64decode(content), mode=0o644)
    else:
        facts = ctx.conn.run_probe("file_facts", {"paths": [keyring]})["paths"][keyring]
        if facts.get("exists"):
            identity = [facts["dev"], facts["inode"]]
            ctx.conn.run_probe("file_set", {"ops": [{"op": "remove", "path": keyring, "identity": identity}]})
    return Result(True, change.summary, diffs=change.diffs, data=dict(change.payload["data"]))
