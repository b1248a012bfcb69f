# Sourced by scripts/*.sh and scripts/ci/setup_*.sh: the two things they all do.
# (Not a setup step itself: test.sh runs scripts/ci/setup_*.sh only.)

# apt-get install, as root or through sudo -n; packages already there are not reinstalled
# by the callers (they check first), so a second run does not touch apt at all.
apt_install() {
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; else SUDO=""; fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# make_venv DIR [PYTHON]: a venv at DIR unless one with a pip is there. A fresh Debian
# lacks the venv module (python3-venv); it is installed then, once.
make_venv() {
    local dir="$1" python="${2:-python3}"
    [ -x "$dir/bin/pip" ] && return 0
    rm -rf "$dir"
    if ! "$python" -m venv "$dir" 2>/dev/null; then
        rm -rf "$dir"
        echo "'$python -m venv' failed: installing python3-venv (Debian/Ubuntu)" >&2
        apt_install python3-venv
        "$python" -m venv "$dir"
    fi
}
