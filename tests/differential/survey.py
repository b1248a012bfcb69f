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
  mean", a missing file Ansible finds, a traceback);
- accepted wrongly: Ansible refuses, rigger accepts;
- refused by both: the playbook is broken for Ansible too (a missing galaxy role).

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
ROWS = ("accepted", "refused, named", "refused misleadingly", "accepted wrongly", "refused by both")


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
    if ansible_ok and rigger_ok:
        return "accepted"
    if not ansible_ok:
        return "accepted wrongly" if rigger_ok else "refused by both"
    if NAMED.search(rigger_says) and "Traceback" not in rigger_says and "did you mean" not in rigger_says:
        return "refused, named"
    return "refused misleadingly"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", "-v", action="store_true", help="print every playbook's row and messages")
    parser.add_argument("playbooks", nargs="*")
    options = parser.parse_args()
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for playbook in playbooks(options.playbooks):
        ansible_ok, ansible_says = ansible_accepts(playbook)
        rigger_ok, rigger_says = rigger_accepts(playbook)
        row = classify(ansible_ok, rigger_ok, rigger_says)
        counts[row] += 1
        last = rigger_says.splitlines()[-1] if rigger_says else ""
        if row.startswith("refused") and row != "refused by both":
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
    if reasons:
        print("\nrefusals by reason:")
        for reason, count in reasons.most_common():
            print(f"  {count:3}  {reason}")
    return 0


def _reason(message: str) -> str:
    """The refusal without its file:line and quoted names, to group alike ones."""
    text = re.sub(r"^.*?:\d+: ", "", message)
    return re.sub(r"'[^']*'", "'…'", text)[:140]


if __name__ == "__main__":
    sys.exit(main())
