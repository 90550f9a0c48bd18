"""A Python worker: loads the user's files (which register functions by decorator) and serves the activities."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import os
import signal
import sys
import threading
from datetime import timedelta
from pathlib import Path

from temporalio.worker import Worker

from roundhouse.activities import Activities
from roundhouse.registry import ROLES, registry
from roundhouse.settings import Settings, connect

log = logging.getLogger("roundhouse.worker")

GRACE_SECONDS = 10.0
"""After SIGTERM or SIGINT, running activities get this long to finish; then they are cancelled."""
EXIT_SECONDS = 4.0
"""What the rest of a stop may take past the grace period; past it the process exits regardless."""


def end_process(code: int) -> None:
    """Ends a stopped worker's process without interpreter finalization. Finalization would wait for ever for threads
    the user's code left running (a sync function still in `time.sleep` or a hung request), and can abort in the
    Temporal SDK's own threads (`Fatal Python error: PyGILState_Release`, temporalio/sdk-python#300)."""
    leftover = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if leftover:
        log.warning(
            "still running after the grace period: threads %s (the user's code); exiting without them", leftover
        )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _watchdog() -> None:
    """The last resort: a stop that has not ended GRACE_SECONDS + EXIT_SECONDS after the signal ends the process."""

    def expire() -> None:
        log.error(
            "the worker did not stop within %.0f s of the signal (threads: %s); exiting",
            GRACE_SECONDS + EXIT_SECONDS,
            [t.name for t in threading.enumerate()],
        )
        end_process(1)

    timer = threading.Timer(GRACE_SECONDS + EXIT_SECONDS, expire)
    timer.daemon = True
    timer.start()


def load(source: str) -> None:
    """A file (`my_env.py`) or an importable module (`my_package.rewards`); its decorators register its functions."""
    path = Path(source)
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise FileNotFoundError(f"{source}: no such file")
        # Its own directory is importable, so the file can import its neighbours.
        sys.path.insert(0, str(path.resolve().parent))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{source}: cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    else:
        importlib.import_module(source)


def _is_environment(source: str) -> bool:
    """A verifiers environment's module (it has `load_environment`): served by name, with nothing to register."""
    module = sys.modules.get(Path(source).stem) or sys.modules.get(source)
    return callable(getattr(module, "load_environment", None))


def registered_summary() -> str:
    plural = {"loss": "losses"}
    return "; ".join(f"{plural.get(role, role + 's')}: {', '.join(registry.names(role)) or '-'}" for role in ROLES)


async def serve(settings: Settings, sources: list[str], max_concurrent_activities: int = 100) -> None:
    for source in sources:
        load(source)
    if sources and not any(registry.names(role) for role in ROLES) and not any(_is_environment(s) for s in sources):
        raise SystemExit(
            f"{', '.join(sources)}: registers no reward, scorer, data policy, environment or loss "
            "(use @roundhouse.reward …)"
        )
    client = await connect(settings)
    worker = Worker(
        client,
        task_queue=settings.task_queue,
        activities=Activities().all(),
        max_concurrent_activities=max_concurrent_activities,
        graceful_shutdown_timeout=timedelta(seconds=GRACE_SECONDS),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if not stop.is_set():
            stop.set()
            _watchdog()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    async with worker:
        # One line tests and operators can wait for: the worker polls from here on.
        print(
            f"roundhouse python worker ready: task queue {settings.task_queue} on {settings.address} "
            f"({settings.namespace}); {registered_summary()}",
            flush=True,
        )
        await stop.wait()
        log.info("shutting down")
