"""patch_quant_config on JSON that a naive parse/dump would change: refuse or round-trip.

Real: the module, its probes, LocalConnection writing real files in a temp dir, Python's
json parser. Nothing is faked.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
from test_patch_quant_config import args_for, make_ctx, planning, run_task

from engine.module_api import TaskFailed, Unchanged
from modules.checkpoints import patch_quant_config as mod


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


DUPLICATED = """{
  "quantization_config": {"quant_method": "modelopt", "kv_cache_scheme": "fp8"},
  "architectures": ["DeepseekV3ForCausalLM"],
  "quantization_config": {"quant_method": "fp8"}
}
"""


@pytest.mark.parametrize(
    "text, key",
    [
        (DUPLICATED, "quantization_config"),
        ('{"text_config": {"a": 1, "b": 2, "a": 3}}\n', "a"),
        ('[{"x": 1}, {"x": 1, "x": 1}]\n', "x"),
    ],
    ids=["top-level", "nested", "in-a-list"],
)
def test_a_duplicate_key_is_refused_naming_key_and_file(tmp_path: Path, text: str, key: str) -> None:
    """Fails today: json kept the last object and the first one's keys were lost on write."""
    (tmp_path / "config.json").write_text(text)
    before = digest(tmp_path)
    with pytest.raises(TaskFailed) as caught:
        run_task(tmp_path, kv_cache_dtype="auto")
    message = str(caught.value)
    assert f"has the key {key!r} twice" in message and str(tmp_path / "config.json") in message
    assert "left untouched" in message
    assert digest(tmp_path) == before


SPECIAL = """{
  "quantization_config": {"kv_cache_scheme": "fp8", "scale": NaN},
  "rope_scaling": {"factor": Infinity, "floor": -Infinity},
  "vocab_size": 340282366920938463463374607431768211457,
  "seed": -18446744073709551617
}
"""


def test_nan_infinity_and_big_integers_round_trip_and_the_patch_converges(tmp_path: Path) -> None:
    """Fails today: NaN != NaN, so every run planned '~ quantization_config.scale' again."""
    config = tmp_path / "config.json"
    config.write_text(SPECIAL)
    result = run_task(tmp_path, kv_cache_dtype="auto", set={"config.json": {"rope_scaling.nan": math.nan}})
    assert result is not None and result.changed
    text = config.read_text()
    assert '"scale": NaN' in text and '"factor": Infinity' in text and '"floor": -Infinity' in text
    assert "340282366920938463463374607431768211457" in text and "-18446744073709551617" in text
    assert '"nan": NaN' in text and "kv_cache_scheme" not in text
    again = mod.plan(
        planning(make_ctx()),
        args_for(tmp_path, kv_cache_dtype="auto", set={"config.json": {"rope_scaling.nan": math.nan}}),
    )
    assert isinstance(again, Unchanged), again


@pytest.mark.parametrize(
    "number, why",
    [("1e400", "too large for a double"), ("-2.5E+999", "too large for a double"), ("9" * 5000, "digits")],
    ids=["1e400", "-2.5E+999", "5000-digit-integer"],
)
def test_a_number_that_cannot_be_written_back_as_read_is_refused(tmp_path: Path, number: str, why: str) -> None:
    """Fails today: 1e400 came back as Infinity; a 5000-digit integer crashed the task."""
    (tmp_path / "config.json").write_text(
        '{"quantization_config": {"kv_cache_scheme": "fp8"}, "limit": ' + number + "}\n"
    )
    before = digest(tmp_path)
    with pytest.raises(TaskFailed, match=why) as caught:
        run_task(tmp_path, kv_cache_dtype="auto")
    assert str(tmp_path / "config.json") in str(caught.value) and "left untouched" in str(caught.value)
    assert digest(tmp_path) == before
