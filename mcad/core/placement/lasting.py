"""A cause that waiting will not remove: a gang that fits no cluster it may use, even with
nothing else running there.

Why a part of its own: the cycle checks quota before room, so such a gang, short of
quota as well, was told ``QuotaExceeded``, a reason that suggests its turn will come;
its real, lasting cause showed only in ``mcad explain``. The queue, the web view and the
status say what the cycle says, so the cycle must lead with the lasting cause: when the
quota is short but could hold it, and no cluster could ever hold it, it waits
``InsufficientCapacity`` with the sentence saying why it never fits (and no one is
preempted for it). An elastic AppWrapper is left out: it may start smaller.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcad.core.placement.capacity import NodePool
from mcad.core.placement.clusters import ClusterBoard
from mcad.core.placement.gangfit import fit_gang
from mcad.core.workload.demand import Demand
from mcad.core.workload.quantity import format_quantity

NEVER_FITS_ROOM = "it does not fit even with nothing else running"


def never_fits(board: ClusterBoard, demand: Demand, candidates: Sequence[int]) -> str | None:
    """Why ``demand`` fits none of ``candidates`` even empty, as a sentence ending with
    ``NEVER_FITS_ROOM``; None when one of them could hold it."""
    if not candidates or board.fits_when_empty(demand, candidates):
        return None
    for name, amount in sorted(demand.total.items()):
        best = max(candidates, key=lambda i: (board.allocatable(i).get(name, 0), -i))
        most = board.allocatable(best).get(name, 0)
        if most < amount:
            return (f"it needs {format_quantity(amount, resource=name)} {name} in all, and "
                    f"the largest cluster it may use, {board.clusters[best].name}, has "
                    f"{format_quantity(most, resource=name)}; {NEVER_FITS_ROOM}")
    first = candidates[0]
    cluster = board.clusters[first]
    why = fit_gang(NodePool.empty(cluster.nodes, cluster.topology), demand, explain=True)
    what = why if isinstance(why, str) and why else "its pods do not fit its nodes"
    others = f" (nor on the {len(candidates) - 1} other clusters it may use)" \
        if len(candidates) > 1 else ""
    return f"{cluster.name}: {what}{others}; {NEVER_FITS_ROOM}"
