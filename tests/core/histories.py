"""What happens on the clusters between two cycles, as the controller would see it next.

Steps of a random history for the carried cycle's property tests
(``tests/core/test_carried.py``), each drawn by hypothesis and each returning the next
snapshot: pods of admitted AppWrappers bind (a reserved pod moves to a node that
accepts it and has room, as a scheduler would put it: not where the cycle's first fit
guessed), their bound pods end (the room on their node frees up, the AppWrapper still
admitted), other pods on a node end, a dispatch the controller assumed is persisted
(the running AppWrapper seen again with its dispatch time and expected end), an
admitted AppWrapper completes (it leaves, with its pods and its quota), and nodes
change (cordoned, relabelled, added, removed, resized).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from hypothesis import strategies as st

from mcad.core.cycle.decide import Admitted, Snapshot
from mcad.core.placement.capacity import AppWrapperKey, ClusterCapacity, NodeCapacity, NodeName
from mcad.core.workload.resources import ResourceList


def _with_cluster(snapshot: Snapshot, index: int, cluster: ClusterCapacity) -> Snapshot:
    clusters = list(snapshot.clusters)
    clusters[index] = cluster
    return dataclasses.replace(snapshot, clusters=tuple(clusters))


def _fits(node: NodeCapacity, requests: ResourceList) -> bool:
    return requests.fits_in(node.allocatable - node.requested)


def bind(snapshot: Snapshot, data: st.DataObject) -> Snapshot:
    """Some reserved pods of one cluster bind, each on a node that accepts it and has
    room for it (drawn among those), one pod at a time."""
    with_reservations = [i for i, c in enumerate(snapshot.clusters) if c.unbound]
    if not with_reservations:
        return snapshot
    index = data.draw(st.sampled_from(with_reservations))
    cluster = snapshot.clusters[index]
    reservations = list(cluster.unbound)
    nodes = list(cluster.nodes)
    held = {k: dict(v) for k, v in cluster.held_by.items()}
    for _ in range(data.draw(st.integers(1, 3))):
        if not reservations:
            break
        r = data.draw(st.integers(0, len(reservations) - 1))
        reservation = reservations[r]
        s = data.draw(st.integers(0, len(reservation.pod_sets) - 1))
        pod_set = reservation.pod_sets[s]
        fitting = [i for i, n in enumerate(nodes) if n.accepts(pod_set)
                   and (reservation.pin is None or reservation.pin.holds(n.labels))
                   and _fits(n, pod_set.requests)]
        if not fitting:
            continue
        n = data.draw(st.sampled_from(fitting))
        node = nodes[n]
        nodes[n] = dataclasses.replace(node, requested=node.requested + pod_set.requests)
        on = held.setdefault(reservation.key, {})
        on[node.name] = on.get(node.name, ResourceList()) + pod_set.requests
        left = tuple(dataclasses.replace(p, count=p.count - 1) if i == s else p
                     for i, p in enumerate(reservation.pod_sets))
        left = tuple(p for p in left if p.count)
        if left:
            reservations[r] = dataclasses.replace(reservation, pod_sets=left)
        else:
            del reservations[r]
    return _with_cluster(snapshot, index, dataclasses.replace(
        cluster, nodes=tuple(nodes), unbound=tuple(reservations),
        held_by={k: tuple(v.items()) for k, v in held.items() if v}))


def finish(snapshot: Snapshot, data: st.DataObject) -> Snapshot:
    """The bound pods of one admitted AppWrapper on one node end: their room frees up;
    the AppWrapper stays admitted (its completion is seen later)."""
    with_pods = [i for i, c in enumerate(snapshot.clusters) if c.held_by]
    if not with_pods:
        return snapshot
    index = data.draw(st.sampled_from(with_pods))
    cluster = snapshot.clusters[index]
    key = data.draw(st.sampled_from(sorted(cluster.held_by)))
    on = list(cluster.held_by[key])
    name, requests = on.pop(data.draw(st.integers(0, len(on) - 1)))
    nodes = tuple(dataclasses.replace(n, requested=(n.requested - requests).clamp_zero())
                  if n.name == name else n for n in cluster.nodes)
    held = {k: v for k, v in cluster.held_by.items() if k != key}
    if on:
        held[key] = tuple(on)
    return _with_cluster(snapshot, index, dataclasses.replace(cluster, nodes=nodes,
                                                              held_by=held))


def free(snapshot: Snapshot, data: st.DataObject) -> Snapshot:
    """Pods that are not mcad's end on one node: its requests drop by a half or all."""
    if not snapshot.clusters:
        return snapshot
    index = data.draw(st.integers(0, len(snapshot.clusters) - 1))
    cluster = snapshot.clusters[index]
    if not cluster.nodes:
        return snapshot
    n = data.draw(st.integers(0, len(cluster.nodes) - 1))
    node = cluster.nodes[n]
    left = ResourceList({k: v // 2 for k, v in node.requested.items()}) \
        if data.draw(st.booleans()) else ResourceList()
    nodes = (*cluster.nodes[:n], dataclasses.replace(node, requested=left), *cluster.nodes[n + 1:])
    return _with_cluster(snapshot, index, dataclasses.replace(cluster, nodes=nodes))


def complete(snapshot: Snapshot, data: st.DataObject) -> Snapshot:
    """An admitted AppWrapper completes: it leaves the snapshot, and with it its
    reservation, its bound pods' requests and its quota."""
    admitted = [e.key for e in snapshot.appwrappers if isinstance(e.phase, Admitted)]
    if not admitted:
        return snapshot
    return completed(snapshot, data.draw(st.sampled_from(admitted)))


def completed(snapshot: Snapshot, key: AppWrapperKey) -> Snapshot:
    """``snapshot`` without the admitted AppWrapper ``key``, its pods and reservation."""
    clusters = []
    for cluster in snapshot.clusters:
        on = dict(cluster.held_by.get(key, ()))
        nodes = tuple(dataclasses.replace(n, requested=(n.requested - on[n.name]).clamp_zero())
                      if n.name in on else n for n in cluster.nodes)
        clusters.append(dataclasses.replace(
            cluster, nodes=nodes,
            unbound=tuple(r for r in cluster.unbound if r.key != key),
            held_by={k: v for k, v in cluster.held_by.items() if k != key}))
    return dataclasses.replace(
        snapshot, clusters=tuple(clusters),
        appwrappers=tuple(e for e in snapshot.appwrappers if e.key != key))


def persist(snapshot: Snapshot, data: st.DataObject) -> Snapshot:
    """A dispatch the controller assumed is persisted: the running AppWrapper is seen
    again with when it was dispatched and when it is expected to end."""
    admitted = [i for i, e in enumerate(snapshot.appwrappers) if isinstance(e.phase, Admitted)]
    if not admitted:
        return snapshot
    i = data.draw(st.sampled_from(admitted))
    entries = list(snapshot.appwrappers)
    entries[i] = dataclasses.replace(
        entries[i], dispatched=snapshot.now - timedelta(seconds=data.draw(st.integers(0, 900))),
        expected_end=snapshot.now + timedelta(seconds=data.draw(st.integers(0, 900))))
    return dataclasses.replace(snapshot, appwrappers=tuple(entries))


def renode(snapshot: Snapshot, data: st.DataObject) -> Snapshot:
    """One node of one cluster changes: cordoned or uncordoned, relabelled, resized,
    removed, or a new one joins."""
    if not snapshot.clusters:
        return snapshot
    index = data.draw(st.integers(0, len(snapshot.clusters) - 1))
    cluster = snapshot.clusters[index]
    nodes = list(cluster.nodes)
    what = data.draw(st.sampled_from(["cordon", "label", "resize", "remove", "add"]))
    if what == "add" or not nodes:
        model = nodes[0] if nodes else NodeCapacity(NodeName("x"), ResourceList.of(gpu=8))
        taken = {n.name for n in nodes}
        name = next(f"{cluster.name}-new{i}" for i in range(len(nodes) + 1)
                    if f"{cluster.name}-new{i}" not in taken)
        nodes.append(dataclasses.replace(model, name=NodeName(name),
                                         requested=ResourceList(), unschedulable=False))
    else:
        n = data.draw(st.integers(0, len(nodes) - 1))
        node = nodes[n]
        if what == "cordon":
            nodes[n] = dataclasses.replace(node, unschedulable=not node.unschedulable)
        elif what == "label":
            nodes[n] = dataclasses.replace(node, labels={**node.labels, "pool": "spare"})
        elif what == "resize":
            nodes[n] = dataclasses.replace(node, allocatable=node.allocatable.scale(2))
        else:
            del nodes[n]
    return _with_cluster(snapshot, index, dataclasses.replace(cluster, nodes=tuple(nodes)))


def on_the_clusters(snapshot: Snapshot, data: st.DataObject) -> Snapshot:
    """One stretch between two cycles: up to three pods bind, and now and then a bound
    pod ends, a dispatch is persisted, running work completes, or nodes change."""
    for _pods in range(data.draw(st.integers(0, 3))):
        snapshot = bind(snapshot, data)
    if data.draw(st.integers(0, 2)) == 0:
        snapshot = finish(snapshot, data)
    if data.draw(st.integers(0, 3)) == 0:
        snapshot = persist(snapshot, data)
    if data.draw(st.integers(0, 7)) == 0:
        snapshot = complete(snapshot, data)
    if data.draw(st.integers(0, 7)) == 0:
        snapshot = renode(snapshot, data)
    return snapshot
