"""The hub's priority classes, by name: what ``kueue.x-k8s.io/priority-class`` names.

Why a cache of its own: an AppWrapper v1beta2 user sets its priority by naming a Kueue
``WorkloadPriorityClass`` (or a Kubernetes ``PriorityClass``) rather than a number; the
dispatch cycle needs the number at every cycle, so the hub's classes are watched (two
small informers: a cluster has a handful of classes; Kueue's may not be installed at all)
and read here, never asked for per AppWrapper. ``mcad.core.quota.queues.class_priority`` says
which class wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcad.core.quota.queues import Unknown, class_priority


@dataclass
class PriorityClasses:
    """name -> value of the hub's WorkloadPriorityClasses and PriorityClasses."""

    workload: dict[str, int] = field(default_factory=dict)
    kubernetes: dict[str, int] = field(default_factory=dict)

    def priority(self, labels: Mapping[str, str]) -> int | Unknown | None:
        """What an AppWrapper with ``labels`` gets from its priority-class label."""
        return class_priority(labels, workload_classes=self.workload,
                              priority_classes=self.kubernetes)

    @staticmethod
    def value_of(obj: Mapping[str, Any]) -> int | None:
        """A class's ``value`` (None when it has none that is a whole number)."""
        value = obj.get("value")
        return value if isinstance(value, int) and not isinstance(value, bool) else None
