"""The controller's in-memory view of the hub and the spokes, shared by its parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mcad.controller.classes import PriorityClasses
from mcad.controller.records import AppWrapperRecord
from mcad.controller.spoke_link import SpokeLink
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.quota.forest import QuotaForest


@dataclass
class ControllerState:
    appwrappers: dict[AppWrapperKey, AppWrapperRecord] = field(default_factory=dict)
    by_uid: dict[str, AppWrapperKey] = field(default_factory=dict)
    subtrees: dict[str, dict[str, Any]] = field(default_factory=dict)
    forest: QuotaForest = field(default_factory=lambda: QuotaForest.build(())[0])
    quota_problems: list[str] = field(default_factory=list)
    spoke_objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    links: dict[str, SpokeLink] = field(default_factory=dict)
    link_sources: dict[str, str] = field(default_factory=dict)
    classes: PriorityClasses = field(default_factory=PriorityClasses)
    """The hub's priority classes (``kueue.x-k8s.io/priority-class``)."""
    lost_since: dict[str, datetime] = field(default_factory=dict)
    """Clusters AppWrappers run on that have no link (unregistered), and since when."""
