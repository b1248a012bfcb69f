"""Survey: `rigger validate` against `ansible-playbook --syntax-check` over a corpus of real
playbooks (tests/differential/corpus/, sources in corpus/SOURCES.md), with a table of how
rigger answered where real ansible-core is the judge.

    python3 tests/differential/survey.py [--verbose] [PLAYBOOK...]

Every top-level ``*.yml`` of a corpus folder is one playbook; roles sit beside them in
``roles/`` (found as Ansible finds them: ``<playbook_dir>/roles``). Both tools get the same
inventory (``localhost,`` for Ansible, none for rigger: only the playbook is judged).

Rows:
- accepted: both accept;
- refused, named: Ansible accepts, rigger refuses naming what it deliberately lacks (a
  module, collection, keyword or lookup "not available in rigger" / "not supported");
- refused misleadingly: Ansible accepts, rigger refuses for any other reason (a "did you
  mean", a missing file Ansible finds);
- accepted wrongly: Ansible refuses, rigger accepts;
- crash: rigger failed with a bug of its own ("unexpected error (a bug in rigger)", a
  traceback), whatever Ansible answered;
- refused by both: the playbook is broken for Ansible too (a missing galaxy role).

Below the table, the rows of each corpus folder (one project) and the refusals by reason.

Needs the real ansible-core venv (.venv-ansible, scripts/ci/setup_ansible.sh).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CORPUS = HERE / "corpus"
ANSIBLE_PLAYBOOK = REPO / ".venv-ansible" / "bin" / "ansible-playbook"
RIGGER = [sys.executable, "-m", "engine.cli"]
# rigger's words for a thing it deliberately lacks (module, collection, keyword, lookup)
NAMED = re.compile(r"not available in rigger|not supported|rigger has no |rigger does not |not supported by rigger")
# an empty ansible.cfg: no user's or machine's configuration changes Ansible's answer
EMPTY_CFG = str(Path(tempfile.mkdtemp(prefix="survey-")) / "ansible.cfg")
Path(EMPTY_CFG).write_text("[defaults]\n")
# rigger's words for a bug of its own (engine/cli.py's last resort) or a raw traceback
CRASH = re.compile(r"unexpected error \(a bug in rigger\)|Traceback \(most recent call last\)")
ROWS = ("accepted", "accepted wrongly", "refused, named", "refused misleadingly", "crash", "refused by both")
# the rows' column heads in the table of each corpus folder
COLUMNS = ("accepted", "wrongly", "named", "mislead.", "crash", "both")


def playbooks(selected: list[str]) -> Iterator[Path]:
    if selected:
        yield from (Path(p).resolve() for p in selected)
        return
    for folder in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        yield from sorted(folder.glob("*.yml"))


def ansible_accepts(playbook: Path) -> tuple[bool, str]:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_DEPRECATION_WARNINGS": "0", "ANSIBLE_CONFIG": EMPTY_CFG}
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "--syntax-check", "-i", "localhost,", str(playbook)],
        capture_output=True,
        text=True,
        cwd=playbook.parent,
        env=env,
        check=False,
    )
    return proc.returncode == 0, (proc.stderr or proc.stdout).strip()


def rigger_accepts(playbook: Path) -> tuple[bool, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [*RIGGER, "validate", str(playbook)], capture_output=True, text=True, cwd=playbook.parent, env=env, check=False
    )
    return proc.returncode == 0, (proc.stderr or proc.stdout).strip()


def classify(ansible_ok: bool, rigger_ok: bool, rigger_says: str) -> str:
    if CRASH.search(rigger_says):
        return "crash"
    if ansible_ok and rigger_ok:
        return "accepted"
    if not ansible_ok:
        return "accepted wrongly" if rigger_ok else "refused by both"
    if NAMED.search(rigger_says) and "did you mean" not in rigger_says:
        return "refused, named"
    return "refused misleadingly"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", "-v", action="store_true", help="print every playbook's row and messages")
    parser.add_argument("playbooks", nargs="*")
    options = parser.parse_args()
    counts: Counter[str] = Counter()
    by_folder: dict[str, Counter[str]] = {}
    reasons: Counter[str] = Counter()
    for playbook in playbooks(options.playbooks):
        ansible_ok, ansible_says = ansible_accepts(playbook)
        rigger_ok, rigger_says = rigger_accepts(playbook)
        row = classify(ansible_ok, rigger_ok, rigger_says)
        counts[row] += 1
        by_folder.setdefault(_folder(playbook), Counter())[row] += 1
        last = rigger_says.splitlines()[-1] if rigger_says else ""
        if row in ("refused, named", "refused misleadingly", "crash"):
            reasons[f"{row}: {_reason(last)}"] += 1
        if options.verbose:
            name = playbook.relative_to(CORPUS) if playbook.is_relative_to(CORPUS) else playbook
            print(f"{row:22} {name}\n    rigger: {last[:300]}")
            if not ansible_ok:
                print(f"    ansible: {ansible_says.splitlines()[-1][:300] if ansible_says else ''}")
    total = sum(counts.values())
    print(f"\n{'row':22} {'playbooks':>9} {'share':>6}")
    for row in ROWS:
        print(f"{row:22} {counts[row]:>9} {counts[row] / max(total, 1):>6.0%}")
    print(f"{'total':22} {total:>9}")
    print(f"\n{'folder':18} " + " ".join(f"{column:>8}" for column in COLUMNS))
    for folder, folder_counts in sorted(by_folder.items()):
        print(f"{folder:18} " + " ".join(f"{folder_counts[row]:>8}" for row in ROWS))
    if reasons:
        print("\nrefusals by reason:")
        for reason, count in reasons.most_common():
            print(f"  {count:3}  {reason}")
    return 0


def _folder(playbook: Path) -> str:
    """The corpus folder (project) a playbook belongs to; its own folder's name elsewhere."""
    return playbook.relative_to(CORPUS).parts[0] if playbook.is_relative_to(CORPUS) else playbook.parent.name


def _reason(message: str) -> str:
    """The refusal without its file:line and quoted names, to group alike ones."""
    text = re.sub(r"^.*?:\d+: ", "", message)
    return re.sub(r"'[^']*'", "'…'", text)[:140]


if __name__ == "__main__":
    sys.exit(main())
