#!/usr/bin/env bash
# Prerequisites of the apt_key / apt_repository tests: gpg and its agent (the tests make
# throwaway signing keys and sign a local repository's Release; a fresh Debian has only
# gpgv, which apt needs). dpkg-deb, apt-get and util-linux's unshare are essential
# packages. Idempotent and quick when present; works as root on a fresh Debian 12 (CI=true).
set -euo pipefail
. "$(dirname "$0")/common.sh"

missing=()
command -v gpg >/dev/null 2>&1 || missing+=(gpg)
command -v gpg-agent >/dev/null 2>&1 || missing+=(gpg-agent)
if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
fi
echo "setup_apt: $(gpg --version | head -1), $(dpkg-deb --version | head -1)"
