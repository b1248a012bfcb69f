#!/usr/bin/env bash
# Prerequisite of the routing and rollout tests: Debian's HAProxy (the load balancer whose
# upstream list rigger manages through its runtime API). Idempotent and quick when it is
# there; works as root on a fresh Debian 12 (CI=true). apt waits for the dpkg lock (bounded,
# common.sh's apt_get) instead of failing at once.
set -euo pipefail
. "$(dirname "$0")/common.sh"

if ! [ -x /usr/sbin/haproxy ]; then
    apt_install haproxy
fi
# The package starts its own service on boot images with systemd; the tests start theirs.
echo "setup_haproxy: $(/usr/sbin/haproxy -v 2>&1 | head -1)"
