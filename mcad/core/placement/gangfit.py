"""Fitting a gang on one pool of nodes: the one entry point, whatever the gang asks.

A gang that asks for a topology is fitted inside its domains
(``mcad.core.placement.domainfit``), any other anywhere on the nodes
(``mcad.core.placement.nodefit``). Everything that asks "does it fit here?" asks here:
placement, holding room for a preemptor, the head's reservation, estimates, explain.
"""

from __future__ import annotations

from mcad.core.placement.capacity import NodePool
from mcad.core.placement.domainfit import fit_gang_in_domains
from mcad.core.placement.nodefit import GangTakes, fit_pods, undone
from mcad.core.workload.demand import Demand


def fit_gang(pool: NodePool, demand: Demand, *, explain: bool = True) -> GangTakes | str:
    """Place every pod of ``demand`` on ``pool`` and apply the takes, or explain why not.

    On failure nothing stays applied and the answer is the sentence (``""`` unless
    ``explain``: the explanation costs more than the attempt). A gang that asks for a
    topology is fitted inside its domains (``mcad.core.placement.domainfit``), wherever this is
    asked: placement, holding room for a preemptor, victims, estimates.
    """
    if demand.topology is not None:
        return fit_gang_in_domains(pool, demand, explain=explain)
    return fit_pods(pool, demand, explain=explain)


def gang_fits(pool: NodePool, demand: Demand) -> bool:
    """Would every pod of ``demand`` fit on ``pool`` now? The pool is left as it was
    (the takes are given back), which costs less than fitting on a copy."""
    return undone(pool, fit_gang(pool, demand, explain=False))
