"""serve_vllm's secret-option check agrees with the installed vLLM's own parser.

Real: vLLM CPU's argument parser (`.venv-vllm`: make_arg_parser(FlexibleArgumentParser()),
the one `vllm serve` uses), asked in a subprocess which dest each spelling lands in.
Nothing is faked. Every spelling vLLM reads as --api-key or --hf-token must be one that
modules/serving/spec.secret_option refuses (the other way round the check is stricter: it
refuses any prefix, even one vLLM finds ambiguous).
"""

from __future__ import annotations

import json
import subprocess

from vllmkit import require_vllm

from modules.serving.spec import secret_option

ORACLE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
found = {}
for spelling in json.loads(sys.argv[1]):
    item = spelling if "=" in spelling else spelling + "=SECRET"
    try:
        args = parser.parse_args(["--model", "m", item])  # parse_args: where vLLM rewrites _ to -
    except SystemExit:
        found[spelling] = "error"
        continue
    found[spelling] = [d for d in ("api_key", "hf_token") if getattr(args, d, None) not in (None, False)]
print(json.dumps(found))
"""

SPELLINGS = [
    "--api-key", "--api_key", "--api-ke", "--api_ke", "--api-k", "--api-", "--api_", "--api",
    "--hf-token", "--hf_token", "--hf-tok", "--hf-t", "--hf_t", "--hf",
    "--api-key=K", "--api_key=K", "--api-ke=K", "--hf_tok=T",
    "--api-server-count", "--hf-overrides", "--host",
]  # fmt: skip


def test_every_spelling_vllm_reads_as_a_secret_is_refused() -> None:
    python = require_vllm()
    run = subprocess.run(
        [str(python), "-c", ORACLE, json.dumps(SPELLINGS)], capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    verdicts = json.loads(run.stdout.strip().splitlines()[-1])
    read_as_secret = [s for s, dests in verdicts.items() if dests not in ("error", [])]
    assert {"--api_key", "--api-ke", "--api_key=K", "--hf_tok=T"} <= set(read_as_secret), verdicts
    missed = [s for s in read_as_secret if secret_option(s) is None]
    assert missed == [], f"vLLM reads these as a secret option, the check lets them through: {missed}"
    assert secret_option("--api-server-count") is None and secret_option("--host") is None
