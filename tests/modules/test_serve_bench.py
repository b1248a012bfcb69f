"""check_serving's figures from per-request results (pure arithmetic, no server).

Real: the summary code and check_serving's SCHEMA. The per-request results are written
out by hand in the shape the vllm_bench probe answers.
"""

from __future__ import annotations

import modules.serving.check_serving as check_serving
from modules.serving.bench import percentile, summarize


def ok(ttft_s: float, tokens: int, latency_s: float = 1.0) -> dict[str, object]:
    return {"ok": True, "ttft_s": ttft_s, "latency_s": latency_s, "output_tokens": tokens,
            "error": None}  # fmt: skip


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 0.5) == 10.0
    assert percentile(values, 0.95) == 19.0
    assert percentile([3.0], 0.95) == 3.0
    assert percentile([], 0.5) is None


def test_tokens_per_second_is_all_output_tokens_over_wall_time() -> None:
    summary = summarize([ok(0.1, 32), ok(0.3, 32), ok(0.2, 64)], wall_s=2.0)
    assert summary.output_tokens == 128
    assert summary.tokens_per_s == 64.0
    assert summary.ttft_p50_s == 0.2
    assert summary.ttft_p95_s == 0.3
    assert summary.errors == 0


def test_errors_are_counted_and_quoted_and_add_no_tokens() -> None:
    failed = {"ok": False, "ttft_s": None, "latency_s": 0.1, "output_tokens": 0,
              "error": "HTTP 401: unauthorized"}  # fmt: skip
    summary = summarize([ok(0.1, 10), failed], wall_s=1.0)
    assert summary.errors == 1
    assert summary.output_tokens == 10
    assert summary.first_errors == ("HTTP 401: unauthorized",)
    assert summary.as_data()["errors"] == 1


def test_check_serving_is_skipped_in_check_mode_and_documents_every_arg() -> None:
    assert check_serving.CHECK_MODE == "measure"  # skipped in check mode, never a planned change
    for name, prop in check_serving.SCHEMA["properties"].items():
        assert prop.get("description"), name
