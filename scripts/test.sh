#!/usr/bin/env bash
# Set up what the tests need, then run them. Used by .ci/run and by developers alike:
#   bash scripts/test.sh [pytest args]        e.g. bash scripts/test.sh tests/unit
# Everything Python goes into venvs in this checkout, never into the system python:
# .venv (rigger + dev tools; the same venv scripts/demo.sh makes), .venv-vllm, .venv-olah.
# Idempotent: what is installed is not installed again (a second run's set-up takes
# seconds). Run as root on Debian 12: the SSH suite creates users and starts sshd.
# What it leaves behind, and scripts/clean.sh that removes it: README, "What the two
# commands leave on this machine".
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ci/common.sh
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
VENV=.venv
setup_started=$SECONDS

echo "== python venv ($VENV)"
make_venv "$VENV"
install_rigger_dev "$VENV"  # again only when pyproject.toml changed
# The setup scripts install for this interpreter (PYTHON), not the system's.
export PYTHON="$PWD/$VENV/bin/python"
for setup in scripts/ci/setup_*.sh; do
    [ -f "$setup" ] || continue
    echo "== $setup"
    bash "$setup"
done
echo "== set-up took $((SECONDS - setup_started))s"

echo "== lint"
bash scripts/lint.sh  # with PYTHON (exported above): the venv's ruff, mypy, vulture

PYTEST=("$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=30)
if [ "$#" -gt 0 ]; then
    echo "== pytest $*"
    exec "${PYTEST[@]}" "$@"
fi
# Everything: the fast tier on both cores (it holds in parallel, issue 24), then the slow
# tier alone (real vLLM servers and load tests share the 2 cores with nothing else). Both
# run even when the first fails; --durations: CI has 90 minutes, its log names the slowest.
echo "== pytest: fast tier (-n 2)"
fast=0; "${PYTEST[@]}" -m "not slow" -n 2 || fast=$?
echo "== pytest: slow tier"
slow=0; "${PYTEST[@]}" -m slow || slow=$?
echo "== pytest: fast tier exit $fast, slow tier exit $slow"
[ "$fast" -eq 0 ] && [ "$slow" -eq 0 ]
