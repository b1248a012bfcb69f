#!/usr/bin/env bash
# Remove what scripts/demo.sh and scripts/test.sh made, and nothing else:
#   bash scripts/clean.sh          remove
#   bash scripts/clean.sh -n       only list what would be removed
# In this checkout: .venv, .venv-vllm, .venv-olah, .venv-ansible, .cache/demo (the tiny model).
# In your home: the demo server (stopped first, through rigger) and its state and log
# files, the run lock file when no run holds it. As root, what the test suite made on the
# system: the SSH lab's users (rigger-ssh, rigger-nosudo, rigger-pw, with their homes),
# /etc/sudoers.d/rigger-tests, this checkout's fake NVML builds
# (/tmp/rigger-fake-nvml-TAG-*, TAG: this checkout's path hashed, as fakenvml.py names them;
# another checkout's builds are left: a test run there may be loading one), and this
# checkout's test sessions' lock directories (/tmp/rigger-test-state-*) that a killed
# session left: the ones recorded in .cache/rigger-test-dirs when they were made (another
# checkout's or another user's are never touched).
# Left alone: apt packages (openssh-server, sudo, gcc, git, git-lfs, python3-venv...),
# which may have been there before; remove them with apt-get if you want.
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=""
[ "${1:-}" = "-n" ] && DRY=1
STATE_DIR="${DEMO_STATE_DIR:-$HOME/.local/state/rigger/vllm}"
DEMO_NAME=demo-tiny-llama
LAB_USERS=(rigger-ssh rigger-nosudo rigger-pw)
SUDOERS_FILE=/etc/sudoers.d/rigger-tests

remove() {
    for path in "$@"; do
        [ -e "$path" ] || [ -L "$path" ] || continue
        echo "remove $path"
        [ -n "$DRY" ] || rm -rf -- "$path"
    done
}

# 1. The demo server: stopped the way the demo stops it (the whole vLLM session, only
#    processes rigger started, identified by pid and start time), before its state goes.
if [ -f "$STATE_DIR/$DEMO_NAME.json" ]; then
    if [ -x .venv/bin/rigger ]; then
        echo "stop the demo server ($STATE_DIR/$DEMO_NAME.json)"
        [ -n "$DRY" ] || .venv/bin/rigger run playbooks/demo_cpu.yml -e serve_state=stopped \
            -e "demo_state_dir=$STATE_DIR" >/dev/null
    else
        echo "clean: $STATE_DIR/$DEMO_NAME.json records a demo server but .venv is gone;" \
             "stop it with rigger first (or remove that file if it is not running)" >&2
        exit 1
    fi
fi
remove "$STATE_DIR/$DEMO_NAME.json" "$STATE_DIR/$DEMO_NAME.log" "$STATE_DIR/$DEMO_NAME.log.prev"
[ -n "$DRY" ] || rmdir -p "$STATE_DIR" 2>/dev/null || true

# 2. The run lock file, unless a run holds it now. Removed while clean.sh holds the lock
#    itself (flock, as engine/runlock takes it): a run starting between a check and the
#    removal would otherwise lose its lock file while it works.
LOCK="$HOME/.cache/rigger/run.lock"
if [ -f "$LOCK" ] && [ ! -L "$LOCK" ]; then
    if [ -n "$DRY" ] && flock -n "$LOCK" true; then
        echo "remove $LOCK"
    elif [ -z "$DRY" ] && flock -n "$LOCK" rm -f -- "$LOCK"; then
        echo "remove $LOCK"
        rmdir "$HOME/.cache/rigger" 2>/dev/null || true
    else
        echo "keep $LOCK: a rigger run holds it"
    fi
fi

# 3. This checkout's test sessions' lock directories, as recorded when made: only a
#    directory (not a link) named as tests/fakes/isolated_home.py names them, still there.
TEST_DIRS_RECORD=.cache/rigger-test-dirs
if [ -f "$TEST_DIRS_RECORD" ] && [ ! -L "$TEST_DIRS_RECORD" ]; then
    while IFS= read -r made; do
        case "$made" in /tmp/rigger-test-state-*) ;; *) continue ;; esac
        [[ "$made" != */../* ]] && [ -d "$made" ] && [ ! -L "$made" ] && remove "$made"
    done < "$TEST_DIRS_RECORD"
    remove "$TEST_DIRS_RECORD"
fi

# 4. This checkout's venvs and the demo's tiny model.
remove .venv .venv-vllm .venv-olah .venv-ansible .cache/demo
[ -n "$DRY" ] || rmdir .cache 2>/dev/null || true

# 5. What the test suite made on the system (root only).
if [ "$(id -u)" -ne 0 ]; then
    echo "not root: the SSH lab's users and $SUDOERS_FILE (if any) are left; run as root to remove them"
    exit 0
fi
for user in "${LAB_USERS[@]}"; do
    if id -u "$user" >/dev/null 2>&1; then
        echo "userdel -r $user"
        # No -f: a user with running processes (a test run now) is left, and said so.
        [ -n "$DRY" ] || userdel -r "$user" || echo "clean: userdel $user failed (is a test run using it?)" >&2
    fi
done
remove "$SUDOERS_FILE"
shopt -s nullglob
CHECKOUT_TAG="$(printf '%s' "$(pwd -P)" | sha256sum | cut -c1-8)"
remove "/tmp/rigger-fake-nvml-$CHECKOUT_TAG-"*
