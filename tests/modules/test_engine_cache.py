"""engine_cache: a host's vLLM compile cache captured with its key, seeded only where the key matches.

Real: the module's plan and apply; the engine_cache_scan, engine_cache_facts, gpus,
vllm_servers, path_info, model_peer_read, model_peer_write and fileio probes; each "host"
an inventory name reached by the local connection with its own cache root on this machine
(as tests/modules/test_spread_model.py runs its hosts); real files hashed with sha256; the
facts probe run by a real interpreter under the launcher's path. Not real: the GPUs (the
fake NVML, one GPU whose compute capability a test sets); the vLLM installation is its
metadata only (dist-info directories and a vllm/envs.py carrying compile_factors'
ignored_factors set, as vLLM 0.32 ships it), so no vLLM code runs; the cache trees are
synthetic (the names vLLM 0.32's CPU build wrote here, bench/cache_bench.py). The log
lines of the proof table are real vLLM 0.32 CPU logs (tests/modules/vllm_logs/).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakenvml
import pytest

from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import Change, TaskContext, TaskFailed, Unchanged
from modules.caches import cachekey, seeding
from modules.caches import engine_cache as mod
from modules.caches.cachetree import MANIFEST
from modules.rollout import warmcache
from modules.rollout.fleet import SERVE_DEFAULTS, FleetHost
from modules.serving import loglines
from modules.serving.loglines import NO_CACHE_LINE, CacheProof, cache_proof

LOGS = Path(__file__).parent / "vllm_logs"
AOT = "torch_compile_cache/torch_aot_compile/92b91589f852698ae012b68432ee958c"
TREE = {
    f"{AOT}/rank_0_0/model": bytes(range(256)) * 5000,  # 1.2 MiB: a copy of more than one chunk
    f"{AOT}/inductor_cache/th/cthddkr6.so": b"\x7fELF kernel",
    f"{AOT}/inductor_cache/locks/cthddkr6.lock": b"",
    "modelinfos/vllm-model_executor-models-llama-LlamaForCausalLM.json": b'{"hash": "d032"}\n',
}
ENVS_PY = """
def compile_factors():
    ignored_factors: set[str] = {"VLLM_CACHE_ROOT", "VLLM_PORT", "VLLM_API_KEY", "VLLM_CPU_KVCACHE_SPACE"}
    return {}
"""


def install(site: Path, versions: dict[str, str]) -> None:
    """A vLLM installation as importlib.metadata sees it: dist-info per distribution."""
    for dist in site.glob("*.dist-info"):
        for f in dist.iterdir():
            f.unlink()
        dist.rmdir()
    for name, version in versions.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (site / "vllm").mkdir(exist_ok=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "envs.py").write_text(ENVS_PY)


VERSIONS = {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "triton": "3.9.0"}


def upgrade(name: str, version: str) -> Any:
    """A parameter of the key table: the hosts' installation with one distribution changed."""
    return lambda tmp, nvml, args: install(tmp / "site", {**VERSIONS, name: version})


@pytest.fixture(scope="module")
def gpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    fake = fakenvml.create(tmp_path_factory.mktemp("nvml"))
    fake.load_in_this_process()
    yield fake
    os.environ.pop("FAKE_NVML_CONFIG", None)


@pytest.fixture
def launcher(tmp_path: Path, gpus: Any) -> Path:
    """A python whose site holds the vLLM installation (the launcher serve_vllm would run)."""
    gpus.write([fakenvml.gpu(0, cc=(12, 0))])
    site = tmp_path / "site"
    install(site, VERSIONS)
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}\n')
    return python


def args_for(tmp_path: Path, launcher: Path, state: str, hosts: list[str], **extra: Any) -> dict[str, Any]:
    defaults = {k: v["default"] for k, v in mod.SCHEMA["properties"].items() if "default" in v}
    serve = {"model": str(tmp_path / "model"), "launcher": str(launcher), "dtype": "float32"}
    return {
        **defaults,
        "state": state,
        "cache_root": "/unused",
        "serve": serve,
        "hosts": hosts,
        "host_cache_root": {h: str(tmp_path / h / "cache") for h in hosts},
        "chunk_mib": 1,
        **extra,
    }


def context(host: str, planning: bool) -> TaskContext:
    def connect(name: str) -> LocalConnection:
        return LocalConnection(name)

    conn = ScopedConnection(connect(host)).planning(planning)
    return TaskContext(host, conn, {}, {"ansible_check_mode": planning}, connect=connect)


def run(args: dict[str, Any], host: str = "a") -> Any:
    change = mod.plan(context(host, True), args)
    if isinstance(change, Unchanged):
        return change
    return mod.apply(context(host, False), args, change)


def cache(tmp_path: Path, host: str) -> Path:
    return tmp_path / host / "cache"


def fill(tmp_path: Path, host: str) -> None:
    for name, data in TREE.items():
        path = cache(tmp_path, host) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def held(tmp_path: Path, host: str) -> dict[str, bytes]:
    root = cache(tmp_path, host)
    return {n: (root / n).read_bytes() for n in TREE if (root / n).is_file()}


def captured(tmp_path: Path, launcher: Path, hosts: list[str]) -> None:
    fill(tmp_path, "a")
    run(args_for(tmp_path, launcher, "captured", hosts))


def everything_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- capture ------------------------------------------------------------------------------


def test_capture_records_every_file_with_the_hosts_key(tmp_path: Path, launcher: Path) -> None:
    fill(tmp_path, "a")
    args = args_for(tmp_path, launcher, "captured", ["a"])
    result = run(args)
    manifest = json.loads((cache(tmp_path, "a") / MANIFEST).read_text())
    assert {f["name"]: f["sha256"] for f in manifest["files"]} == {
        n: hashlib.sha256(d).hexdigest() for n, d in TREE.items()
    }
    assert manifest["key"]["vllm"] == "vllm-cpu 0.32.0" and manifest["key"]["torch"] == "2.13.0+cpu"
    assert manifest["key"]["gpu_arch"] == "sm_120" and manifest["key"]["flashinfer"] == "absent"
    assert result.data["files"] == len(TREE)
    again = mod.plan(context("a", True), args)
    assert isinstance(again, Unchanged), again  # idempotent: the same tree, the same key


def test_capture_of_an_empty_root_fails_naming_the_env_var(tmp_path: Path, launcher: Path) -> None:
    with pytest.raises(TaskFailed, match="VLLM_CACHE_ROOT="):
        run(args_for(tmp_path, launcher, "captured", ["a"]))


def test_a_symlink_in_the_cache_tree_is_neither_followed_nor_captured(tmp_path: Path, launcher: Path) -> None:
    fill(tmp_path, "a")
    secret = tmp_path / "secret.txt"
    secret.write_text("not a cache file")
    (cache(tmp_path, "a") / "modelinfos" / "leak.json").symlink_to(secret)
    change = mod.plan(context("a", True), args_for(tmp_path, launcher, "captured", ["a"]))
    assert isinstance(change, Change)
    names = [f.name for f in change.payload["manifest"].files]
    assert "modelinfos/leak.json" not in names and len(names) == len(TREE)
    assert any("symlinks" in note and "leak.json" in note for note in change.payload["notes"])


# -- seed ---------------------------------------------------------------------------------


def test_seed_copies_the_cache_to_hosts_whose_key_matches_then_says_already_warm(
    tmp_path: Path, launcher: Path
) -> None:
    hosts = ["a", "b", "c"]
    captured(tmp_path, launcher, hosts)
    args = args_for(tmp_path, launcher, "seeded", hosts)
    result = run(args)
    for host in ("b", "c"):
        assert held(tmp_path, host) == TREE
        assert (cache(tmp_path, host) / MANIFEST).is_file()
    assert result.data["hosts"]["b"] == {**result.data["hosts"]["b"], "plan": "seed", "outcome": "seeded"}
    again = mod.plan(context("a", True), args)
    assert isinstance(again, Unchanged)
    assert again.msg == "b: already warm; c: already warm"


def test_check_mode_writes_nothing_and_says_per_host_where_from(tmp_path: Path, launcher: Path) -> None:
    hosts = ["a", "b"]
    captured(tmp_path, launcher, hosts)
    before = everything_under(tmp_path)
    change = mod.plan(context("a", True), args_for(tmp_path, launcher, "seeded", hosts))
    assert isinstance(change, Change)
    assert "b: seed 4 files (1.2 MiB) from a" in change.summary
    assert everything_under(tmp_path) == before
    assert not cache(tmp_path, "b").exists()


@pytest.mark.parametrize(
    ("part", "change_host", "said"),
    [
        (
            "torch",
            upgrade("torch", "2.12.0"),
            "torch 2.13.0+cpu vs 2.12.0",
        ),
        ("vllm", upgrade("vllm-cpu", "0.33.0"), "vllm vllm-cpu 0.32.0 vs"),
        ("triton", upgrade("triton", "3.8.0"), "triton 3.9.0 vs 3.8.0"),
        (
            "flashinfer",
            upgrade("flashinfer-python", "0.6.1"),
            "flashinfer absent vs 0.6.1",
        ),
        ("gpu_arch", lambda t, nvml, a: nvml.write([fakenvml.gpu(0, cc=(9, 0))]), "gpu_arch sm_120 vs sm_90"),
        ("spec_hash", lambda t, nvml, a: a["serve"].update(max_model_len=512), "spec_hash "),
        ("env", lambda t, nvml, a: a["serve"].update(env={"VLLM_USE_AOT_COMPILE": "0"}), "env VLLM_USE_AOT_COMPILE"),
    ],
)
def test_a_key_that_differs_in_any_part_is_never_seeded(
    tmp_path: Path, launcher: Path, gpus: Any, part: str, change_host: Any, said: str
) -> None:
    hosts = ["a", "b"]
    captured(tmp_path, launcher, hosts)
    args = args_for(tmp_path, launcher, "seeded", hosts)
    change_host(tmp_path, gpus, args)
    outcome = mod.plan(context("a", True), args)
    assert isinstance(outcome, Unchanged), outcome
    assert said in outcome.msg and outcome.msg.startswith("b: skip (key differs: ")
    assert outcome.data["hosts"]["b"]["plan"] == "skip"
    assert not cache(tmp_path, "b").exists()


def test_the_hosts_own_vllm_env_enters_the_key_unless_vllm_ignores_it(
    tmp_path: Path, launcher: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = ["a", "b"]
    captured(tmp_path, launcher, hosts)
    args = args_for(tmp_path, launcher, "seeded", hosts)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # in the installed vLLM's ignored_factors
    outcome = mod.plan(context("a", True), args)
    assert isinstance(outcome, Change) and "b: seed 4 files" in outcome.summary
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "0")  # a server started there inherits it
    outcome = mod.plan(context("a", True), args)
    assert isinstance(outcome, Unchanged)
    assert outcome.msg == "b: skip (key differs: env VLLM_USE_AOT_COMPILE unset vs set)"


def test_a_corrupt_source_copy_is_never_used(tmp_path: Path, launcher: Path) -> None:
    hosts = ["a", "b"]
    captured(tmp_path, launcher, hosts)
    model = cache(tmp_path, "a") / f"{AOT}/rank_0_0/model"
    model.write_bytes(b"\xff" + TREE[f"{AOT}/rank_0_0/model"][1:])  # one byte flipped after capture
    with pytest.raises(TaskFailed, match="rank_0_0/model did not verify") as failed:
        run(args_for(tmp_path, launcher, "seeded", hosts))
    assert failed.value.data["hosts"]["b"]["outcome"].startswith("not seeded")
    assert f"{AOT}/rank_0_0/model" not in held(tmp_path, "b")  # the final name never held it
    assert not (cache(tmp_path, "b") / MANIFEST).exists()


def test_a_corrupt_file_on_the_target_is_replaced(tmp_path: Path, launcher: Path) -> None:
    hosts = ["a", "b"]
    captured(tmp_path, launcher, hosts)
    fill(tmp_path, "b")
    (cache(tmp_path, "b") / f"{AOT}/inductor_cache/th/cthddkr6.so").write_bytes(b"\x7fELF tampered")
    change = mod.plan(context("a", True), args_for(tmp_path, launcher, "seeded", hosts))
    assert isinstance(change, Change) and "b: seed 1 files" in change.summary
    run(args_for(tmp_path, launcher, "seeded", hosts))
    assert held(tmp_path, "b") == TREE


def test_a_host_without_a_captured_cache_is_no_source(tmp_path: Path, launcher: Path) -> None:
    with pytest.raises(TaskFailed, match="a has no captured cache"):
        run(args_for(tmp_path, launcher, "seeded", ["a", "b"]))


def test_a_host_where_riggers_vllm_runs_this_spec_is_not_seeded(
    tmp_path: Path, launcher: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = ["a", "b"]
    captured(tmp_path, launcher, hosts)
    args = args_for(tmp_path, launcher, "seeded", hosts)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    state = tmp_path / "home" / ".local" / "state" / "rigger" / "vllm"
    state.mkdir(parents=True)
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = int(Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        record = {"name": "tiny", "pid": server.pid, "start_time": start, "boot_id": boot, "spec_hash": "old-release"}
        (state / "tiny.json").write_text(json.dumps(record))
        other_spec = mod.plan(context("a", True), args)  # the old release's server writes elsewhere
        record["spec_hash"] = seeding.served_spec_hash(context("b", True), args["serve"])
        (state / "tiny.json").write_text(json.dumps(record))
        this_spec = mod.plan(context("a", True), args)
    finally:
        server.kill()
        server.wait()
    assert isinstance(other_spec, Change) and "b: seed 4 files" in other_spec.summary
    assert isinstance(this_spec, Unchanged), this_spec
    assert f"a vLLM server of rigger's runs this spec here: tiny (pid {server.pid})" in this_spec.msg


def test_a_cache_root_that_is_not_absolute_is_refused(tmp_path: Path, launcher: Path) -> None:
    args = args_for(tmp_path, launcher, "captured", ["a"], host_cache_root={"a": "relative/cache"})
    with pytest.raises(TaskFailed, match="must be an absolute directory"):
        mod.plan(context("a", True), args)


# -- the key from facts -------------------------------------------------------------------


def test_a_host_without_gpus_is_cpu_and_unreadable_gpus_are_no_key() -> None:
    assert cachekey.gpu_arch({"backend": "none", "gpus": []}) == "cpu"
    assert cachekey.gpu_arch({"backend": "nvml", "gpus": [{"compute_capability": "9.0"}] * 2}) == "sm_90"
    with pytest.raises(cachekey.KeyUnknown, match="GPUs unreadable: NVML_ERROR"):
        cachekey.gpu_arch({"backend": "error", "gpus": [], "errors": ["NVML_ERROR_DRIVER_NOT_LOADED"]})


def test_the_installed_vllm_ignored_env_list_is_read_from_its_source() -> None:
    sys.path.insert(0, str(Path(mod.__file__).parent / "probes"))
    try:
        import engine_cache_facts  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    assert engine_cache_facts.ignored_from_source(ENVS_PY) == sorted(
        ["VLLM_CACHE_ROOT", "VLLM_PORT", "VLLM_API_KEY", "VLLM_CPU_KVCACHE_SPACE"]
    )
    assert engine_cache_facts.ignored_from_source("def other(): pass") is None


def test_a_secret_env_value_never_reaches_the_key() -> None:
    facts = {"ignored_env": [], "host_env": {}}
    key = cachekey.env_part(facts, {"VLLM_SOME_TOKEN": "s3cr3t", "OTHER": "x"})
    assert key == {"VLLM_SOME_TOKEN": hashlib.sha256(b"s3cr3t").hexdigest()}
    assert "s3cr3t" not in json.dumps(key)


# -- proof from the next start's log ------------------------------------------------------


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8", errors="replace").splitlines()


@pytest.mark.parametrize(
    ("log", "used", "said"),
    [
        # the cold start bench/cache_bench.py ran here (vLLM 0.32 CPU, empty VLLM_CACHE_ROOT)
        ("cpu_cache_cold_0.32.0.log", False, "compiled from scratch (no cache for its key), saved /tmp/"),
        # host B of bench/cache_bench.py: the seeded AOT artifact does not load on this CPU build
        (
            "cpu_cache_seeded_aot_0.32.0.log",
            False,
            "failed to load: 'function' object has no attribute 'finalize_loading'",
        ),
        # an older recorded restart on one host: the same load failure (not a seeding fault)
        ("cpu_startup_0.32.0.log", False, "failed to load: 'function' object has no attribute 'finalize_loading'"),
        # a start with --enforce-eager logs no compile line at all
        ("cpu_sigill_worker_died_0.32.0.log", False, "no compile-cache line"),
    ],
)
def test_the_next_starts_log_proves_a_hit_or_names_the_miss(log: str, used: bool, said: str) -> None:
    proof = cache_proof(_lines(log))
    assert proof.used is used and said in proof.reason, proof
    assert str(proof).startswith("cache used: " if used else "cache not used: ")
    # serve_vllm's readiness reads the log a few lines at a time: its engine_cache fact
    # (data.engine_cache of the start) says the same as the whole log read at once
    known: dict[str, Any] = {}
    for line in _lines(log):
        known = loglines.facts_from([line], known)
    assert known.get("engine_cache", str(CacheProof(False, NO_CACHE_LINE))) == str(proof)


# -- rollouts: warm on the canary, seed the later batches ---------------------------------


def test_a_rollout_captures_the_canary_and_seeds_the_later_hosts_whose_key_matches(
    tmp_path: Path, launcher: Path
) -> None:
    fill(tmp_path, "a")
    args = args_for(tmp_path, launcher, "seeded", ["a", "b", "c"])
    server = {**SERVE_DEFAULTS, **args["serve"], "state": "started"}
    canary = FleetHost("a", {**server, "port": 8001}, "a")
    same_but_port = FleetHost("b", {**server, "port": 8002}, "b")  # host_server: its own port
    other_spec = FleetHost("c", {**server, "max_model_len": 512}, "c")
    given = {"cache_root": "/unused", "host_cache_root": args["host_cache_root"]}
    record = warmcache.warm(context("a", False), given, canary, [same_but_port, other_spec])
    assert "error" not in record, record
    assert record["captured"].startswith("capture 4 files")
    assert "b: seed 4 files (1.2 MiB) from a" in record["seeded"]
    assert "c: skip (key differs: spec_hash " in record["seeded"]
    assert held(tmp_path, "b") == TREE and held(tmp_path, "c") == {}


def test_a_hit_line_wins_over_an_earlier_miss_read_whole_or_line_by_line() -> None:
    """The hit line's words are vLLM 0.32's (vllm/compilation/decorators.py); no start on the
    CPU build here logged one (its AOT artifact does not load), so the line is written here."""
    lines = [
        "(EngineCore pid=1) INFO Compiling a graph for compile range (1, 8192) takes 9.1 s",
        "(EngineCore pid=1) INFO Directly load AOT compilation from path /var/cache/vllm/torch_aot_compile/ab/model",
    ]
    known: dict[str, Any] = {}
    for line in lines:
        known = loglines.facts_from([line], known)
    assert (
        known["engine_cache"]
        == str(cache_proof(lines))
        == ("cache used: AOT compilation loaded from /var/cache/vllm/torch_aot_compile/ab/model")
    )
