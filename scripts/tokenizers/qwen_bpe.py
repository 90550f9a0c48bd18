"""Qwen's tiktoken ranks as a Hugging Face byte-level BPE: the conversion build-qwen-tokenizers.py runs.

Standard library only. `tokenizer_json` recovers merges from the ranks (see build-qwen-tokenizers.py's docstring);
`tokenizer_config` writes the matching tokenizer_config.json.
"""

from __future__ import annotations

import base64

# Added tokens that Qwen's tokenizer_config.json marks "special": false (decoding with skip_special_tokens keeps them).
NOT_SPECIAL = {
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
}


def byte_to_unicode():
    """GPT-2's reversible map of bytes to printable characters (what ByteLevel pre-tokenizers emit)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=False)}


def load_ranks(data: bytes):
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}


def split_below(ranks, token: bytes, max_rank: int):
    """tiktoken's BPE of `token` using only ranks below max_rank (lowest rank first, leftmost on ties)."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best = None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < max_rank and (best is None or rank < best[1]):
                best = (i, rank)
        if best is None:
            break
        i = best[0]
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts


def tokenizer_json(ranks, pattern: str, added: list[str]):
    to_unicode = byte_to_unicode()
    text = lambda b: "".join(to_unicode[x] for x in b)  # noqa: E731
    ordered = sorted(ranks.items(), key=lambda kv: kv[1])
    merges, unreachable = [], 0
    for token, rank in ordered:
        if len(token) == 1:
            continue
        parts = split_below(ranks, token, rank)
        if len(parts) == 2:
            merges.append(f"{text(parts[0])} {text(parts[1])}")
        else:
            unreachable += 1
    first = len(ranks)
    byte_level = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": first + i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": t not in NOT_SPECIAL,
            }
            for i, t in enumerate(added)
        ],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", **byte_level},
            ],
        },
        "post_processor": {"type": "ByteLevel", **byte_level},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            # tiktoken encodes a piece that is itself a token as that token, whatever the merges would reach.
            "ignore_merges": True,
            "vocab": {text(token): rank for token, rank in ordered},
            "merges": merges,
        },
    }, unreachable


def tokenizer_config(added: list[str], first_id: int, chat_template: str, max_length: int):
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(first_id + i): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": t not in NOT_SPECIAL,
            }
            for i, t in enumerate(added)
        },
        "additional_special_tokens": [t for t in added if t not in NOT_SPECIAL and t != "<|endoftext|>"],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": max_length,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
