# Sourced by scripts/*.sh and scripts/ci/setup_*.sh: what they all do (apt, venvs, long
# installs that say how far they are). Not a setup step itself: test.sh runs
# scripts/ci/setup_*.sh only.

COMMON_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
APT_LOCK_WAIT_S="${APT_LOCK_WAIT_S:-300}"

# wait_for_apt_locks: return once no process holds an apt/dpkg lock, saying every few
# seconds who holds it; fail after APT_LOCK_WAIT_S seconds. (A fresh cloud VM runs
# unattended-upgrades for minutes; apt-get itself fails at once on the lists lock.)
wait_for_apt_locks() {
    local started=$SECONDS holder
    command -v python3 >/dev/null 2>&1 || return 0  # then only apt-get's DPkg::Lock::Timeout waits
    # shellcheck disable=SC2086  # APT_LOCK_FILES: lock paths separated by spaces (tests)
    while holder="$($SUDO python3 "$COMMON_DIR/apt_lock_holder.py" ${APT_LOCK_FILES:-})" && [ -n "$holder" ]; do
        if [ $((SECONDS - started)) -ge "$APT_LOCK_WAIT_S" ]; then
            echo "apt: gave up after ${APT_LOCK_WAIT_S}s: $holder still holds the apt/dpkg lock." \
                 "Let it finish (on a fresh cloud VM: unattended-upgrades, a few minutes) and run this" \
                 "again, or set APT_LOCK_WAIT_S=SECONDS to wait longer." >&2
            return 1
        fi
        echo "apt: waiting for $holder to release the apt/dpkg lock ($((SECONDS - started))s, at most ${APT_LOCK_WAIT_S}s)"
        sleep "${APT_LOCK_POLL_S:-5}"
    done
}

# apt_get ARGS...: apt-get as root or through sudo -n, once the locks are free.
apt_get() {
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; else SUDO=""; fi
    wait_for_apt_locks
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT_S" "$@"
}

# apt_install PACKAGES...: packages already there are not reinstalled by the callers (they
# check first), so a second run does not touch apt at all.
apt_install() {
    echo "apt: installing $*"
    apt_get update -qq
    apt_get install -y -qq --no-install-recommends "$@" >/dev/null
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

# run_with_progress LABEL DIR EXPECTED_MB COMMAND...: COMMAND's own output, and while it
# runs a line every PROGRESS_EVERY_S (5) seconds: the time so far and DIR's size against
# what it reaches (pip prints nothing while it downloads a 900 MB wheel or unpacks it).
run_with_progress() {
    local label="$1" dir="$2" expected_mb="$3" every="${PROGRESS_EVERY_S:-5}" started=$SECONDS waited pid
    shift 3
    "$@" &
    pid=$!
    trap 'kill "$pid" 2>/dev/null' INT TERM
    while kill -0 "$pid" 2>/dev/null; do
        waited=0
        while [ "$waited" -lt "$every" ] && kill -0 "$pid" 2>/dev/null; do
            sleep 1
            waited=$((waited + 1))
        done
        kill -0 "$pid" 2>/dev/null || break
        echo "$label: $((SECONDS - started))s so far;" \
             "$dir is $(du -sm "$dir" 2>/dev/null | cut -f1) MB of about $expected_mb MB"
    done
    trap - INT TERM
    wait "$pid"
}

# install_rigger_dev VENV: rigger (editable) and its dev tools (pytest, ruff, mypy...) into
# VENV, again only when pyproject.toml changed since the last install there.
install_rigger_dev() {
    local venv="$1" stamp="$1/.rigger-dev-installed" want
    want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
    [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && return 0
    echo "installing rigger and its test tools into $venv (a minute or two, about 200 MB)"
    run_with_progress "install" "$venv" 200 "$venv/bin/pip" install -e '.[dev]'
    echo "$want" > "$stamp"
}

# needed_steps PATH...: the set-up steps (scripts/ci/needs.txt) whose paths overlap a
# PATH: the PATH is one of them, lies below one, or is a directory above one.
needed_steps() {
    local step areas area path
    while read -r step areas; do
        case "$step" in "" | "#"*) continue ;; esac
        for area in $areas; do
            for path in "$@"; do
                path="${path%/}"; path="${path#./}"
                if [ "$path" = "$area" ] || [[ "$path" == "$area"/* ]] || [[ "$area" == "$path"/* ]] || [ "$path" = . ]; then
                    echo "$step"
                    continue 3
                fi
            done
        done
    done < "$COMMON_DIR/needs.txt"
}
