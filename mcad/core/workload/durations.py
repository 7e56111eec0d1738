"""Durations as people write and read them: Go's duration strings in, short figures out.

Why one module: the AppWrapper's annotations (grace periods, retry pauses) are Go
durations, and every view says how long something runs or waits; each had its own copy
of the same cut-offs, which drifted apart.
"""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
          "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d)")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration (``90s``, ``1m30s``, ``1.5h``; ``d`` for days as well).
    Raises ``ValueError`` when it is not one."""
    value = text.strip()
    if value in ("0", "+0", "-0"):
        return 0.0
    if not value or value.startswith("-"):
        raise ValueError(f"{text!r} is not a duration of zero or more (e.g. 90s, 5m, 1h30m)")
    value = value.removeprefix("+")
    total, at = 0.0, 0
    for match in _DURATION.finditer(value):
        if match.start() != at:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    if at != len(value) or at == 0:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 5m, 1h30m)")
    return total


def format_duration(seconds: float, *, coarse: bool = False) -> str:
    """``45s``, ``12m``, ``2h05m``: how long a run takes (rounded). ``coarse``, as
    kubectl shows an age (whole units, cut off): ``45s``, ``12m``, ``5h``, ``3d``."""
    whole = int(seconds) if coarse else round(seconds)
    if whole < 120:
        return f"{whole}s"
    if whole < 7200:
        return f"{whole // 60}m"
    if not coarse:
        return f"{whole // 3600}h{(whole % 3600) // 60:02d}m"
    if whole < 172800:
        return f"{whole // 3600}h"
    return f"{whole // 86400}d"
