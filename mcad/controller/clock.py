"""The one place the controller reads the time; the core gets it as ``now``.

``utcnow`` reads the wall clock (timestamps go into status, and another replica must
read them the same way). Tests that fast-forward the event loop's clock (looptime)
install ``loop_clock()`` with ``use``, so deadlines computed from ``utcnow`` and timers
armed on the loop move together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta


def _wall() -> datetime:
    return datetime.now(UTC)


_source: Callable[[], datetime] = _wall


def utcnow() -> datetime:
    return _source()


def use(source: Callable[[], datetime] | None) -> None:
    """Read the time from ``source`` from now on (None: the wall clock again)."""
    global _source  # noqa: PLW0603 - the one switch tests flip
    _source = source or _wall


def loop_clock() -> Callable[[], datetime]:
    """A clock that moves with the running event loop's time, from the wall time now."""
    loop = asyncio.get_running_loop()
    start, anchor = _wall(), loop.time()
    return lambda: start + timedelta(seconds=loop.time() - anchor)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
