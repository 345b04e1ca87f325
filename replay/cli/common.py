"""What the subcommands share: the event loop and option parsing helpers."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from replay.errors import ReplayInputError

T = TypeVar("T")


def int_set(text: str) -> frozenset[int]:
    try:
        return frozenset(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ReplayInputError(f"expected comma-separated integers, got {text!r}") from None


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed (chosen only here, the entry point).
    asyncio is imported here: ``replay workload`` needs it only for reverse DNS."""
    import asyncio

    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)
