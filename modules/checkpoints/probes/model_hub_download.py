"""Download chosen files of a hub repository at one commit into a local directory.

Runs under an interpreter that has huggingface_hub. args: {repo_id, commit, local_dir,
files: [name], force: [name], max_workers, endpoint, env, token}. Files in ``force``
are fetched again even if huggingface_hub's local metadata says they are current (they
failed verification). Interrupted downloads resume from ``.incomplete`` files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

MUTATES = True
USES = ("model_hub_list",)

import concurrent.futures


def main(args: dict[str, Any]) -> dict[str, Any]:
    call("model_hub_list", {"_prepare_only": True, **args})
    from huggingface_hub import hf_hub_download

    force = set(args.get("force") or ())

    def fetch(name: str) -> str:
        hf_hub_download(
            args["repo_id"],
            name,
            revision=args["commit"],
            local_dir=args["local_dir"],
            force_download=name in force,
            token=args.get("token") or None,
        )
        return name

    done, errors = [], {}
    workers = max(1, int(args.get("max_workers") or 8))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(fetch, name): name for name in args["files"]}
        for future in concurrent.futures.as_completed(futures):
            name = futures[future]
            try:
                done.append(future.result())
            except Exception as exc:  # reported per file; the module fails the task
                errors[name] = type(exc).__name__ + ": " + str(exc)[:500]
    return {"downloaded": sorted(done), "errors": errors}
