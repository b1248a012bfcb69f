#!/usr/bin/env bash
# Set up what the tests need, then run them. Used by .ci/run and by developers alike:
#   bash scripts/test.sh                      everything: every set-up step, lint, fast tier, slow tier
#   bash scripts/test.sh PATH... [ARGS]       only the set-up steps PATH's tests need
#                                             (scripts/ci/needs.txt), then pytest PATH... ARGS
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

paths=()
for arg in "$@"; do
    [[ "$arg" != -* ]] && [ -e "${arg%%::*}" ] && paths+=("${arg%%::*}")
done
[ "${#paths[@]}" -gt 0 ] || paths=(tests)
mapfile -t steps < <(needed_steps "${paths[@]}")

echo "== python venv ($VENV)"
make_venv "$VENV"
install_rigger_dev "$VENV"  # again only when pyproject.toml changed
# The setup scripts install for this interpreter (PYTHON), not the system's.
export PYTHON="$PWD/$VENV/bin/python"
for step in "${steps[@]}"; do
    echo "== scripts/ci/setup_$step.sh"
    bash "scripts/ci/setup_$step.sh"
done
echo "== set-up took $((SECONDS - setup_started))s (steps: ${steps[*]})"

PYTEST=("$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=30)
if [ "$#" -gt 0 ]; then
    echo "== pytest $*"
    exec "${PYTEST[@]}" "$@"
fi

echo "== lint"
bash scripts/lint.sh  # with PYTHON (exported above): the venv's ruff, mypy, vulture

# Everything: the fast tier on both cores (it holds in parallel, issue 24), then the slow
# tier as two parts side by side that share no resource (tests/conftest.py VLLM_PART): the
# real vLLM servers one after another, and the SSH, hub, package and differential files.
# Every part runs even when another fails; --durations: CI has 90 minutes, its log names
# the slowest; tests/time_budget.py fails a test over its budget that is not listed there.
export RIGGER_TIME_BUDGET=enforce
echo "== pytest: fast tier (-n 2)"
fast=0; "${PYTEST[@]}" -m "not slow" -n 2 || fast=$?
echo "== pytest: slow tier, two parts side by side (the services part's log follows the vLLM part's)"
services_log="$(mktemp)"
"${PYTEST[@]}" -m "slow and not vllm_part" > "$services_log" 2>&1 &
services_pid=$!
vllm=0; "${PYTEST[@]}" -m "slow and vllm_part" || vllm=$?
services=0; wait "$services_pid" || services=$?
echo "== pytest: slow tier, services part"
cat "$services_log"; rm -f "$services_log"
echo "== pytest: fast tier exit $fast, slow vLLM part exit $vllm, slow services part exit $services"
[ "$fast" -eq 0 ] && [ "$vllm" -eq 0 ] && [ "$services" -eq 0 ]
