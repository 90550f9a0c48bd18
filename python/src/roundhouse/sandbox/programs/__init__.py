"""The programs the sandbox runs in a bare interpreter (``-I -S``), kept as files so that ruff and mypy check them.

Each is read once, when roundhouse.sandbox is imported, and handed to the interpreter as text (``-c``, or as the
program's code): a sandboxed program that can write to the installed package changes none of a running worker's.
"""

from __future__ import annotations

import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def source(name: str) -> str:
    """The text of `<name>.py` in this folder. A missing file raises: the sandbox never runs without its supervisor."""
    with open(os.path.join(_HERE, f"{name}.py"), encoding="utf-8") as file:
        return file.read()
