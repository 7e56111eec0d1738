"""The Kueue labels a v1beta2 user already sets, read as mcad's quota and priority.

Why: users of the AppWrapper project put ``kueue.x-k8s.io/queue-name`` on every
AppWrapper (its samples do) and often ``kueue.x-k8s.io/priority-class``. mcad has no
LocalQueues: its quota is a tree node named by a label whose key is the tree. So the
administrator maps queue names to quota nodes (``queueNames`` in the configuration: a
queue name to a node per tree), and a priority class names a Kueue
``WorkloadPriorityClass`` or, failing that, a Kubernetes ``PriorityClass``, whose value
becomes the AppWrapper's priority.

Rules: a quota label the AppWrapper sets itself wins over the mapping (it is the more
specific); with a mapping configured, a queue name it does not know keeps the
AppWrapper waiting, with a sentence (it would otherwise run uncharged, or charged to the
wrong team); with none configured, the label is ignored. A priority class that names
neither kind of class keeps it waiting too: running it at priority 0 would be a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"


@dataclass(frozen=True, slots=True)
class Unknown:
    """Why the AppWrapper waits: what its label names does not exist (a sentence)."""

    message: str


def quota_labels(labels: Mapping[str, str], queues: Mapping[str, Mapping[str, str]]
                 ) -> Mapping[str, str] | Unknown:
    """The labels the quota forest reads: ``labels`` with the nodes its queue maps to
    (``queues``: queue name -> {tree: node}) added where it names none itself."""
    queue = labels.get(QUEUE_LABEL)
    if queue is None or not queues:
        return labels
    mapped = queues.get(queue)
    if mapped is None:
        known = ", ".join(sorted(queues))
        return Unknown(f"its label {QUEUE_LABEL} names queue {queue!r}, which the mcad "
                       f"configuration does not map to quota (queueNames has {known}); use "
                       "one of those, or ask the administrator to map it")
    missing = {tree: node for tree, node in mapped.items() if tree not in labels}
    return {**labels, **missing} if missing else labels


def class_priority(labels: Mapping[str, str], *, workload_classes: Mapping[str, int],
                   priority_classes: Mapping[str, int]) -> int | Unknown | None:
    """The priority its ``kueue.x-k8s.io/priority-class`` label gives (a Kueue
    WorkloadPriorityClass first, then a PriorityClass of that name); None without the
    label."""
    name = labels.get(PRIORITY_CLASS_LABEL)
    if name is None:
        return None
    if name in workload_classes:
        return workload_classes[name]
    if name in priority_classes:
        return priority_classes[name]
    return Unknown(f"its label {PRIORITY_CLASS_LABEL} names {name!r}, which is neither a "
                   "WorkloadPriorityClass nor a PriorityClass on the hub; create it, or "
                   "correct the label")
