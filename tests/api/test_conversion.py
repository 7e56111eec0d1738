"""Converting AppWrappers between v1beta1 (stored) and v1beta2 loses nothing: generated
AppWrappers of both versions come back exactly (v1beta1 -> v1beta2 -> v1beta1 and
v1beta2 -> v1beta1 -> v1beta2), each form is valid for its version's model, and the
statuses mcad writes read in v1beta2's vocabulary (phase, conditions, componentStatus)
with nothing kept aside in the annotation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.api import appwrapper, appwrapper_v1beta2
from mcad.api.conversion import (
    MCAD_CONTROLLER,
    V1BETA1_KEPT,
    V1BETA2_KEPT,
    ConversionError,
    convert,
    kept_facts,
    to_v1beta1,
    to_v1beta2,
)
from mcad.core.workload.podsets import DeclaredPodSet

NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)
TIMES = st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z", "2026-02-03T04:05:06Z"])
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def pod_template() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda cpu: {"spec": {"containers": [
        {"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}},
        st.sampled_from(["1", "500m", 2]))


def template() -> st.SearchStrategy[dict[str, Any]]:
    job = st.builds(lambda name, pods, pt: {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"parallelism": pods, "template": pt}}, NAMES, st.integers(1, 3), pod_template())
    pod = st.builds(lambda name, pt: {"apiVersion": "v1", "kind": "Pod", "metadata":
                                      {"name": name}, **pt}, NAMES, pod_template())
    widget = st.builds(lambda name: {"apiVersion": "example.com/v1", "kind": "Widget",
                                     "metadata": {"name": name}, "spec": {"x": [1, {"y": None}]}},
                       NAMES)
    return st.one_of(job, pod, widget)


def metadata() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"name": NAMES, "namespace": NAMES}, optional={
        "labels": st.dictionaries(NAMES, NAMES, min_size=1, max_size=2),
        "annotations": st.dictionaries(NAMES, TEXT, min_size=1, max_size=2),
        "uid": NAMES, "resourceVersion": st.sampled_from(["1", "42"]),
        "generation": st.integers(1, 5), "creationTimestamp": TIMES,
        "deletionTimestamp": TIMES, "finalizers": st.just(["workload.codeflare.dev/finalizer"])})


def condition(types: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"type": st.sampled_from(types), "status": st.sampled_from(["True", "False"])},
        optional={"reason": st.sampled_from(["Dispatched", "QuotaExceeded", "Creating",
                                             "Preempted", "WaitingForPods"]),
                  "message": TEXT, "lastTransitionTime": TIMES})


V1_CONDITIONS = ["Queued", "Dispatched", "PodsReady", "Requeuing", "Completed", "Failed",
                 "CleanupPending", "Unhealthy", "Resetting", "QuotaReserved"]


def v1_status(components: list[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    deployed = [{"apiVersion": t["apiVersion"], "kind": t["kind"], "name": t["metadata"]["name"]}
                for t in components]
    return st.fixed_dictionaries({}, optional={
        "state": st.sampled_from(["", "Pending", "Running", "RunningHoldCompletion",
                                  "Completed", "Failed", "Deleted"]),
        "message": TEXT, "pending": st.integers(0, 3), "running": st.integers(0, 3),
        "Succeeded": st.integers(0, 3), "failed": st.integers(0, 2),
        "numberOfRequeueings": st.integers(0, 4), "resettingCount": st.integers(0, 3),
        "clusterName": st.sampled_from(["", "spoke-1"]), "runId": NAMES,
        "dispatchTimestamp": TIMES, "requeueTimestamp": TIMES,
        "componentStatus": st.sampled_from([[], deployed, deployed[:1],
                                            [{"apiVersion": "v1", "kind": "Pod",
                                              "name": "elsewhere"}]]),
        "conditions": st.lists(condition(V1_CONDITIONS), max_size=4,
                               unique_by=lambda c: c["type"]),
        "topology": st.just({"levels": ["rack"], "domains": [["r1"]]}),
        "admittedPods": st.integers(0, 4)})


@st.composite
def v1beta1_appwrapper(draw: st.DrawFn) -> dict[str, Any]:
    templates = draw(st.lists(template(), max_size=3))
    items = []
    for t in templates:
        item = draw(st.fixed_dictionaries({"generictemplate": st.just(t)}, optional={
            "replicas": st.integers(0, 3), "completionstatus": st.sampled_from(["Complete", ""]),
            "custompodresources": st.just([{"replicas": 2, "requests": {"cpu": "1"}}])}))
        items.append(item)
    spec = draw(st.fixed_dictionaries({"resources": st.just({"GenericItems": items})}, optional={
        "priority": st.integers(-5, 5), "priorityslope": st.sampled_from([0.5, 1.0]),
        "schedulingSpec": st.fixed_dictionaries({}, optional={
            "minAvailable": st.integers(0, 3),
            "requeuing": st.just({"timeInSeconds": 120, "maxNumRequeuings": 2})})}))
    if draw(st.booleans()):
        spec["resources"] = {**spec["resources"], "Items": []}
    obj: dict[str, Any] = {"apiVersion": appwrapper.API_VERSION, "kind": "AppWrapper",
                           "metadata": draw(metadata()), "spec": spec}
    if draw(st.booleans()):
        obj["status"] = draw(v1_status(templates))
    return obj


def pod_sets() -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(st.fixed_dictionaries({"path": st.sampled_from(
        ["template", "template.spec.template", "template.spec.x"])}, optional={
        "replicas": st.integers(0, 4), "annotations": st.dictionaries(NAMES, NAMES, max_size=1)}),
        max_size=2)


def v2_status(templates: list[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    entry = st.builds(lambda t, ps, deployed: {
        "apiVersion": t["apiVersion"], "kind": t["kind"], "name": t["metadata"]["name"],
        "podSets": ps, "conditions": [{"type": "ResourcesDeployed",
                                       "status": "True" if deployed else "False"}]},
        st.sampled_from(templates), pod_sets(), st.booleans()) if templates else None
    return st.fixed_dictionaries({}, optional={
        "phase": st.sampled_from(["", "Suspended", "Resuming", "Running", "Resetting",
                                  "Suspending", "Succeeded", "Failed", "Terminating"]),
        "resettingCount": st.integers(0, 3),
        "conditions": st.lists(condition(["QuotaReserved", "ResourcesDeployed", "PodsReady",
                                          "Unhealthy", "DeletingResources", "Queued"]),
                               max_size=4, unique_by=lambda c: c["type"]),
        "componentStatus": st.lists(entry, max_size=3) if entry is not None else st.just([]),
        "state": st.sampled_from(["Pending", "Running"]), "clusterName": st.just("spoke-2")})


@st.composite
def v1beta2_appwrapper(draw: st.DrawFn) -> dict[str, Any]:
    templates = draw(st.lists(template(), max_size=3))
    components = [draw(st.fixed_dictionaries({"template": st.just(t)}, optional={
        "podSets": pod_sets(), "annotations": st.dictionaries(NAMES, TEXT, max_size=2),
        "podSetInfos": st.just([{"labels": {"a": "b"}, "tolerations": [{"key": "k"}]}])}))
        for t in templates]
    spec = draw(st.fixed_dictionaries({"components": st.just(components)}, optional={
        "suspend": st.booleans(), "managedBy": st.sampled_from([MCAD_CONTROLLER,
                                                                "kueue.x-k8s.io/multikueue"])}))
    obj: dict[str, Any] = {"apiVersion": appwrapper_v1beta2.API_VERSION, "kind": "AppWrapper",
                           "metadata": draw(metadata()), "spec": spec}
    if draw(st.booleans()):
        obj["status"] = draw(v2_status(templates))
    return obj


PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(v1beta1_appwrapper())
def test_v1beta1_to_v1beta2_and_back_is_the_same_object(obj: dict[str, Any]) -> None:
    there = to_v1beta2(obj)
    assert to_v1beta1(there) == obj
    json.dumps(there)  # as the webhook answers it
    appwrapper_v1beta2.AppWrapper.model_validate(there)
    assert to_v1beta2(to_v1beta1(there)) == there  # and it stays so, read after read


@PROPERTY
@given(v1beta2_appwrapper())
def test_v1beta2_to_v1beta1_and_back_is_the_same_object(obj: dict[str, Any]) -> None:
    stored = to_v1beta1(obj)
    assert to_v1beta2(stored) == obj
    json.dumps(stored)
    appwrapper.AppWrapper.model_validate(stored)
    assert to_v1beta1(to_v1beta2(stored)) == stored


def test_a_converted_object_in_the_wanted_version_is_given_back_as_it_is() -> None:
    obj = {"apiVersion": appwrapper.API_VERSION, "kind": "AppWrapper", "spec": {}}
    assert convert(obj, appwrapper.API_VERSION) == obj
    with pytest.raises(ConversionError, match="v1beta3"):
        convert(obj, "workload.codeflare.dev/v1beta3")
    with pytest.raises(ConversionError, match="not an AppWrapper version"):
        convert({"apiVersion": "v1"}, appwrapper.API_VERSION)


# -- the statuses mcad writes, in v1beta2's words --------------------------------------

JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
       "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {"containers": [
           {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}}}
CS = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train"}]
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def cond(type_: str, status: str, reason: str, message: str = "m",
         at: str = T0) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": at}


QUEUED = {"state": "Pending", "message": "quota short", "controllerfirsttimestamp": T0,
          "conditions": [cond("Queued", "True", "QuotaExceeded", "quota short")]}
DISPATCHED = {"state": "Running", "clusterName": "spoke-1", "runId": "r1",
              "dispatchTimestamp": T1, "componentStatus": CS, "dispatchedSpecHash": "h",
              "message": "dispatched to cluster spoke-1", "conditions": [
                  cond("Queued", "False", "Dispatched", at=T1),
                  cond("Dispatched", "True", "Dispatched", at=T1),
                  cond("PodsReady", "False", "WaitingForPods", at=T1)]}
RUNNING = {**DISPATCHED, "running": 2, "conditions": [
    cond("Queued", "False", "Dispatched", at=T1), cond("Dispatched", "True", "Dispatched", at=T1),
    cond("PodsReady", "True", "PodsReady", at=T1)]}
CREATING = {**DISPATCHED, "conditions": [cond("Dispatched", "True", "Creating", at=T1)]}
REQUEUING = {**RUNNING, "conditions": [*RUNNING["conditions"],
                                       cond("Requeuing", "True", "Preempted", "room", T1)]}
RESETTING = {**RUNNING, "resettingCount": 1, "conditions": [
    *RUNNING["conditions"], cond("Unhealthy", "True", "FoundFailedPods", "a pod failed", T1),
    cond("Resetting", "True", "FoundFailedPods", "a pod failed", T1)]}
COMPLETED = {**RUNNING, "state": "Completed", "running": 0, "Succeeded": 2,
             "conditions": [*RUNNING["conditions"], cond("Completed", "True", "Completed")]}
FAILED = {**RUNNING, "state": "Failed", "conditions": [
    *RUNNING["conditions"], cond("Failed", "True", "WrappedObjectFailed", "it failed")]}
REQUEUED = {**QUEUED, "componentStatus": [], "numberOfRequeueings": 1, "clusterName": "",
            "previousCluster": "spoke-1", "requeueTimestamp": T1}


def stored(status: dict[str, Any], *, deleting: bool = False, v1beta2: bool = False
           ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "aw", "namespace": "team-a", "creationTimestamp": T0}
    if deleting:
        meta["deletionTimestamp"] = T1
    if v1beta2:
        meta["annotations"] = {V1BETA2_KEPT: "{}"}
    return {"apiVersion": appwrapper.API_VERSION, "kind": "AppWrapper", "metadata": meta,
            "spec": {"resources": {"GenericItems": [{"generictemplate": JOB}]}},
            "status": status}


def types(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


@pytest.mark.parametrize(("status", "deleting", "phase", "wanted"), [
    (QUEUED, False, "Suspended", {"QuotaReserved": "False", "ResourcesDeployed": "False"}),
    (CREATING, False, "Resuming", {"QuotaReserved": "True", "ResourcesDeployed": "True"}),
    (DISPATCHED, False, "Resuming", {"QuotaReserved": "True", "PodsReady": "False"}),
    (RUNNING, False, "Running", {"QuotaReserved": "True", "ResourcesDeployed": "True",
                                 "PodsReady": "True"}),
    (REQUEUING, False, "Suspending", {"DeletingResources": "True", "QuotaReserved": "True"}),
    (RESETTING, False, "Resetting", {"DeletingResources": "True", "Unhealthy": "True"}),
    (COMPLETED, False, "Succeeded", {"QuotaReserved": "False", "ResourcesDeployed": "True"}),
    (FAILED, False, "Failed", {"QuotaReserved": "False"}),
    (REQUEUED, False, "Suspended", {"QuotaReserved": "False", "ResourcesDeployed": "False"}),
    (RUNNING, True, "Terminating", {"DeletingResources": "True"}),
], ids=["queued", "creating", "dispatched", "running", "requeuing", "resetting", "completed",
        "failed", "requeued", "deleted"])
@pytest.mark.parametrize("v1beta2", [False, True], ids=["v1beta1", "v1beta2"])
def test_the_statuses_mcad_writes_read_in_v1beta2s_words(
        status: dict[str, Any], deleting: bool, phase: str, wanted: dict[str, str],
        v1beta2: bool) -> None:
    obj = stored(status, deleting=deleting, v1beta2=v1beta2)
    there = to_v1beta2(obj)
    assert there["status"]["phase"] == phase
    assert wanted.items() <= types(there["status"]).items()
    assert [c["type"] for c in there["status"]["conditions"]][:2] == [
        "QuotaReserved", "ResourcesDeployed"]
    # mcad's own facts stay in sight under their v1beta1 names
    assert there["status"]["state"] == status["state"]
    assert there["status"].get("resettingCount", 0) == status.get("resettingCount", 0)
    # nothing is kept aside: the v1beta2 status reads back into mcad's exactly
    kept = json.loads((there["metadata"].get("annotations") or {}).get(V1BETA1_KEPT, "{}"))
    assert "status" not in kept
    assert to_v1beta1(there) == obj
    appwrapper_v1beta2.AppWrapper.model_validate(there)


def test_component_status_parallels_the_components_with_their_podsets() -> None:
    there = to_v1beta2(stored(RUNNING))
    (entry,) = there["status"]["componentStatus"]
    assert entry["name"] == "train" and entry["kind"] == "Job"
    assert entry["podSets"] == [{"path": "template.spec.template", "replicas": 2}]
    assert types(entry) == {"ResourcesDeployed": "True"}
    assert types(to_v1beta2(stored(REQUEUED))["status"]["componentStatus"][0]) == {
        "ResourcesDeployed": "False"}


def test_a_v1beta2_appwrapper_is_stored_with_what_only_v1beta2_says() -> None:
    sample = {"apiVersion": appwrapper_v1beta2.API_VERSION, "kind": "AppWrapper",
              "metadata": {"name": "s", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
              "spec": {"suspend": True, "managedBy": MCAD_CONTROLLER, "components": [
                  {"template": JOB, "podSets": [{"path": "template.spec.template",
                                                 "replicas": 2}]},
                  {"template": {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "c"}}, "annotations": {"a": "b"}}]}}
    kept = to_v1beta1(sample)
    config_map = sample["spec"]["components"][1]["template"]
    assert kept["spec"] == {"resources": {"GenericItems": [
        {"generictemplate": JOB}, {"generictemplate": config_map}]}}
    facts = kept_facts(kept["metadata"]["annotations"])
    assert facts is not None and facts.written_as_v1beta2 and facts.suspend
    assert facts.pod_sets == ((DeclaredPodSet("template.spec.template", 2),), None)
    assert not facts.managed_elsewhere
    assert kept_facts({}) is None and kept_facts({V1BETA2_KEPT: "not json"}) is None


def test_a_v1beta1_appwrapper_read_and_written_as_v1beta2_stays_a_v1beta1_one() -> None:
    mine = stored(RUNNING)
    mine["spec"]["priority"] = 5
    there = to_v1beta2(mine)
    assert json.loads(there["metadata"]["annotations"][V1BETA1_KEPT]) == {"spec": {
        "priority": 5, "resources": {"GenericItems": [{}]}}}
    there["spec"]["suspend"] = True  # kubectl edit through v1beta2, kubectl's default
    back = to_v1beta1(there)
    assert back["spec"]["priority"] == 5
    facts = kept_facts(back["metadata"]["annotations"])
    assert facts is not None and facts.suspend and not facts.written_as_v1beta2
    assert kept_facts(to_v1beta1(to_v1beta2(back))["metadata"]["annotations"]) == facts


def test_managed_by_another_controller_is_told_apart() -> None:
    facts = kept_facts({V1BETA2_KEPT: json.dumps({"managedBy": "kueue.x-k8s.io/multikueue"})})
    assert facts is not None and facts.managed_elsewhere
