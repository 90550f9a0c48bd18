"""`python -m roundhouse worker my_env.py [more.py …] [--task-queue Q]`: serves the registered functions."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Coroutine
from typing import Any

from roundhouse.codec import ConfigError
from roundhouse.settings import DEFAULT_TASK_QUEUE, settings_from_env

LEFTOVER_TASKS_SECONDS = 2.0


def _run(main_coroutine: Coroutine[Any, Any, None]) -> None:
    """Runs the worker to its end. Tasks a user's library leaves behind (an environment's background loops, some of
    which ignore cancellation) are cancelled and given LEFTOVER_TASKS_SECONDS, then abandoned: unlike `asyncio.run`,
    which would wait for them for ever and keep a stopped worker's process alive."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main_coroutine)
    finally:
        leftover = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in leftover:
            task.cancel()
        if leftover:
            loop.run_until_complete(asyncio.wait(leftover, timeout=LEFTOVER_TASKS_SECONDS))
        loop.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m roundhouse", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="serve the functions these files register")
    worker.add_argument(
        "sources", nargs="*", help="Python files or modules that register functions (or verifiers environments)"
    )
    worker.add_argument(
        "--task-queue",
        help=f"the task queue the spec names (default: $ROUNDHOUSE_PYTHON_TASK_QUEUE, else {DEFAULT_TASK_QUEUE})",
    )
    worker.add_argument("--max-concurrent-activities", type=int, default=100)
    commands.add_parser(
        "sandbox", help="say which sandbox mode runs model-written code on this host, or why run() refuses (exit 1)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    if args.command == "sandbox":
        from roundhouse import sandbox

        mode = sandbox.isolation()
        print(f"sandbox isolation: {mode}")
        return 1 if mode.startswith(sandbox.REFUSED) else 0
    try:
        settings = settings_from_env(task_queue=args.task_queue)
    except ConfigError as err:
        print(f"roundhouse: {err}", file=sys.stderr)
        return 2
    from roundhouse.worker import end_process, serve  # the worker's imports are only needed to serve

    try:
        _run(serve(settings, args.sources, args.max_concurrent_activities))
    except (FileNotFoundError, ImportError) as err:
        print(f"roundhouse: {err}", file=sys.stderr)
        return 2
    end_process(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
