#!/usr/bin/env bash
# Prerequisites of the SSH tests and bench: Debian's OpenSSH server and client, and sudo.
# Idempotent and quick when everything is there; works as root on a fresh Debian 12 (CI=true).
set -euo pipefail
. "$(dirname "$0")/common.sh"

missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)
command -v sudo >/dev/null 2>&1 || missing+=(sudo)
command -v useradd >/dev/null 2>&1 || missing+=(passwd)
command -v timeout >/dev/null 2>&1 || missing+=(coreutils)
command -v pgrep >/dev/null 2>&1 || missing+=(procps)
command -v python3 >/dev/null 2>&1 || missing+=(python3)

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup_ssh: need root to install: ${missing[*]}" >&2
        exit 1
    fi
    # shellcheck disable=SC2046  # one word per package
    apt_install $(printf '%s\n' "${missing[@]}" | sort -u)
fi

# sshd refuses to start without its privilege-separation directory.
mkdir -p /run/sshd
chmod 0755 /run/sshd
echo "setup_ssh: sshd $(/usr/sbin/sshd -V 2>&1 | head -1 || true), sudo present"
