"""MCAD's own YAML (``tests/fixtures/mcad-v1``), read the way the controller reads it.

Every "same" row of docs/mcad-compatibility.md is backed by a test that starts from an
AppWrapper or QuotaSubtree written as MCAD's users and MCAD's own tests write them, and
hands it to the readers the controller uses: ``AppWrapperRecord`` (demand, labels,
priority, cluster constraints), ``nodes_from_subtree`` and ``QuotaForest.build`` (quota
trees), ``wrapped_objects`` (what gets created), ``RequeuePolicy.from_spec``.

    forest = forest_of("quota-forest.yaml")
    job = fixture("aw-job-quota.yaml")
    entry = entry_of(renamed(job, "my-job-2"), running_on="spoke-1")
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from mcad.config import RunConfig
from mcad.controller.records import AppWrapperRecord
from mcad.core.cycle.decide import AppWrapperEntry
from mcad.core.quota.forest import QuotaForest, nodes_from_subtree
from tests.builders.snapshots import EPOCH, at

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mcad-v1"
Wire = dict[str, Any]


def documents(name: str) -> list[Wire]:
    """Every object of a fixture file, in order."""
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def fixture(name: str) -> Wire:
    """The one object of a fixture file (a fresh copy: tests may change it)."""
    (doc,) = documents(name)
    return doc


def forest_of(*names: str) -> QuotaForest:
    """The quota forest the controller builds from these files' QuotaSubtrees."""
    nodes = [node for name in names for doc in documents(name)
             for node in nodes_from_subtree(doc)]
    forest, problems = QuotaForest.build(nodes)
    assert problems == [], problems
    return forest


def renamed(doc: Wire, name: str, *, labels: dict[str, str] | None = None,
            priority: int | None = None) -> Wire:
    """A copy of an MCAD AppWrapper under another name (its wrapped objects too), with
    its quota labels or ``spec.priority`` replaced when given."""
    out = copy.deepcopy(doc)
    out["metadata"]["name"] = name
    if labels is not None:
        out["metadata"]["labels"] = dict(labels)
    if priority is not None:
        out["spec"]["priority"] = priority
    for i, item in enumerate(out["spec"]["resources"]["GenericItems"]):
        template = item.get("generictemplate")
        if isinstance(template, dict):
            template.setdefault("metadata", {})["name"] = f"{name}-{i}"
    return out


def with_cpu(doc: Wire, cpu: str) -> Wire:
    """A copy whose pods each request (and limit) ``cpu``: every ``custompodresources``
    entry and every container of the wrapped Job's pod template."""
    out = copy.deepcopy(doc)
    for item in out["spec"]["resources"]["GenericItems"]:
        pod_spec = item["generictemplate"]["spec"]["template"]["spec"]
        declared = list(item.get("custompodresources") or [])
        containers = [c.setdefault("resources", {}) for c in pod_spec["containers"]]
        for resources in declared + containers:
            for part in ("requests", "limits"):
                if part in resources:
                    resources[part]["cpu"] = cpu
    return out


def entry_of(doc: Wire, *, created_s: float = 0, running_on: str | None = None,
             status: Wire | None = None) -> AppWrapperEntry:
    """The dispatch cycle's view of an AppWrapper object, as ``AppWrapperRecord`` reads it
    from the hub. ``running_on``: dispatched there (at the epoch) and running."""
    obj = copy.deepcopy(doc)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", f"uid-{meta['namespace']}-{meta['name']}")
    meta.setdefault("creationTimestamp", at(created_s).strftime("%Y-%m-%dT%H:%M:%SZ"))
    obj["status"] = dict(status or {})
    if running_on is not None:
        obj["status"].update({"state": "Running", "clusterName": running_on,
                              "dispatchTimestamp": EPOCH.strftime("%Y-%m-%dT%H:%M:%SZ")})
    record = AppWrapperRecord.of(obj)
    return record.core_entry(RunConfig())
