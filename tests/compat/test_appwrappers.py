"""MCAD's AppWrappers, unchanged, are wrapped, charged, completed and requeued under mcad
as under MCAD: the "same" rows of docs/mcad-compatibility.md sections 4 to 7 and 10 to
12 (labels and annotations on what is created, the ownerReference, the limit standing
in for a request, fields MCAD never read, completion, requeuing waits, a completed run
and its dispatchDuration.limit).

Each test starts from a file of ``tests/fixtures/mcad-v1`` and goes through the readers
the controller uses: ``AppWrapperRecord`` (demand, requeuing, dispatchDuration,
priority), ``wrapped_objects`` and ``owned_by`` (what is created), ``count_pods`` and
``progress`` (what a dispatched AppWrapper's pods and objects mean). MCAD's side is as
read in its genericresource.go (SyncQueueJob, addLabelsToPodTemplateField,
getPodResources, getContainerResources) and queuejob_controller_ex.go
(getAppWrapperCompletionStatus, GetQueueJobEligibleForPreemption).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mcad.config import RunConfig
from mcad.controller.records import AppWrapperRecord
from mcad.core.life.completion import (
    Completed,
    ItemState,
    KeepRunning,
    Progress,
    count_pods,
    progress,
)
from mcad.core.life.requeue import Fail, Requeue, readiness_timeout
from mcad.core.life.wrapping import WrappedObject, for_remote_spoke, owned_by, wrapped_objects
from mcad.core.workload.resources import ResourceList
from tests.compat.mcad_yaml import FIXTURES, Wire, entry_of, fixture

R = ResourceList.of
T0 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
AW_FIXTURES = sorted(p.name for p in FIXTURES.glob("aw-*.yaml"))


def record(doc: Wire) -> AppWrapperRecord:
    rec = AppWrapperRecord.of(copy.deepcopy(doc))
    return rec


def plan(doc: Wire, *, namespace: str = "") -> list[WrappedObject]:
    meta = doc["metadata"]
    planned = wrapped_objects(name=meta["name"], namespace=namespace, uid="uid-1",
                              spec=doc["spec"], kind_allowed=lambda _v, _k: True)
    assert isinstance(planned, list), planned
    return planned


def pod(phase: str, *, ready: bool = False) -> Wire:
    return {"metadata": {}, "status": {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}


def decide(doc: Wire, *, after_s: float, pods: list[Wire],
           conditions: Mapping[str, Mapping[str, str]] | None = None,
           requeues: int = 0) -> Progress:
    """What the controller decides for this AppWrapper, dispatched at T0, ``after_s``
    seconds later, with these pods and these conditions on its wrapped objects (by
    name): the inputs ``lifecycle`` hands to ``progress``."""
    rec = record(doc)
    assert rec.demand is not None
    items = [ItemState(w.completion, dict((conditions or {}).get(w.name, {})))
             for w in plan(doc)]
    return progress(now=T0 + timedelta(seconds=after_s),
                    policy=rec.requeue_policy(RunConfig()), dispatched_at=T0,
                    requeue_count=requeues, min_available=rec.demand.min_available,
                    expected_pods=rec.demand.pods, pods=count_pods(pods), items=items,
                    run_limit_seconds=rec.run_limit())


def annotations_in(node: Any) -> Iterator[tuple[str, Any]]:
    """Every ``annotations`` map in an object, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "annotations":
                yield key, value
            yield from annotations_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from annotations_in(value)


# -- labels, annotations and the ownerReference on what is created (section 5) ------------

def test_a_users_label_with_one_of_mcads_keys_is_written_over() -> None:
    """SyncQueueJob sets appwrapper.mcad.ibm.com and resourceName over the object's labels
    and addLabelsToPodTemplateField writes the object's labels over the template's."""
    doc = fixture("aw-default-job-no-custompodresources.yaml")
    job = doc["spec"]["resources"]["GenericItems"][0]["generictemplate"]
    theirs = {"appwrapper.mcad.ibm.com": "someone-else", "resourceName": "not-this-job",
              "team": "a"}
    job["metadata"]["labels"] = dict(theirs)
    job["spec"]["template"]["metadata"]["labels"].update(theirs)
    (wrapped,) = plan(doc)
    name = doc["metadata"]["name"]
    for labels in (wrapped.manifest["metadata"]["labels"],
                   wrapped.manifest["spec"]["template"]["metadata"]["labels"]):
        assert (labels["appwrapper.mcad.ibm.com"], labels["resourceName"], labels["team"]) \
            == (name, name, "a")


@pytest.mark.parametrize("name", AW_FIXTURES)
def test_no_annotation_is_added_to_what_is_created(name: str) -> None:
    doc = fixture(name)
    templates = [i["generictemplate"] for i in doc["spec"]["resources"]["GenericItems"]]
    planned = plan(doc)
    assert len(planned) == len(templates)
    for wrapped, template in zip(planned, templates, strict=True):
        assert list(annotations_in(wrapped.manifest)) == list(annotations_in(template))


def test_in_single_cluster_mode_each_object_gets_mcads_controller_reference() -> None:
    """As metav1.NewControllerRef(aw, AppWrapper kind) in SyncQueueJob."""
    doc = fixture("aw-job-quota.yaml")
    (wrapped,) = plan(doc, namespace="test")
    owned = owned_by(wrapped.manifest, name="my-job-1", uid="uid-1")
    assert owned["metadata"]["ownerReferences"] == [{
        "apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
        "name": "my-job-1", "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}]
    # As SyncQueueJob: appended to the ownerReferences the template writes.
    job = doc["spec"]["resources"]["GenericItems"][0]["generictemplate"]
    job["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap",
                                           "name": "cm", "uid": "cm-1"}]
    (again,) = plan(doc, namespace="test")
    assert [r["kind"] for r in owned_by(again.manifest, name="my-job-1", uid="uid-1")
            ["metadata"]["ownerReferences"]] == ["ConfigMap", "AppWrapper"]
    # On a remote spoke none: its owner lives on the hub, where the spoke cannot see it.
    assert "ownerReferences" not in for_remote_spoke(again.manifest)["metadata"]


# -- demand (section 6) --------------------------------------------------------------------

def test_a_request_of_zero_or_none_is_replaced_by_the_limit() -> None:
    """getPodResources and getContainerResources: a zero cpu, memory or GPU request
    takes the limit; in custompodresources and in the pod template alike."""
    doc = fixture("aw-pod-custompodresources.yaml")
    item = doc["spec"]["resources"]["GenericItems"][0]
    item["custompodresources"] = [{"replicas": 1,
                                   "requests": {"nvidia.com/gpu": 0, "cpu": 0},
                                   "limits": {"nvidia.com/gpu": 8, "cpu": 2,
                                              "memory": "1Gi"}}]
    container = item["generictemplate"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "0"},
                              "limits": {"nvidia.com/gpu": 8, "cpu": 2, "memory": "1Gi"}}
    declared = record(doc).demand
    assert declared is not None and declared.total == R(gpu=8, cpu=2, memory="1Gi")
    del item["custompodresources"]
    from_template = record(doc).demand
    assert from_template is not None and from_template.total == R(gpu=8, cpu=2, memory="1Gi")


def test_an_items_minavailable_changes_nothing() -> None:
    doc = fixture("aw-requeuing-init-containers.yaml")
    plain = record(doc).demand
    doc["spec"]["resources"]["GenericItems"][0]["minavailable"] = 1
    assert record(doc).demand == plain
    assert plain is not None and plain.min_available == 3  # schedulingSpec.minAvailable


def test_an_items_priority_and_priorityslope_change_nothing() -> None:
    doc = fixture("aw-pod-custompodresources.yaml")
    before = entry_of(doc)
    item = doc["spec"]["resources"]["GenericItems"][0]
    item["priority"], item["priorityslope"] = 100, 2.5
    after = entry_of(doc)
    assert (after.priority, after.priority_slope, after.demand) == \
        (before.priority, before.priority_slope, before.demand) == (5, 0.0, before.demand)


# -- completion (sections 2, 4 and 12) -----------------------------------------------------

JOB = fixture("aw-job-quota.yaml")  # completionstatus: Complete on its Job my-job-1


@pytest.mark.parametrize(("pods", "job", "want"), [
    pytest.param([pod("Running", ready=True)], {"Complete": "True"}, Completed(hold=True),
                 id="item-complete-a-pod-still-running-is-RunningHoldCompletion"),
    pytest.param([pod("Pending")], {"Complete": "True"}, Completed(hold=True),
                 id="item-complete-a-pod-still-pending-is-RunningHoldCompletion"),
    pytest.param([pod("Succeeded")], {"Complete": "True"}, Completed(hold=False),
                 id="item-complete-no-pod-left-is-Completed"),
    pytest.param([pod("Succeeded")], {}, KeepRunning(None, ready=True),
                 id="item-not-complete-stays-Running"),
])
def test_completionstatus_items_decide_completion(pods: list[Wire], job: dict[str, str],
                                                  want: Progress) -> None:
    assert decide(JOB, after_s=10, pods=pods, conditions={"my-job-1": job}) == want


# -- requeuing (section 10) ----------------------------------------------------------------

REQUEUING = fixture("aw-requeuing-init-containers.yaml")  # timeInSeconds 60, minAvailable 3


def test_time_in_seconds_is_the_first_wait_for_the_gang() -> None:
    three_pending = [pod("Pending")] * 3
    assert decide(REQUEUING, after_s=59, pods=three_pending) == \
        KeepRunning(T0 + timedelta(seconds=60), ready=False)
    assert isinstance(decide(REQUEUING, after_s=60, pods=three_pending), Requeue)
    two_up = [pod("Running", ready=True), pod("Succeeded"), pod("Pending")]
    assert isinstance(decide(REQUEUING, after_s=60, pods=two_up), Requeue)
    three_up = [pod("Running", ready=True), pod("Running", ready=True), pod("Succeeded")]
    assert decide(REQUEUING, after_s=60, pods=three_up) == KeepRunning(None, ready=True)


def test_an_empty_requeuing_block_gets_mcads_crd_default_of_300_seconds() -> None:
    doc = copy.deepcopy(REQUEUING)
    doc["spec"]["schedulingSpec"]["requeuing"] = {}
    assert isinstance(decide(doc, after_s=299, pods=[pod("Pending")] * 3), KeepRunning)
    assert isinstance(decide(doc, after_s=300, pods=[pod("Pending")] * 3), Requeue)


def test_max_time_in_seconds_caps_every_wait() -> None:
    doc = copy.deepcopy(REQUEUING)
    doc["spec"]["schedulingSpec"]["requeuing"].update(maxTimeInSeconds=90)
    policy = record(doc).requeue_policy(RunConfig())
    assert [readiness_timeout(policy, n) for n in range(5)] == [60, 90, 90, 90, 90]
    assert isinstance(decide(doc, after_s=89, pods=[pod("Pending")] * 3, requeues=4),
                      KeepRunning)
    assert isinstance(decide(doc, after_s=90, pods=[pod("Pending")] * 3, requeues=4),
                      Requeue)


# -- dispatchDuration.limit (section 11) ---------------------------------------------------

def test_a_run_that_completed_is_never_failed_by_its_dispatch_duration_limit() -> None:
    """MCAD checks the limit only for AppWrappers in state Running."""
    doc = copy.deepcopy(JOB)
    doc["spec"]["schedulingSpec"]["dispatchDuration"] = {"limit": 30}
    done = {"my-job-1": {"Complete": "True"}}
    assert decide(doc, after_s=500, pods=[pod("Succeeded")], conditions=done) == \
        Completed(hold=False)
    assert decide(doc, after_s=500, pods=[pod("Running", ready=True)], conditions=done) \
        == Completed(hold=True)
    # The limit is read: the same AppWrapper still running is past it.
    still_running = decide(doc, after_s=500, pods=[pod("Running", ready=True)])
    assert isinstance(still_running, Fail) and still_running.reason == \
        "DispatchDeadlineExceeded"
