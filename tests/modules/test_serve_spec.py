"""serve_vllm's launch spec: argv for each launcher, what the spec hash covers, secrets.

Real: the spec code and serve_vllm's SCHEMA. No vLLM and no host are involved: these are
pure functions over the task's arguments and the bytes of the model's config files.
"""

from __future__ import annotations

from typing import Any

import pytest

import modules.serving.serve_vllm as serve_vllm
from engine.errors import TaskFailed
from modules.serving.spec import (
    API_KEY_VAR,
    build_argv,
    build_spec,
    config_paths,
    launcher_prefix,
    recorded_model,
    serve_prefix,
    served_name,
)
from modules.serving.specdiff import argv_lines, spec_diffs

CONFIG = {"config.json": b'{"a": 1}', "hf_quant_config.json": None}


def args(**extra: Any) -> dict[str, Any]:
    base = {k: v["default"] for k, v in serve_vllm.SCHEMA["properties"].items() if "default" in v}
    base.update({"name": "kimi", "model": "/models/kimi"})
    base.update(extra)
    return base


def test_default_launcher_is_vllm_serve_with_only_set_flags() -> None:
    argv = build_argv(args(tensor_parallel_size=8, trust_remote_code=True))
    assert argv == (
        "vllm", "serve", "/models/kimi",
        "--host", "127.0.0.1", "--port", "8000", "--tensor-parallel-size", "8",
        "--trust-remote-code",
    )  # fmt: skip


def test_python_launcher_runs_the_server_module() -> None:
    argv = build_argv(args(launcher="/opt/venv/bin/python3.11", max_model_len=256))
    assert argv[:5] == (
        "/opt/venv/bin/python3.11", "-m", "vllm.entrypoints.openai.api_server",
        "--model", "/models/kimi",
    )  # fmt: skip
    assert argv[-2:] == ("--max-model-len", "256")


def test_vllm_executable_path_runs_serve() -> None:
    assert build_argv(args(launcher="/opt/vllm/bin/vllm"))[:3] == (
        "/opt/vllm/bin/vllm",
        "serve",
        "/models/kimi",
    )


def test_all_flags_keep_vllm_names_and_extra_args_come_last() -> None:
    argv = build_argv(
        args(
            served_model_name="kimi-k2.5",
            pipeline_parallel_size=2,
            dtype="bfloat16",
            kv_cache_dtype="auto",
            gpu_memory_utilization=0.9,
            attention_backend="TRITON_MLA",
            extra_args=["--reasoning-parser", "kimi_k2"],
        )
    )
    text = " ".join(argv)
    for flag in (
        "--served-model-name kimi-k2.5",
        "--pipeline-parallel-size 2",
        "--dtype bfloat16",
        "--kv-cache-dtype auto",
        "--gpu-memory-utilization 0.9",
        "--attention-backend TRITON_MLA",
    ):
        assert flag in text
    assert argv[-2:] == ("--reasoning-parser", "kimi_k2")


SECRET_SPELLINGS = ["--api-key", "--api-key=sk-123", "--api_key", "--api_key=sk-123", "--api-ke", "--api_ke=K"]
SECRET_SPELLINGS += ["--hf-token", "--hf_token=hf_x", "--hf-tok"]


@pytest.mark.parametrize("spelling", SECRET_SPELLINGS)
def test_a_secret_option_on_the_command_line_is_refused_in_every_spelling_vllm_reads(spelling: str) -> None:
    """vLLM's parser reads underscores as dashes, `=`, and unambiguous prefixes (issue 18:
    `--api_key`, `--api_key=K`, `--api-ke` put the key in ps, the state file and the log)."""
    with pytest.raises(TaskFailed, match="api_key_env") as refused:
        build_argv(args(extra_args=[spelling, "sk-123"]))
    assert "sk-123" not in str(refused.value)


@pytest.mark.parametrize("flag", ["--api-server-count", "--enable-auto-tool-choice", "--hf-overrides", "--"])
def test_options_that_only_look_alike_pass(flag: str) -> None:
    assert flag in build_argv(args(extra_args=[flag, "1"]))


def test_hash_is_stable_and_covers_argv_env_and_config_contents() -> None:
    base = build_spec(args(), CONFIG, {}).spec_hash()
    assert build_spec(args(), CONFIG, {}).spec_hash() == base
    assert build_spec(args(port=8001), CONFIG, {}).spec_hash() != base
    assert build_spec(args(env={"NCCL_DEBUG": "INFO"}), CONFIG, {}).spec_hash() != base
    patched = {**CONFIG, "config.json": b'{"a": 2}'}
    assert build_spec(args(), patched, {}).spec_hash() != base
    quant_appears = {**CONFIG, "hf_quant_config.json": b"{}"}
    assert build_spec(args(), quant_appears, {}).spec_hash() != base


def test_api_key_changes_the_hash_but_is_never_shown() -> None:
    one = build_spec(args(api_key_env="KEY"), CONFIG, {"KEY": "sk-one"})
    two = build_spec(args(api_key_env="KEY"), CONFIG, {"KEY": "sk-two"})
    assert one.spec_hash() != two.spec_hash()
    assert one.secret_env == {API_KEY_VAR: "sk-one"}
    assert one.shown_env() == {API_KEY_VAR: "<secret>"}
    assert "sk-one" not in repr(one) + " ".join(one.argv) + one.spec_hash()


def test_missing_api_key_variable_is_a_clear_error() -> None:
    with pytest.raises(TaskFailed, match=r"'MY_KEY'.*not set"):
        build_spec(args(api_key_env="MY_KEY"), CONFIG, {})


def test_api_key_in_env_is_refused() -> None:
    with pytest.raises(TaskFailed, match="api_key_env"):
        build_spec(args(env={API_KEY_VAR: "sk"}), CONFIG, {})


def test_config_files_are_hashed_only_for_a_model_directory() -> None:
    assert config_paths("/models/kimi") == {
        "config.json": "/models/kimi/config.json",
        "hf_quant_config.json": "/models/kimi/hf_quant_config.json",
    }
    assert config_paths("nvidia/Kimi-K2.5-NVFP4") == {}


@pytest.mark.parametrize("launcher", ["vllm", "/opt/vllm/bin/vllm", "/opt/vllm/bin/python3"])
def test_the_model_is_read_back_from_a_recorded_argv_of_every_launcher(launcher: str) -> None:
    """What a rollback puts back is the model directory the previous server was launched with."""
    for prefix in (launcher_prefix(launcher, "/models/kimi"), serve_prefix(launcher, "/models/kimi")):
        argv = build_argv(args(launcher=launcher, extra_args=["--model", "/elsewhere"]), prefix)
        assert recorded_model(argv) == "/models/kimi"
    assert recorded_model(["/opt/other", "--port", "8000"]) is None


def test_served_name_defaults_to_model() -> None:
    assert served_name(args()) == "/models/kimi"
    assert served_name(args(served_model_name="kimi")) == "kimi"


def test_argv_lines_put_each_flag_with_its_value() -> None:
    lines = argv_lines(["vllm", "serve", "/m", "--port", "1", "--trust-remote-code", "--served-model-name", "a", "b"])
    assert lines == ["vllm", "serve", "/m", "--port 1", "--trust-remote-code",
                     "--served-model-name a b"]  # fmt: skip


def test_spec_diffs_show_only_what_changed() -> None:
    old = build_spec(args(max_model_len=256), CONFIG, {})
    new = build_spec(args(max_model_len=200), CONFIG, {})
    record = {"argv": list(old.argv), "env": {}, "config_sha256": dict(old.config_digests)}
    diffs = spec_diffs(record, new)
    assert [d.label for d in diffs] == ["vLLM argv"]
    assert "--max-model-len 256" in diffs[0].before
    assert "--max-model-len 200" in diffs[0].after


def test_schema_every_property_has_a_description() -> None:
    for schema in (serve_vllm.SCHEMA,):
        assert schema["additionalProperties"] is False
        for name, prop in schema["properties"].items():
            assert prop.get("description"), name
