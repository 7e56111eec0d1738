"""Demands' shapes and totals are interned (``mcad.core.workload.demand``): equal ones are one
object while any demand holds them, and none is kept once no demand does."""

from __future__ import annotations

import gc

from mcad.core.workload import demand as demand_module
from mcad.core.workload.demand import Demand, PodSet, Shape
from mcad.core.workload.resources import ResourceList


def _demand(gpus: int, count: int = 2) -> Demand:
    requests = ResourceList.of(nvidia_com_gpu=gpus, cpu="1")
    pod_sets = (PodSet(count, requests),)
    total = ResourceList({k: v * count for k, v in requests.items()})
    return Demand(pod_sets=pod_sets, min_available=count, total=total, pods=count)


def test_equal_demands_share_one_shape_and_one_total() -> None:
    a, b, c = _demand(4), _demand(4), _demand(2)
    assert a.shape is b.shape and a.total is b.total
    assert a.shape is not c.shape and a.total is not c.total
    assert a == b and a.total == ResourceList.of(nvidia_com_gpu=8, cpu="2")


def test_a_shape_or_total_no_demand_holds_is_let_go() -> None:
    gc.collect()
    shapes, totals = len(Shape.table), len(demand_module._TOTALS)
    held = [_demand(1000 + i) for i in range(50)]
    assert len(Shape.table) == shapes + 50
    assert len(demand_module._TOTALS) == totals + 50
    del held
    gc.collect()
    assert (len(Shape.table), len(demand_module._TOTALS)) == (shapes, totals)
