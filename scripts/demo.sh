#!/usr/bin/env bash
# The README's first command: serve a tiny model with real vLLM on this machine, no GPU
# needed. Installs rigger (and its test tools) in .venv and the vLLM CPU build in .venv-vllm (their own
# environments; a few minutes and ~3.5 GB the first time), then runs playbooks/demo_cpu.yml.
# Again: nothing to install, the run reports changed=0. Extra arguments go to `rigger run`
# (e.g. --check --diff, -e demo_port=8010, -e serve_state=stopped to stop the server).
# Afterwards `. .venv/bin/activate` puts `rigger` on your PATH; scripts/clean.sh undoes it all.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ci/common.sh
export PIP_DISABLE_PIP_VERSION_CHECK=1

# rigger with its test tools: the README's fast tier runs from this same venv.
make_venv .venv "${PYTHON:-python3}"
install_rigger_dev .venv
PYTHON="$PWD/.venv/bin/python" bash scripts/ci/setup_vllm.sh
exec .venv/bin/rigger run playbooks/demo_cpu.yml "$@"
