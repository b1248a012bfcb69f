#!/usr/bin/env bash
# Set up what the tests need (idempotent; quick when already there), then run them.
# Used by .ci/run and by developers alike:  bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

python3 -m pip install -q -e '.[dev]'
for setup in scripts/ci/setup_*.sh; do
    [ -f "$setup" ] || continue
    echo "== $setup"
    bash "$setup"
done

bash scripts/lint.sh
echo "== pytest"
python3 -m pytest -q -p no:cacheprovider "$@"
