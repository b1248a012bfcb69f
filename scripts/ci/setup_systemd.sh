#!/usr/bin/env bash
# Prerequisite of the systemd/service module tests: Debian's systemd (its manager binary and
# systemctl; the tests run a user manager in a mount namespace of their own, since PID 1 of
# a CI container is not systemd). util-linux's unshare and nsenter are essential packages.
# Idempotent and quick when it is there; works as root on a fresh Debian 12 (CI=true).
set -euo pipefail
. "$(dirname "$0")/common.sh"

if ! [ -x /lib/systemd/systemd ] || ! command -v systemctl >/dev/null 2>&1; then
    apt_install systemd
fi
echo "setup_systemd: $(systemctl --version | head -1)"
