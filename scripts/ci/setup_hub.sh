#!/usr/bin/env bash
# Prerequisites of the hub-mirror tests (tests/integration/hub): git + git-lfs to build the
# tiny model repository, and the olah mirror in its own venv (.venv-olah; its pinned
# dependencies may clash with ours). Idempotent and quick when already installed.
set -euo pipefail
cd "$(dirname "$0")/../.."

OLAH_VERSION="${OLAH_VERSION:-0.5.4}"
PYTHON="${PYTHON:-python3}"
export DEBIAN_FRONTEND=noninteractive

apt_install() {
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; else SUDO=""; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "$@"
}

missing=()
command -v git >/dev/null || missing+=(git)
command -v git-lfs >/dev/null || missing+=(git-lfs)
if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
fi

if [ ! -x .venv-olah/bin/olah-cli ] || \
   [ "$(.venv-olah/bin/python -c 'import importlib.metadata as m; print(m.version("olah"))' 2>/dev/null)" != "$OLAH_VERSION" ]; then
    rm -rf .venv-olah
    if ! "$PYTHON" -m venv .venv-olah 2>/dev/null; then
        rm -rf .venv-olah
        apt_install python3-venv
        "$PYTHON" -m venv .venv-olah
    fi
    .venv-olah/bin/pip install -q --disable-pip-version-check "olah==${OLAH_VERSION}"
fi
.venv-olah/bin/olah-cli --help >/dev/null
# ensure_model runs huggingface_hub with the host python (tests: the interpreter running pytest).
"$PYTHON" -c 'import huggingface_hub' 2>/dev/null || \
    echo "setup_hub: note: $PYTHON lacks huggingface_hub (pip install -e . provides it)" >&2
echo "setup_hub: git-lfs $(git-lfs version | cut -d' ' -f1), olah ${OLAH_VERSION} in .venv-olah"
