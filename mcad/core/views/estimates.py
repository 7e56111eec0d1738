"""When will my job start? A forecast of the future, made by the real cycle.

``estimate_starts`` plays the queue forward: from the running AppWrappers' expected
ends (``mcad.core.life.runhistory`` says how long each runs), it repeatedly takes the earliest
end, advances ``now`` to it, takes the AppWrapper that ended out of the snapshot (its
quota charge, its pods on their nodes, its unbound pods) and runs ``dispatch_cycle`` on
what is left. Whatever that cycle dispatches starts then, in the forecast, and runs for its
own expected run time. So quota, node-level fit, priority, fair share and the head of
the line's reservation are exactly the cycle's: nothing here re-implements a decision,
and an estimate changes when the cycle's rules do.

What the forecast assumes, stated once:

- running work ends at its expected end (``expected_end``; one already past it ends at
  once, the most hopeful guess, corrected on the next refresh); running work with no
  expected end runs on past the horizon;
- AppWrappers being taken back (draining, or evicted by any cycle of the forecast) are gone
  at once, and not requeued in the forecast;
- no preemption after the first cycle (which is the real one, at the real ``now``), but
  for backfills evicted when their promise to a waiting head comes due: the
  forecast is what happens if everything runs to its end; an AppWrapper that would evict
  someone later is estimated as if it waited (an upper bound for it);
- elastic AppWrappers keep the size they start with (growth is not planned);
- a requeue pause ending is a moment of its own (the AppWrapper may go then), and so is
  a backfill's promise coming due (it may be evicted then).

Cost: at most ``max_steps`` cycles, each one ``dispatch_cycle`` (tens of milliseconds
for 10,000 queued AppWrappers) plus rebuilding the snapshot without the ended and with
the dispatched AppWrappers (linear in AppWrappers, and in the nodes of the clusters that
changed). No step goes past ``now + horizon``. The controller chooses both to fit its
cycle's budget; what is not placed within them has no estimate (``start`` None) and a
sentence that says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from mcad.core.cycle.decide import dispatch_cycle
from mcad.core.cycle.elastic import sized
from mcad.core.cycle.snapshot import (
    Admitted,
    AppWrapperEntry,
    CycleResult,
    Dispatch,
    Pending,
    Snapshot,
)
from mcad.core.placement.capacity import AppWrapperKey, ClusterCapacity, NodeName, UnboundPods
from mcad.core.placement.victims import PreemptionPolicy
from mcad.core.workload.resources import ResourceList

RuntimeOf = Callable[[AppWrapperEntry], timedelta]
"""How long a queued AppWrapper is expected to run once it starts."""

NO_PREEMPTION = PreemptionPolicy(priority=False, reclaim=False)


@dataclass(frozen=True, slots=True)
class Estimate:
    """When a queued AppWrapper is expected to start, and what that rests on."""

    start: datetime | None
    """None: not placed within the horizon or the budget (``basis`` says which)."""
    after: tuple[AppWrapperKey, ...]
    """The AppWrappers whose end frees the room it starts in (empty: it goes now, or
    when its requeue pause ends)."""
    basis: str


@dataclass(frozen=True, slots=True)
class Estimates:
    """The forecast's answer for every queued AppWrapper of the snapshot."""

    starts: Mapping[AppWrapperKey, Estimate]
    cycles: int
    """Cycles run, the first (at the real ``now``) included."""
    reached: datetime
    """The last moment the forecast simulated."""


@dataclass(frozen=True)
class ForecastStep:
    """One simulated cycle: at ``now``, after ``ended`` were taken out, the cycle ran on
    ``snapshot`` and gave ``result`` (``index`` 0: the real cycle, at the real now)."""

    index: int
    now: datetime
    ended: tuple[AppWrapperKey, ...]
    snapshot: Snapshot
    result: CycleResult


def estimate_starts(snapshot: Snapshot, *, expected_end: Mapping[AppWrapperKey, datetime],
                    runtime_of: RuntimeOf, horizon: timedelta, max_steps: int,
                    first: CycleResult | None = None) -> Estimates:
    """When each queued AppWrapper of ``snapshot`` is expected to start (see the module
    docstring for what the forecast assumes and what it costs).

    ``expected_end``: when each running AppWrapper is expected to end; ``runtime_of``:
    how long a queued one runs once started; ``first``: the cycle's result on
    ``snapshot`` when the caller has it already (saves one cycle).
    """
    queued = [e.key for e in snapshot.appwrappers if not isinstance(e.phase, Admitted)]
    found: dict[AppWrapperKey, Estimate] = {}
    last: dict[AppWrapperKey, Pending] = {}
    cycles, reached = 0, snapshot.now
    steps = forecast(snapshot, expected_end=expected_end, runtime_of=runtime_of,
                     horizon=horizon, max_steps=max_steps, first=first)
    while True:
        try:
            step = next(steps)
        except StopIteration as done:
            stopped: str = done.value
            break
        cycles, reached = cycles + 1, step.now
        for dispatch in step.result.dispatches:
            if dispatch.key not in found:
                found[dispatch.key] = Estimate(step.now, step.ended, _basis(step))
        last.update((p.key, p) for p in step.result.pending)
    for key in queued:
        if key not in found:
            pending = last.get(key)
            why = f"; in the plan it last waited: {pending.message}" if pending else ""
            found[key] = Estimate(None, (), f"no estimate: {stopped}{why}")
    return Estimates({k: found[k] for k in queued}, cycles, reached)


def forecast(snapshot: Snapshot, *, expected_end: Mapping[AppWrapperKey, datetime],
             runtime_of: RuntimeOf, horizon: timedelta, max_steps: int,
             first: CycleResult | None = None) -> Generator[ForecastStep, None, str]:
    """The simulated cycles, the first at ``snapshot.now``: at most ``max_steps``, none
    past ``now + horizon``, none once nothing is queued or nothing more ends. Returns
    why it stopped, as the end of a sentence about an AppWrapper it did not place."""
    if max_steps < 1:
        raise ValueError(f"the plan needs a budget of at least one cycle, got {max_steps}")
    now, limit = snapshot.now, snapshot.now + horizon
    ends: dict[AppWrapperKey, datetime] = {}
    endless: list[AppWrapperKey] = []
    for entry in snapshot.appwrappers:
        if isinstance(entry.phase, Admitted):
            end = now if entry.draining else expected_end.get(entry.key)
            if end is None:
                endless.append(entry.key)
            else:
                ends[entry.key] = max(end, now)
    result = dispatch_cycle(snapshot) if first is None else first
    yield ForecastStep(0, now, (), snapshot, result)
    current = _started(snapshot, result, runtime_of, ends)
    for eviction in result.evictions:
        ends[eviction.key] = now
    current = dataclasses.replace(
        current, policy=dataclasses.replace(current.policy, preemption=NO_PREEMPTION))
    for index in range(1, max_steps):
        if all(isinstance(e.phase, Admitted) for e in current.appwrappers):
            return "nothing is left queued"
        pauses = (e.not_before for e in current.appwrappers
                  if not isinstance(e.phase, Admitted) and e.not_before is not None
                  and e.not_before > current.now)
        promised = (e.backfill_promise.end for e in current.appwrappers
                    if e.backfill_promise is not None and e.backfill_promise.end > current.now)
        moment = min((*ends.values(), *pauses, *promised), default=None)
        if moment is None:
            if endless:
                shown = ", ".join(sorted(endless)[:3]) + (", ..." if len(endless) > 3 else "")
                return f"the running work it may wait for has no expected end ({shown})"
            return "it does not start even once all running work has ended, in the plan"
        if moment > limit:
            return f"not started within the horizon (until {limit.isoformat()})"
        ended = tuple(sorted(k for k, end in ends.items() if end == moment))
        for key in ended:
            del ends[key]
        current = dataclasses.replace(_without(current, ended), now=moment)
        result = dispatch_cycle(current)
        yield ForecastStep(index, moment, ended, current, result)
        current = _started(current, result, runtime_of, ends)
        for eviction in result.evictions:  # a backfill's promise broken: gone at once
            ends[eviction.key] = moment
    return (f"not started within the plan's budget of {max_steps} cycles "
            f"(it reached {current.now.isoformat()})")


def _basis(step: ForecastStep) -> str:
    if step.index == 0:
        return "dispatched in this cycle"
    if not step.ended:
        return f"estimate: when its requeue pause ends, at {step.now.isoformat()}"
    names = ", ".join(step.ended)
    verb = "ends" if len(step.ended) == 1 else "end"
    return f"estimate: after {names} {verb}, expected {step.now.isoformat()}"


def _started(snapshot: Snapshot, result: CycleResult, runtime_of: RuntimeOf,
             ends: dict[AppWrapperKey, datetime]) -> Snapshot:
    """``snapshot`` with the AppWrappers ``result`` dispatched running: admitted, their
    pods bound where the cycle placed them, expected to end after their run time
    (``ends`` is told)."""
    if not result.dispatches:
        return snapshot
    now = snapshot.now
    dispatched = {d.key: d for d in result.dispatches}
    entries: list[AppWrapperEntry] = []
    bound: dict[str, list[tuple[AppWrapperKey, Dispatch, AppWrapperEntry]]] = {}
    for entry in snapshot.appwrappers:
        dispatch = dispatched.get(entry.key)
        if dispatch is None or entry.demand is None:
            entries.append(entry)
            continue
        demand, full = entry.demand, None
        if dispatch.pods is not None:
            demand, full = sized(entry.demand, dispatch.pods), entry.demand.pods
        ends[entry.key] = now + max(runtime_of(entry), timedelta(0))
        running = dataclasses.replace(
            entry, phase=Admitted(dispatch.cluster, dispatch.placement.pin), demand=demand,
            full_pods=full, dispatched=now, not_before=None,
            expected_end=ends[entry.key])
        entries.append(running)
        bound.setdefault(dispatch.cluster, []).append((entry.key, dispatch, running))
    clusters = tuple(_bind(c, bound[c.name]) if c.name in bound else c
                     for c in snapshot.clusters)
    return dataclasses.replace(snapshot, appwrappers=tuple(entries), clusters=clusters)


def _bind(cluster: ClusterCapacity,
          started: Iterable[tuple[AppWrapperKey, Dispatch, AppWrapperEntry]]
          ) -> ClusterCapacity:
    """``cluster`` with the started AppWrappers' pods on the nodes the cycle chose (a
    reservation when the placement did not name them)."""
    add: dict[NodeName, ResourceList] = {}
    held = dict(cluster.held_by)
    unbound = list(cluster.unbound)
    for key, dispatch, entry in started:
        per_node = dispatch.placement.node_requests()
        if not per_node:
            assert entry.demand is not None
            unbound.append(UnboundPods(key, entry.demand.pod_sets,
                                            dispatch.placement.pin))
            continue
        held[key] = tuple(per_node.items())
        for node, requests in per_node.items():
            add[node] = add.get(node, ResourceList()) + requests
    nodes = tuple(dataclasses.replace(n, requested=n.requested + add[n.name])
                  if n.name in add else n for n in cluster.nodes)
    return dataclasses.replace(cluster, nodes=nodes, held_by=held,
                               unbound=tuple(unbound))


def _without(snapshot: Snapshot, ended: tuple[AppWrapperKey, ...]) -> Snapshot:
    """``snapshot`` without the ``ended`` AppWrappers: their quota (the cycle charges
    only the admitted AppWrappers listed), their bound pods and their unbound pods."""
    gone = set(ended)
    entries = tuple(e for e in snapshot.appwrappers if e.key not in gone)
    clusters = tuple(_release(c, gone) if gone & (set(c.held_by) | {r.key for r in
                                                                       c.unbound})
                     else c for c in snapshot.clusters)
    return dataclasses.replace(snapshot, appwrappers=entries, clusters=clusters)


def _release(cluster: ClusterCapacity, gone: set[AppWrapperKey]) -> ClusterCapacity:
    freed: dict[NodeName, ResourceList] = {}
    for key in gone & set(cluster.held_by):
        for node, requests in cluster.held_by[key]:
            freed[node] = freed.get(node, ResourceList()) + requests
    nodes = tuple(dataclasses.replace(n, requested=(n.requested - freed[n.name]).clamp_zero())
                  if n.name in freed else n for n in cluster.nodes)
    return dataclasses.replace(
        cluster, nodes=nodes,
        held_by={k: v for k, v in cluster.held_by.items() if k not in gone},
        unbound=tuple(r for r in cluster.unbound if r.key not in gone))
