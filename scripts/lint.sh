#!/usr/bin/env bash
# The lint stage: formatting, lint rules, strict types (probes included: they run as root
# on other people's machines) and dead code. Called by scripts/test.sh; run it alone too.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

echo "== ruff format --check"; "$PYTHON" -m ruff format --check engine modules tests bench scripts
echo "== ruff check"; "$PYTHON" -m ruff check engine modules tests bench scripts
echo "== mypy --strict"; "$PYTHON" -m mypy --strict
echo "== vulture"; "$PYTHON" -m vulture engine modules scripts/vulture_whitelist.py --min-confidence 60
