#!/usr/bin/env bash
# The README's first command: serve a tiny model with real vLLM on this machine, no GPU
# needed. Installs rigger in .venv and the vLLM CPU build in .venv-vllm (their own
# environments; ~1.5 min and ~3.5 GB the first time), then runs playbooks/demo_cpu.yml.
# Again: nothing to install, the run reports changed=0. Extra arguments go to `rigger run`
# (e.g. --check --diff, -e demo_port=8010, -e demo_state=stopped).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x .venv/bin/rigger ]; then
    echo "demo: installing rigger into .venv"
    if ! "$PYTHON" -m venv .venv 2>/dev/null; then
        echo "demo: '$PYTHON -m venv' failed; on Debian/Ubuntu: apt-get install python3-venv" >&2
        exit 1
    fi
    .venv/bin/pip install -q -e .
fi
bash scripts/ci/setup_vllm.sh
exec .venv/bin/rigger run playbooks/demo_cpu.yml "$@"
