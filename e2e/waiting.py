"""Wait-until helpers: tests poll for a condition instead of sleeping.

``wait_until`` returns as soon as the probe yields a truthy value and fails with
the last value seen when the time is up. ``holds_for`` is its opposite, for the
few behaviours that are about something *not* happening (a gang that must stay
unscheduled): the probe must stay truthy for the whole window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_until(probe: Callable[[], Awaitable[T]], *, within: float, what: str,
                     interval: float = 0.2) -> T:
    deadline = time.monotonic() + within
    last: T | None = None
    while True:
        last = await probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}; last: {last!r}")
        await asyncio.sleep(interval)


async def holds_for(probe: Callable[[], Awaitable[object]], *, seconds: float, what: str,
                    interval: float = 0.25) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = await probe()
        if not value:
            raise AssertionError(f"expected {what} for {seconds}s; it stopped holding: {value!r}")
        await asyncio.sleep(interval)
