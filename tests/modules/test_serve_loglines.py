"""The readiness watch knows the field's log lines: fatal ones name a cause and fix, fact
lines are recorded (issue 32).

Real: the parsers, the readiness wait, and log lines in the wording their public sources
give (vllm_logs/field_2026_fatal.txt names the source above each line;
vllm_logs/field_2026_start_facts.sources names each line's source). Not real: the host in
the wait test is a RecordedHost replaying probe answers built from those lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_serve_readiness import CPU_LOG, answer, replay, run_wait

from engine.connection.local import LocalConnection
from engine.module_api import ScopedConnection
from modules.serving import loglines
from modules.serving import session as sessions
from modules.serving.readiness import fatal_line, hint_for

LOGS = Path(__file__).parent / "vllm_logs"
START = (LOGS / "field_2026_start_facts.log").read_text().splitlines()


def fatal_cases() -> list[tuple[str, str, str]]:
    cases, header = [], None
    for line in (LOGS / "field_2026_fatal.txt").read_text().splitlines():
        if line.startswith("## "):
            header = line[3:]
        elif line and not line.startswith("#") and header:
            cause, source = (part.strip() for part in header.split("|", 1))
            cases.append((cause, source, line))
    return cases


FATAL = fatal_cases()


def test_the_recorded_fatal_file_has_every_cause() -> None:
    named = {cause for cause, _, _ in FATAL}
    assert {c.name for c in loglines.CAUSES} - {"cuda-out-of-memory", "shm-full"} <= named
    assert "no-valid-attention-backend" in named


@pytest.mark.parametrize(("cause", "source", "line"), FATAL, ids=[f"{c} ({s})" for c, s, _ in FATAL])
def test_each_fatal_line_fails_the_start_with_its_named_cause(cause: str, source: str, line: str) -> None:
    quoted = fatal_line([*CPU_LOG[:20], line])
    assert quoted and line.strip().startswith(quoted.removesuffix("..."))  # long lines are cut
    told = hint_for([line])
    assert told is not None and told.startswith(f"{cause}: "), told
    assert "fix" in told


def test_no_valid_backend_names_each_backends_reason_and_the_fix_for_it() -> None:
    sm120_fp8 = next(line for cause, source, line in FATAL if "#35577" in source)
    told = loglines.explain([sm120_fp8])
    assert told is not None
    assert "TRITON_MLA: kv_cache_dtype not supported" in told
    assert "FLASH_ATTN_MLA: compute capability not supported" in told
    assert "PR #34597" in told and "patch_quant_config" in told
    sparse = next(line for cause, source, line in FATAL if "#31936" in source)
    told = loglines.explain([sparse])
    assert told is not None and "TRITON_MLA: sparse not supported" in told and "SM120 sparse backend" in told


def test_fact_lines_of_a_start_are_recorded() -> None:
    facts = loglines.facts_from(START)
    assert facts == {
        "env_attention_backend_deprecated": True,
        "attention_backend": "TRITON_MLA",
        "custom_allreduce_disabled": True,
        "symm_mem_unsupported": True,
        "moe_backend": "FLASHINFER_B12X",
        "aot_compile_cache_hit": True,
        "engine_cache": "cache used: AOT compilation loaded from "
        "/var/cache/vllm/torch_compile_cache/torch_aot_compile/3f1c0a/rank_0_0/model",
        "flashinfer_autotune_cache": "/var/cache/vllm/flashinfer_autotune_cache/0.6.18/sm120/9a7e/configs.json",
        "autotuner_loaded_configs": 412,
        "kv_cache_tokens": 512192,
        "max_concurrency": 7.82,
    }
    # none of them is fatal: a start that logs them comes up
    assert fatal_line(START) is None


def test_the_recorded_cpu_start_gives_its_kv_cache_size() -> None:
    """vLLM CPU 0.32.0, recorded here (vllm_logs/cpu_startup_0.32.0.log)."""
    facts = loglines.facts_from(CPU_LOG)
    assert facts.pop("engine_cache").startswith("cache not used: the cache at ")  # a restart: its AOT load failed
    assert facts == {"kv_cache_tokens": 551424, "max_concurrency": 2154.0}


def test_marlin_fp4_fallback_is_a_fact_and_a_warning() -> None:
    # vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py (logger.warning_once)
    line = (
        "(Worker_TP0 pid=7) WARNING 11-02 09:00:09 [marlin_utils_fp4.py:204] Your GPU does not have native "
        "support for FP4 computation but FP4 quantization is being used. Weight-only FP4 compression will be "
        "used leveraging the Marlin kernel. This may degrade performance for compute-heavy workloads."
    )
    facts = loglines.facts_from([line])
    assert facts == {"fp4_marlin_fallback": True}
    assert any("Marlin fallback" in w for w in loglines.warnings_for(facts))
    assert fatal_line([line]) is None


def test_kv_cache_far_below_the_prediction_warns_with_both_numbers() -> None:
    told = loglines.kv_capacity_warning(512_192, 2_265_512)
    assert told is not None and "512,192" in told and "2,265,512" in told
    assert loglines.kv_capacity_warning(1_500_000, 2_265_512) is None  # not far below
    assert loglines.kv_capacity_warning(512_192, None) is None  # nothing predicted
    facts = loglines.facts_from(START)
    assert any("512,192" in w for w in loglines.warnings_for(facts, 2_265_512))


def test_the_wait_records_the_facts_and_the_summary_names_them() -> None:
    conn = replay(
        [
            answer("\n".join(START[:5]) + "\n"),
            answer("\n".join(START[5:]) + "\n", stage="health"),
            answer("", stage="models"),
            answer("", stage="completion"),
        ]
    )
    ready, _ = run_wait(conn)
    assert ready.ready
    assert ready.log_facts["kv_cache_tokens"] == 512192
    assert ready.log_facts["attention_backend"] == "TRITON_MLA"
    assert loglines.summary(ready.log_facts) == (
        " (KV cache 512,192 tokens, attention TRITON_MLA, MoE FLASHINFER_B12X, custom all-reduce off (PCIe), "
        "compile/autotune cache reused)"
    )


def test_a_fatal_start_carries_the_named_cause_in_its_failure() -> None:
    line = next(line for cause, _, line in FATAL if cause == "triton-mla-fp8-kv")
    conn = replay([answer("\n".join(START[:2]) + "\n"), answer(line + "\n")])
    ready, _ = run_wait(conn)
    assert not ready.ready
    message = ready.failure_message("/var/log/vllm.log")
    assert "hint: triton-mla-fp8-kv: " in message and "PR #34597" in message
    assert ready.log_facts["attention_backend"] == "TRITON_MLA"


def test_the_facts_are_kept_in_the_state_file_once_the_server_is_ready(tmp_path: Path) -> None:
    """Real: session.record_members writing the state file through the local connection (as
    serve_vllm does once readiness passed). Not real: the status handed to it is built
    here (a live leader and one member), not read from running processes."""
    state = tmp_path / "tiny.json"
    record = {"pid": 7100, "start_time": 123456, "argv": ["python3"], "spec_hash": "abc"}
    state.write_text(json.dumps(record))
    status = sessions.ServerStatus(record, True, ({"pid": 7101, "start_time": 123457},), 200, None)
    facts = loglines.facts_from(START)
    sessions.record_members(ScopedConnection(LocalConnection()), str(state), status, facts)
    written = json.loads(state.read_text())
    assert written["log_facts"] == facts and written["log_facts"]["kv_cache_tokens"] == 512192
    assert written["members"] == [{"pid": 7101, "start_time": 123457}]
    assert {k: written[k] for k in record} == record
    assert state.stat().st_mode & 0o777 == 0o600
