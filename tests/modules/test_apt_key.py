"""apt_key with a keyring: real OpenPGP keys into a scratch keyring, checked by gpgv.

Real: keys made here with gpg (ed25519, in a scratch GNUPGHOME), the local connection,
the file primitive writing the keyring (`keyring` is Ansible's own argument, so the
keyring lives in tmp_path), and gpgv, the verifier apt runs, checking a signature
against the keyring rigger wrote. Not real: no repository; nothing in /usr/share/keyrings.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext, Unchanged


def gpg(home: Path, *words: str, data: bytes | None = None) -> bytes:
    done = subprocess.run(["gpg", "--homedir", str(home), "--batch", *words], input=data, capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two signing keys: their fingerprints, armored exports, and a signature by the first."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    made: dict[str, Any] = {"home": home}
    for name in ("cuda", "other"):
        gpg(home, "--passphrase", "", "--quick-gen-key", f"{name} <{name}@example.org>", "ed25519", "sign", "never")
        listing = gpg(home, "--with-colons", "--list-keys", f"{name}@example.org").decode()
        made[name] = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        made[f"{name}_asc"] = gpg(home, "--armor", "--export", made[name]).decode()
    signed = home / "Release"
    signed.write_text("Origin: cuda\n")
    gpg(home, "--local-user", made["cuda"], "--detach-sign", "--output", str(home / "Release.gpg"), str(signed))
    yield made
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)  # the agent gpg started


def converge(args: dict[str, Any]) -> tuple[Any, Any, Any]:
    spec = registry.get("apt_key")
    full = spec.with_defaults(spec.coerced(args))
    conn = ScopedConnection(LocalConnection())
    change = spec.plan(TaskContext("localhost", conn.planning(), {}, {}), full)
    result = spec.apply(TaskContext("localhost", conn, {}, {}), full, change) if isinstance(change, Change) else None
    return change, result, spec.plan(TaskContext("localhost", conn.planning(), {}, {}), full)


def gpgv_accepts(keyring: Path, keys: dict[str, Any]) -> bool:
    home = keys["home"]
    argv = ["gpgv", "--keyring", str(keyring), str(home / "Release.gpg"), str(home / "Release")]
    return subprocess.run(argv, capture_output=True).returncode == 0


def test_a_key_goes_into_a_keyring_gpgv_reads_and_a_second_run_changes_nothing(
    keys: dict[str, Any], tmp_path: Path
) -> None:
    keyring = tmp_path / "cuda-archive-keyring.gpg"
    change, result, again = converge({"data": keys["cuda_asc"], "keyring": str(keyring)})
    assert isinstance(change, Change) and result.data["fp"] == keys["cuda"] and result.data["after"] == [keys["cuda"]]
    assert isinstance(again, Unchanged)
    assert gpgv_accepts(keyring, keys)
    converge({"data": keys["other_asc"], "keyring": str(keyring)})
    listed = gpg(keys["home"], "--no-default-keyring", "--keyring", str(keyring), "--with-colons", "--list-keys")
    assert [line.split(":")[9] for line in listed.decode().splitlines() if line.startswith("fpr:")] == [
        keys["cuda"],
        keys["other"],
    ]
    present = converge({"id": keys["cuda"][-8:], "keyring": str(keyring)})[0]  # no key material needed
    assert isinstance(present, Unchanged) and present.data["fp"] == keys["cuda"]


def test_absent_takes_the_key_out_and_gpgv_then_refuses_its_signature(keys: dict[str, Any], tmp_path: Path) -> None:
    keyring = tmp_path / "k.gpg"
    converge({"data": keys["cuda_asc"], "keyring": str(keyring)})
    converge({"data": keys["other_asc"], "keyring": str(keyring)})
    _, result, again = converge({"id": keys["cuda"][-16:], "keyring": str(keyring), "state": "absent"})
    assert result.data["after"] == [keys["other"]] and isinstance(again, Unchanged)
    assert not gpgv_accepts(keyring, keys)


def test_an_asc_keyring_holds_the_armored_key_as_given(keys: dict[str, Any], tmp_path: Path) -> None:
    keyring = tmp_path / "cuda.asc"
    converge({"data": keys["cuda_asc"], "keyring": str(keyring)})
    assert keyring.read_text() == keys["cuda_asc"]
    with pytest.raises(TaskFailed, match="holds one key"):
        converge({"data": keys["other_asc"], "keyring": str(keyring)})


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ({"id": "0123456789ABCDEF"}, "does not have the id 0123456789ABCDEF"),
        ({"keyring": None}, "trusting it for every repository"),
        ({"keyserver": "keyserver.ubuntu.com"}, "keyserver is not supported by rigger"),
        ({"data": "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnot base64 at all\n"}, "no END line"),
    ],
)
def test_wrong_ids_shared_keyrings_keyservers_and_garbage_fail_before_any_write(
    keys: dict[str, Any], tmp_path: Path, args: dict[str, Any], why: str
) -> None:
    full = {"data": keys["cuda_asc"], "keyring": str(tmp_path / "k.gpg"), **args}
    with pytest.raises(TaskFailed, match=why):
        converge({k: v for k, v in full.items() if v is not None})
    assert not (tmp_path / "k.gpg").exists()
