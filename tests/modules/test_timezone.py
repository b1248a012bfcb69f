"""community.general's timezone through the real CLI and the module contract, for real.

Real: `rigger run` (check mode, --diff, register), the module's plan and apply on the local
connection, the file primitive replacing /etc/localtime and writing /etc/timezone, this
host's tzdata, and glibc's `date` reading the zone afterwards. All of it runs as root in a
private mount namespace whose /etc is an overlay with writes landing in a private tmpfs
(tests/modules/decoyns.py): this machine's own /etc/localtime is never changed, which the
test checks after. Not real: no timedated and no system bus (rigger does not use them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from decoyns import run_in_decoy_namespace

BOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: zone
      community.general.timezone: {name: Europe/Paris}
      register: tz
    - name: again
      timezone: {name: Europe/Paris}
      register: again
    - name: show
      debug: {msg: "{{ [tz.diff | default('none'), again.diff | default('none')] }}"}
"""

# Start as tzdata sets a Debian host up, whatever this machine holds; run check mode with
# --diff, then for real; read the zone back as glibc does.
BODY = f"""
os.unlink("/etc/localtime")
os.symlink("/usr/share/zoneinfo/Etc/UTC", "/etc/localtime")
write("/etc/timezone", "Etc/UTC\\n")
os.chmod("/etc/timezone", 0o644)
write("/srv/book.yml", {BOOK!r})
os.makedirs("/srv/home")


def rigger(*extra):
    argv = [sys.executable, "-m", "engine.cli", "run", "/srv/book.yml", "--output", "jsonl", *extra]
    done = subprocess.run(argv, capture_output=True, text=True, env={{**os.environ, "HOME": "/srv/home"}})
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{{")]
    steps = {{e["task"]: e for e in events if e.get("event") == "task_result"}}
    return {{"rc": done.returncode, "stderr": done.stderr[-2000:], "steps": steps}}


def state():
    date = subprocess.run(["date", "+%Z"], capture_output=True, text=True, env={{"PATH": os.environ["PATH"]}})
    return {{"link": os.readlink("/etc/localtime"), "file": open("/etc/timezone").read(),
            "mode": oct(os.stat("/etc/timezone").st_mode & 0o777), "date": date.stdout.strip()}}


checked = rigger("--check", "--diff")
after_check = state()
applied = rigger("--diff")
result = {{"checked": checked, "after_check": after_check, "applied": applied, "after": state()}}
"""


def _host_zone() -> tuple[str, bytes]:
    return os.readlink("/etc/localtime"), Path("/etc/timezone").read_bytes()


def test_check_mode_shows_the_diff_and_a_real_run_sets_the_zone_glibc_reads() -> None:
    host_before = _host_zone()
    result: Any = run_in_decoy_namespace(BODY)
    checked, applied = result["checked"], result["applied"]
    assert checked["rc"] == 0 and applied["rc"] == 0, (checked["stderr"], applied["stderr"])
    # check mode: the change and its diff shown, nothing written
    step = checked["steps"]["zone"]
    assert step["status"] == "changed" and step["msg"] == "would set the time zone to Europe/Paris"
    assert [(d["label"], d["before"], d["after"]) for d in step["diffs"]] == [
        ("/etc/localtime", "link -> /usr/share/zoneinfo/Etc/UTC\n", "link -> ../usr/share/zoneinfo/Europe/Paris\n"),
        ("/etc/timezone", "Etc/UTC\n", "Europe/Paris\n"),
    ]
    assert result["after_check"] == {"link": "/usr/share/zoneinfo/Etc/UTC", "file": "Etc/UTC\n", "mode": "0o644",
                                     "date": "UTC"}  # fmt: skip
    # the real run: both in place, the file's mode kept, glibc reads the new zone
    assert applied["steps"]["zone"]["status"] == "changed"
    assert applied["steps"]["again"]["status"] == "ok"
    assert result["after"] == {"link": "../usr/share/zoneinfo/Europe/Paris", "file": "Europe/Paris\n",
                               "mode": "0o644", "date": "CET"}  # fmt: skip
    # community.general's return value `diff`, before and after (the same when unchanged)
    shown = applied["steps"]["show"]["msg"]
    assert json.loads(shown) == [
        {"before": {"name": "Etc/UTC"}, "after": {"name": "Europe/Paris"}},
        {"before": {"name": "Europe/Paris"}, "after": {"name": "Europe/Paris"}},
    ], shown
    assert _host_zone() == host_before, "the namespace's /etc/localtime reached this machine"


SWAP_BODY = """
os.unlink("/etc/localtime")
os.symlink("../usr/share/zoneinfo/Etc/UTC", "/etc/localtime")
write("/etc/timezone", "Etc/UTC\\n")


def swap():  # someone else links /etc/localtime between plan and apply
    os.unlink("/etc/localtime")
    os.symlink("../usr/share/zoneinfo/Asia/Tokyo", "/etc/localtime")


swapped = converge("timezone", {"name": "Europe/Paris"}, between=swap)
after_swap = [os.readlink("/etc/localtime"), open("/etc/timezone").read()]
os.unlink("/etc/localtime")
os.symlink("../usr/share/zoneinfo/Europe/Paris", "/etc/localtime")
only_file = converge("timezone", {"name": "Europe/Paris"})
result = {"swapped": swapped, "after_swap": after_swap, "only_file": only_file,
          "after": [os.readlink("/etc/localtime"), open("/etc/timezone").read()]}
"""


def test_a_link_changed_since_the_plan_is_left_alone_and_a_right_link_is_not_rewritten() -> None:
    result: Any = run_in_decoy_namespace(SWAP_BODY)
    assert result["swapped"]["status"] == "failed" and "changed since it was planned" in result["swapped"]["msg"]
    assert result["after_swap"] == ["../usr/share/zoneinfo/Asia/Tokyo", "Etc/UTC\n"]
    assert result["only_file"]["status"] == "changed", result
    assert result["only_file"]["msg"] == "set the time zone to Europe/Paris (/etc/timezone)"
    assert result["after"] == ["../usr/share/zoneinfo/Europe/Paris", "Europe/Paris\n"]
