#!/usr/bin/env bash
# sudo and its rules directory: the fast tier's become tests (local become goes through
# the real sudo) and the clean.sh test (/etc/sudoers.d). The SSH lab's rules come later,
# from the tests themselves. Idempotent; quick when present.
set -euo pipefail
. "$(dirname "$0")/common.sh"

if ! command -v sudo >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup_sudo: need root to install sudo" >&2
        exit 1
    fi
    apt_install sudo
fi
[ "$(id -u)" -ne 0 ] || { mkdir -p /etc/sudoers.d && chmod 0750 /etc/sudoers.d; }
echo "setup_sudo: $(sudo -V 2>/dev/null | head -1)"
