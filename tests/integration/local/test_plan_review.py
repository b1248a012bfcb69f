"""The review of a saved plan: the Kimi playbook's plan in markdown and html, and the html
report opened in a real headless browser.

Real: the rigger CLI, fact gathering through the real nvidia-ml-py, every module's plan,
a copy of the Kimi-K2.5-NVFP4 config files, processes (started here; check mode signals
none), a private mount namespace whose /dev/shm is a fresh tmpfs holding segments no
process maps, Debian's chromium driven by Playwright (scripts/ci/setup_browser.sh).
Not real: the GPUs (tests/fakes/fake_nvml lists our processes as holding 40 GB each).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakenvml
import pytest
from gpudecoys import gpu_holder_argv, wait_holding
from ports import free_port

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "tests" / "fixtures" / "kimi-k2.5-nvfp4"
CHROMIUM = Path("/usr/bin/chromium")
SEGMENTS = ("psm_0badc0de", "psm_5eed1e55", "sem.mp-leaked1")
MAKE_SEGMENTS = "; ".join(
    f"head -c 65536 /dev/zero > /dev/shm/{name} && touch -d '2 hours ago' /dev/shm/{name}" for name in SEGMENTS
)


@pytest.fixture
def orphans() -> Iterator[list[int]]:
    """Two 'orphaned vLLM' processes, each in its own session, as a crash leaves them."""
    # proven holders, as on a real host: the decoy /dev/nvidia0 open (gpudecoys)
    procs = [
        subprocess.Popen(
            gpu_holder_argv(["bash", "-c", f"exec -a {name} sleep 600"]),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        for name in ("VLLM::EngineCore", "VLLM::Worker_TP0")
    ]
    yield [wait_holding(p.pid) for p in procs]
    for proc in procs:
        proc.kill()
        proc.wait()


def kimi_plan(digest: Any, tmp_path: Path, orphans: list[int]) -> Path:
    fake = fakenvml.create(tmp_path / "nvml")
    fake.eight_gpus([fakenvml.holder(pid, n, 40_000) for n, pid in enumerate(orphans)])
    model = tmp_path / "Kimi-K2.5-NVFP4"
    shutil.copytree(FIXTURE, model)
    before = digest(model)
    out = tmp_path / "kimi.json"
    extra = json.dumps({"model_dir": str(model), "download_model": False, "serve_port": free_port()})
    plan = [
        sys.executable,
        "-m",
        "engine.cli",
        "plan",
        "playbooks/kimi_k25_nvfp4.yml",
        "-i",
        "inventory/local.yml",
        "-e",
        extra,
        "-o",
        str(out),
    ]
    script = (
        "mount -t tmpfs -o size=16m,mode=1777 rigger-plan-shm /dev/shm && "
        f"{MAKE_SEGMENTS} && exec {' '.join(repr(a) for a in plan)}"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        cwd=REPO,
        env={**fake.env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert digest(model) == before, "planning touched nothing"
    return out


def review(rigger: Any, plan: Path, fmt: str) -> str:
    done = rigger("show", str(plan), "--format", fmt)
    assert done.rc == 0, done.stderr
    return str(done.stdout)


def test_the_kimi_plan_shows_processes_segments_json_keys_and_argv(
    rigger: Any, digest: Any, tmp_path: Path, orphans: list[int]
) -> None:
    plan = kimi_plan(digest, tmp_path, orphans)
    assert all(Path(f"/proc/{pid}").exists() for pid in orphans), "check mode signalled nothing"
    model = tmp_path / "Kimi-K2.5-NVFP4"
    for fmt in ("markdown", "html"):
        text = review(rigger, plan, fmt)
        for pid in orphans:
            assert f"pid {pid} user root command &#x27;VLLM::" in text or f"pid {pid} user root command 'VLLM::" in text
        for segment in SEGMENTS:
            assert f"- {segment}" in text, (fmt, segment)
        assert f"{model}/config.json" in text and "- quantization_config.kv_cache_scheme" in text
        assert f"{model}/hf_quant_config.json" in text and "- quantization.kv_cache_quant_algo" in text
        for flag in ("+ vllm", "+ serve", f"+ {model}", "+ --tensor-parallel-size 8", "+ --reasoning-parser kimi_k2"):
            assert flag in text, (fmt, flag)
    assert len(review(rigger, plan, "markdown")) < 60_000, "fits a pull-request comment"


def three_host_plan(rigger: Any, tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "model")
    (tmp_path / "app.conf").write_text("port=1\n")
    (tmp_path / "done.conf").write_text("port=2\n")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars: {ansible_connection: local}\n  hosts:\n"
        f"    gpu1: {{}}\n    gpu2: {{}}\n    gpu3: {{app_conf: {tmp_path}/done.conf, model_dir: {tmp_path}/none}}\n"
    )
    book = tmp_path / "site.yml"
    book.write_text(
        textwrap.dedent(
            f"""\
            - hosts: all
              gather_facts: false
              tasks:
                - name: app config
                  write_file:
                    path: "{{{{ app_conf | default('{tmp_path}/app.conf') }}}}"
                    content: "port=2\\n"
                - name: FP8 KV removed
                  patch_quant_config:
                    path: "{{{{ model_dir | default('{tmp_path}/model') }}}}"
                    kv_cache_dtype: auto
                  when: model_dir is not defined
            """
        )
    )
    out = tmp_path / "plan.json"
    done = rigger("plan", str(book), "-i", str(tmp_path / "hosts.yml"), "-o", str(out))
    assert done.rc == 0, done.stdout + done.stderr
    return out


def test_the_html_report_renders_in_a_real_browser(rigger: Any, tmp_path: Path) -> None:
    assert CHROMIUM.exists(), "Debian's chromium is missing: run scripts/ci/setup_browser.sh"
    from playwright.sync_api import sync_playwright

    report = tmp_path / "plan.html"
    report.write_text(review(rigger, three_host_plan(rigger, tmp_path), "html"))
    problems: list[str] = []
    requested: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("console", lambda msg: problems.append(msg.text) if msg.type in ("error", "warning") else None)
        page.on("pageerror", lambda exc: problems.append(str(exc)))
        page.on("request", lambda request: requested.append(request.url))
        page.goto(report.as_uri())
        groups = page.locator("#changes .group")
        texts = [groups.nth(n).inner_text() for n in range(groups.count())]
        rows = page.locator("#matrix tr td.hosts")
        matrix = [rows.nth(n).inner_text() for n in range(rows.count())]
        summary = page.locator(".summary").inner_text()
        page.screenshot(path=str(tmp_path / "plan.png"), full_page=True)
        browser.close()
    shutil.copy(tmp_path / "plan.png", Path("/tmp") / "rigger-plan-report.png")
    assert not problems, problems
    assert requested == [report.as_uri()], f"the report fetched something: {requested}"
    assert "3 hosts: 4 changes pending on 2 hosts, 1 host with nothing to change" in summary.replace("\n", " ")
    grouped = [t for t in texts if t.startswith("2 hosts (gpu1, gpu2)")]
    assert any("quantization_config.kv_cache_scheme" in t for t in grouped), texts
    assert any("+ port=2" in t for t in grouped), texts
    assert matrix == ["2 hosts (gpu1, gpu2)", "1 host (gpu3)"], "alike hosts share a matrix row"


def fleet_kimi_plan(tmp_path: Path, count: int) -> Path:
    """The Kimi playbook planned for ``count`` alike hosts (local connection, fake GPUs, a
    private /dev/shm), each with its own checkpoint copy and port: what differs per host is
    a path and a port."""
    fake = fakenvml.create(tmp_path / "nvml")
    fake.eight_gpus([])
    hosts = {}
    for n in range(1, count + 1):
        model = tmp_path / f"gpu{n:02}" / "Kimi-K2.5-NVFP4"
        shutil.copytree(FIXTURE, model)
        hosts[f"gpu{n:02}"] = {
            "ansible_connection": "local",
            "kimi_model_dir": str(model),
            "kimi_serve_port": 18000 + n,
            "kimi_vllm_launcher": "vllm",
            "kimi_vllm_python": "python3",
        }
    inventory = tmp_path / "fleet.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    out = tmp_path / "fleet-plan.json"
    extra = json.dumps({"download_model": False, "install_vllm": False})
    plan = [sys.executable, "-m", "engine.cli", "plan", "playbooks/kimi_k25_nvfp4.yml", "-i", str(inventory),
            "-e", extra, "-o", str(out)]  # fmt: skip
    # a private /dev/shm with the same leaked segments for every plan: the same groups
    script = (
        "mount -t tmpfs -o size=2g,mode=1777 rigger-plan-shm /dev/shm && "
        f"{MAKE_SEGMENTS} && exec {' '.join(repr(a) for a in plan)}"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        cwd=REPO, env={**fake.env(), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return out


def page_height(html_file: Path, screenshot: Path) -> tuple[int, str]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(html_file.as_uri())
        height = int(page.evaluate("document.documentElement.scrollHeight"))
        above_fold = str(page.evaluate("document.elementFromPoint(600, 880).closest('section,table,h2,p').innerText"))
        page.screenshot(path=str(screenshot), full_page=True)
        browser.close()
    return height, above_fold


def test_the_fleet_review_is_as_tall_for_8_hosts_as_for_3_plus_their_rows(rigger: Any, tmp_path: Path) -> None:
    """The html review of the Kimi plan for 3 and for 8 alike hosts, measured in Debian's
    chromium: the matrix puts alike hosts in one row and each change is shown once, so 8
    hosts add only their rows of the per-host tables (a path and a port each)."""
    assert CHROMIUM.exists(), "Debian's chromium is missing: run scripts/ci/setup_browser.sh"
    heights, tables = {}, {}
    for count in (3, 8):
        where = tmp_path / f"fleet{count}"
        where.mkdir()
        plan = fleet_kimi_plan(where, count)
        text = review(rigger, plan, "html")
        (where / "plan.html").write_text(text)
        tables[count] = text.count('<table class="per-host">')
        heights[count], _ = page_height(where / "plan.html", Path("/tmp") / f"rigger-kimi-review-{count}.png")
        markdown_review = review(rigger, plan, "markdown")
        assert "| host | port | path |" in markdown_review, "the port and path that differ, per host"
    print(f"html review height: 3 hosts {heights[3]} px, 8 hosts {heights[8]} px")
    row_px = 30
    assert tables[8] == tables[3], "8 alike hosts: as many change groups as 3"
    assert heights[8] <= heights[3] + tables[8] * 5 * row_px, heights
