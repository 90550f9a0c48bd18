#!/usr/bin/env python3
"""Build a tiny, randomly initialised Qwen3 model folder, offline, for SkyRL's Tinker-API server.

Nothing is downloaded: the config is written by `transformers` (Qwen3Config with tiny sizes) and the tokenizer is
the repo's emulator tokenizer (emulator/models/tiny-chat, byte-level BPE, vocab 4096), copied beside the weights so
`AutoTokenizer.from_pretrained(<folder>)` and `AutoConfig.from_pretrained(<folder>)` both work with the hub offline.

Usage: python make_tiny_qwen3.py OUT_DIR [--hidden 64] [--layers 2] [--heads 2] [--seed 0]
Needs: torch, transformers, safetensors (all in the SkyRL venv).
"""

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[3]
TOKENIZER_DIR = REPO / "emulator" / "models" / "tiny-chat"
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--intermediate", type=int, default=128)
    ap.add_argument("--max-positions", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-dir", default=str(TOKENIZER_DIR))
    args = ap.parse_args()

    t0 = time.monotonic()
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok_dir = Path(args.tokenizer_dir)
    for name in TOKENIZER_FILES:
        if (tok_dir / name).exists():
            shutil.copy(tok_dir / name, out / name)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    vocab = len(tokenizer)  # base vocab + added specials (4096 for tiny-chat)
    gen = json.loads((out / "generation_config.json").read_text()) if (out / "generation_config.json").exists() else {}
    eos = gen.get("eos_token_id", tokenizer.eos_token_id)

    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads,
        max_position_embeddings=args.max_positions,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        bos_token_id=None,
        eos_token_id=eos[0] if isinstance(eos, list) else eos,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    config.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(args.seed)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    model.save_pretrained(str(out), safe_serialization=True)
    # save_pretrained may rewrite generation_config.json; keep the tokenizer's (eos ids 2 and 0).
    if (tok_dir / "generation_config.json").exists():
        shutil.copy(tok_dir / "generation_config.json", out / "generation_config.json")
    params = sum(p.numel() for p in model.parameters())
    print(
        json.dumps(
            {
                "out_dir": str(out),
                "vocab_size": vocab,
                "params": params,
                "files": sorted(os.listdir(out)),
                "seconds": round(time.monotonic() - t0, 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
