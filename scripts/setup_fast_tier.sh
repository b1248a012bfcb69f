#!/usr/bin/env bash
# What the fast tier (pytest -m "not slow") needs beyond the venv scripts/demo.sh made:
# rigger's test tools in .venv, gcc and the fake NVML built from it (the GPU stand-in),
# setpriv, sudo and /etc/sudoers.d (local become, the clean.sh test), Debian's systemd (the
# systemd/service module tests run a real user manager), gpg (apt_key's tests make real
# keys), Debian's HAProxy (the routing tests drive a real one) and Debian's chromium with
# Playwright (the html plan report test): the steps scripts/ci/needs.txt names for the
# fast tier's paths. Nothing for the slow tier (no sshd, vLLM, hub mirror or ansible-core:
# scripts/test.sh does those).
# Run as root (apt, and the fast tier itself makes private namespaces); idempotent, seconds
# when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ci/common.sh
export PIP_DISABLE_PIP_VERSION_CHECK=1

make_venv .venv "${PYTHON:-python3}"
install_rigger_dev .venv
export PYTHON="$PWD/.venv/bin/python"
for step in gpu sudo systemd apt haproxy browser; do
    bash "scripts/ci/setup_$step.sh"
done
echo "setup_fast_tier: ready; with .venv activated: python -m pytest -m \"not slow\" -n auto --dist loadfile"
