"""The garbage collector's settings for a controller that keeps 10,000 AppWrappers.

Why: what mcad keeps (decoded objects, records, cycle entries) is freed by reference
counting; the cyclic collector is only needed for the rare reference cycle (asyncio's
and aiohttp's internals). With CPython's defaults, though, it ran all the time and cost
the event loop dearly in the scale benchmark (3 x 1,000 nodes, 10,000 AppWrappers):

- a young collection every 700 allocations: decoding one watch event of a few thousand
  objects ran several, each examining (and promoting) the objects being decoded, which
  are dropped a moment later anyway;
- a full collection whenever a quarter of the heap's size had been promoted since the
  last: every replaced AppWrapper version counts, so with 350-400k live objects one ran
  every 10-30 s, each walking the whole heap (0.1-0.2 s of CPU, up to a second of
  the event loop's time on a busy machine).

So ``tune`` raises the young threshold (a collection every 20,000 allocations: most
decoded objects are gone before one runs; the garbage waiting is bounded by that), and
``settle`` moves what is alive once the hub is listed (the modules, the nodes, the
AppWrappers listed at start) out of every later full pass (``gc.freeze``). Frozen
objects are still freed by reference counting when dropped; only a reference cycle
among them would stay, and mcad's own data makes none
(``tests/core/test_carried.py::test_cycles_leave_nothing_for_the_garbage_collector``).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000
"""Allocations (net of frees) between young collections (CPython's default: 700)."""


def tune() -> None:
    """Set the collector's thresholds for the controller's process (``mcad run``)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def settle() -> None:
    """Leave what is alive now out of later full collections: called once the hub's
    caches are listed, when most of what the controller will keep exists (collected
    first, so no garbage is frozen; once per term, a fraction of a second)."""
    gc.collect()
    gc.freeze()
