#!/usr/bin/env python3
"""Train the byte-level BPE tokenizer of the emulator model `roundhouse/tiny-chat`.

Reproducible and offline: the training corpus is generated from a fixed seed (tiny_chat_corpus.py, from the
word lists in tiny_chat_words.py: generic English plus customer-support-ticket-style text and chat-formatted
rows), so no data set is downloaded.

    python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install tokenizers==0.23.3
    (other tokenizers versions train the same way; the byte-identical output, sha256
    1951f45a0e0e54def0aa965399296a4b8f4cde8eb3fbaf66a880d7605edf460a, was checked with 0.23.3)
    /tmp/venv-tok/bin/python train_tiny_chat_tokenizer.py [--out DIR] [--vocab-size 4096]
                                                          [--dump-corpus FILE]

Writes DIR/tokenizer.json, DIR/tokenizer_config.json, DIR/special_tokens_map.json and
DIR/generation_config.json (DIR defaults to ./tiny-chat next to this script).

Design (Qwen2-like, minus the NFC normalizer so that ANY string round-trips exactly):
  * normalizer: none
  * pre-tokenizer: Qwen2 split regex (single digits, words carry their leading
    space/punctuation byte) then ByteLevel(add_prefix_space=False, use_regex=False)
  * model: BPE over the 256-byte alphabet (every byte is in the vocab, so there is no
    unknown token and decoding(encoding(x)) == x for every x)
  * post-processor: ByteLevel (adds no BOS/EOS; chat rows get their markers from the
    chat template, EOS is appended explicitly by the caller)
  * decoder: ByteLevel
  * special tokens: <|endoftext|> (id 0, EOS/PAD), <|im_start|> (1), <|im_end|> (2)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys

from tiny_chat_corpus import corpus
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenisation pattern (the one in Qwen2/Qwen2.5/Qwen3 tokenizer.json files).
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def build_tokenizer(vocab_size: int, lines: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=SPECIAL_TOKENS,  # ids 0, 1, 2
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: lossless for any text
        max_token_length=16,
    )
    # The trainer does not split out special tokens: feed the text between them only,
    # so no merges are wasted on pieces like "<|", "im" or "|>".
    special = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))
    pieces = [p for line in lines for p in special.split(line) if p]
    tok.train_from_iterator(pieces, trainer=trainer, length=len(pieces))
    return tok


def write_configs(out: str, tok: Tokenizer) -> None:
    added = {
        str(tok.token_to_id(t)): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,  # keep decode(encode(x)) == x
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 2048,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(out, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
                "eos_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
            },
            f,
            indent=2,
        )
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w", encoding="utf-8") as f:
        # A chat turn ends with <|im_end|>; a document with <|endoftext|>.
        json.dump(
            {
                "eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")],
                "pad_token_id": tok.token_to_id("<|endoftext|>"),
                "bos_token_id": None,
            },
            f,
            indent=2,
        )
        f.write("\n")


def self_check(tok: Tokenizer) -> None:
    samples = [
        "",
        " ",
        "\n\n",
        "Hello world",
        "  leading and trailing  ",
        "I can't log in!!",
        "Refund €49.99 for order #A123456 — thanks 🙂",
        "naïve café Zürich São Paulo ü",
        "e\u0301 (decomposed)",
        "日本語のテキスト",
        "tabs\tand\r\nCRLF",
        "\u0000\u0001\u007f\ufffd",
        "<|im_start|>user\nhi<|im_end|>\n",
    ]
    for s in samples:
        ids = tok.encode(s, add_special_tokens=False).ids
        back = tok.decode(ids, skip_special_tokens=False)
        assert back == s, (s, back, ids)
    for w in ["billing", "refund", "password", "outage", "login", "shipping", "invoice", "account"]:
        for v in (w, " " + w):
            n = len(tok.encode(v, add_special_tokens=False).ids)
            assert 1 <= n <= 2, (v, n, tok.encode(v).tokens)
    for t in SPECIAL_TOKENS:
        assert tok.encode(t).ids == [tok.token_to_id(t)], t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-chat"))
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--dump-corpus", default=None, help="also write the generated corpus to this file")
    args = ap.parse_args()

    lines = list(corpus())
    if args.dump_corpus:
        with open(args.dump_corpus, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line.replace("\n", "\\n") + "\n")
    tok = build_tokenizer(args.vocab_size, lines)
    self_check(tok)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "tokenizer.json")
    # Compact JSON (one line): about half the size of the pretty-printed form.
    with open(path, "w", encoding="utf-8") as f:
        f.write(tok.to_str(pretty=False))
    write_configs(args.out, tok)

    data = open(path, "rb").read()
    print(
        json.dumps(
            {
                "tokenizer_json": path,
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "vocab_size": tok.get_vocab_size(with_added_tokens=True),
                "corpus_lines": len(lines),
                "corpus_chars": sum(len(x) for x in lines),
                "special_tokens": {t: tok.token_to_id(t) for t in SPECIAL_TOKENS},
            },
            indent=2,
            ensure_ascii=False,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
