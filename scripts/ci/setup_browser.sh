#!/usr/bin/env bash
# Prerequisites of the html plan report test: Debian's chromium (apt) driven by Playwright
# for Python (pip) through its executable path. No browser download: Playwright's own
# browser builds are not reachable here, and Debian's chromium is the one we test with.
# Idempotent and quick when everything is there; works as root on a fresh Debian (CI=true).
set -euo pipefail
. "$(dirname "$0")/common.sh"

if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup_browser: need root to install chromium" >&2
        exit 1
    fi
    apt_install chromium fonts-dejavu-core
fi

# Into the interpreter that runs the tests (test.sh exports PYTHON: its venv), never the system's.
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c "import playwright.sync_api" >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q "playwright>=1.40"
fi
echo "setup_browser: $(/usr/bin/chromium --version 2>/dev/null || echo 'chromium ?'), playwright $("$PYTHON" -c 'import importlib.metadata as m; print(m.version("playwright"))')"
