"""The models read MCAD v1 YAML as MCAD's own docs and tests write it, keep it verbatim,
default what MCAD defaulted, and say in one sentence what is wrong with bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mcad.api.appwrapper import AppWrapper, AppWrapperStatus
from mcad.api.documents import parse_object
from mcad.api.meta import LabelSelector
from mcad.api.quotasubtree import QuotaSubtree
from mcad.api.spokecluster import SpokeCluster

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MCAD_V1 = sorted((FIXTURES / "mcad-v1").glob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def load(name: str) -> dict[str, Any]:
    (doc,) = documents(FIXTURES / "mcad-v1" / name)
    return doc


@pytest.mark.parametrize("path", MCAD_V1, ids=lambda p: p.name)
def test_mcad_v1_fixtures_are_accepted_without_problems_or_unknown_fields(path: Path) -> None:
    for doc in documents(path):
        parsed = parse_object(doc)
        assert parsed.problems == ()
        unknown = [n for n in parsed.notes if "not acted on" not in n]
        assert unknown == []
        assert parsed.model is not None


def test_legacy_fields_mcad_never_acted_on_are_each_named_with_what_to_use() -> None:
    (doc,) = documents(FIXTURES / "mcad-v1" / "aw-statefulset-legacy-fields.yaml")
    notes = parse_object(doc).notes
    assert "spec.service: accepted for MCAD compatibility and not acted on (wrap a Service " \
           "as a GenericItem)" in notes
    assert all(": accepted for MCAD compatibility and not acted on (" in n for n in notes)


@pytest.mark.parametrize("path", MCAD_V1, ids=lambda p: p.name)
def test_what_was_written_is_what_is_dumped(path: Path) -> None:
    for doc in documents(path):
        parsed = parse_object(doc)
        assert parsed.model is not None
        assert parsed.model.model_dump(by_alias=True, exclude_unset=True, mode="json") == doc


def test_wire_names_reach_the_python_attributes() -> None:
    aw = AppWrapper.model_validate(load("aw-job-quota.yaml"))
    item = aw.spec.resources.generic_items[0]
    assert aw.metadata.labels == {"quota_context": "bronze", "quota_service": "gold"}
    assert aw.spec.scheduling_spec.min_available == 1
    assert item.replicas == 1
    assert item.completion_conditions() == ("Complete",)
    assert item.custom_pod_resources[0].requests == {
        "cpu": "900m", "nvidia.com/gpu": 0, "memory": "300Mi"}
    assert item.generic_template["kind"] == "Job"


def test_requeuing_defaults_are_mcads_when_absent() -> None:
    aw = AppWrapper.model_validate(load("aw-job-quota.yaml"))
    requeuing = aw.spec.scheduling_spec.requeuing
    assert (requeuing.time_in_seconds, requeuing.max_time_in_seconds, requeuing.growth_type,
            requeuing.max_num_requeuings, requeuing.pause_time_in_seconds,
            requeuing.force_deletion_time_in_seconds) == (300, 0, "exponential", 0, 90, 570)


def test_requeuing_as_written_overrides_the_defaults() -> None:
    aw = AppWrapper.model_validate(load("aw-requeuing-init-containers.yaml"))
    requeuing = aw.spec.scheduling_spec.requeuing
    assert (requeuing.time_in_seconds, requeuing.growth_type, requeuing.max_num_requeuings,
            requeuing.pause_time_in_seconds) == (60, "exponential", 0, 90)


def test_priority_and_cluster_scheduling() -> None:
    sample = AppWrapper.model_validate(load("aw-pod-custompodresources.yaml"))
    assert sample.spec.priority == 5
    assert sample.spec.scheduling_spec.requeuing.max_num_requeuings == 5
    pinned = AppWrapper.model_validate(load("aw-cluster-scheduling.yaml"))
    scheduling = pinned.spec.scheduling_spec.cluster_scheduling
    assert scheduling is not None
    assert [c.name for c in scheduling.clusters] == ["helloworld"]


def test_legacy_fields_are_accepted_and_kept() -> None:
    aw = AppWrapper.model_validate(load("aw-statefulset-legacy-fields.yaml"))
    assert aw.spec.service is not None and aw.spec.service.spec == {}
    assert aw.spec.resources.metadata == {}
    assert aw.spec.resources.generic_items[0].metadata == {}


def test_status_uses_mcads_wire_names_and_ours() -> None:
    wire = {
        "state": "Running", "pending": 1, "running": 3, "Succeeded": 2, "failed": 0,
        "numberOfRequeueings": 1, "requeueingTimeInSeconds": 600,
        "controllerfirsttimestamp": "2024-05-01T10:00:00.123456Z",
        "clusterName": "spoke-east", "dispatchTimestamp": "2024-05-01T10:00:05Z",
        "conditions": [{"type": "Dispatched", "status": "True", "reason": "Dispatched",
                        "message": "dispatched to spoke-east",
                        "lastTransitionTime": "2024-05-01T10:00:05Z"}],
    }
    status = AppWrapperStatus.model_validate(wire)
    assert (status.succeeded, status.number_of_requeueings, status.cluster_name) == (
        2, 1, "spoke-east")
    dumped = status.model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert dumped["Succeeded"] == 2
    assert "succeeded" not in dumped
    assert AppWrapperStatus(succeeded=4).model_dump(by_alias=True)["Succeeded"] == 4


def test_an_unknown_state_is_rejected() -> None:
    with pytest.raises(ValueError, match="state"):
        AppWrapperStatus.model_validate({"state": "Sleeping"})


def test_quota_subtree_in_both_served_versions() -> None:
    docs = documents(FIXTURES / "mcad-v1" / "quota-tree.yaml")
    trees = [QuotaSubtree.model_validate(d) for d in docs]
    assert [t.tree for t in trees] == ["quota_context", "quota_context"]
    children = trees[1].spec.children
    assert [(c.name, c.quotas.hard_limit) for c in children] == [("alpha", False), ("beta", True)]
    alpha = {**docs[1], "apiVersion": "quota.codeflare.dev/v1alpha1"}
    assert QuotaSubtree.model_validate(alpha).spec.parent == "context-root"


def spoke(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "cluster.codeflare.dev/v1alpha1", "kind": "SpokeCluster",
            "metadata": {"name": "s"}, "spec": spec}


def test_a_remote_spoke_reads_key_kubeconfig_by_default() -> None:
    remote = SpokeCluster.model_validate(spoke({"kubeconfigSecret": {"name": "east"}}))
    assert remote.spec.kubeconfig_secret is not None
    assert remote.spec.kubeconfig_secret.key == "kubeconfig"
    assert remote.spec.local is False
    assert not remote.ready()


def test_a_local_spoke_is_the_hub() -> None:
    local = SpokeCluster.model_validate(spoke({"local": True, "labels": {"zone": "west"}}))
    assert local.spec.kubeconfig_secret is None
    assert local.spec.labels == {"zone": "west"}


@pytest.mark.parametrize(("spec", "want"), [
    ({}, "spec.local: is not true and there is no kubeconfigSecret"),
    ({"local": True, "kubeconfigSecret": {"name": "x"}},
     "spec.kubeconfigSecret: is set together with local: true"),
    ({"kubeconfigSecret": {"name": ""}}, "spec.kubeconfigSecret.name: must not be empty"),
])
def test_a_spoke_names_exactly_one_way_to_reach_it(spec: dict[str, Any], want: str) -> None:
    (problem,) = parse_object(spoke(spec)).problems
    assert problem.startswith(want)


def aw_with_requests(requests: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
            "metadata": {"name": "q"},
            "spec": {"resources": {"GenericItems": [{
                "custompodresources": [{"replicas": 1, "requests": requests}],
                "generictemplate": {"apiVersion": "v1", "kind": "Pod"}}]}}}


WHERE = "spec.resources.GenericItems[0].custompodresources[0].requests"


@pytest.mark.parametrize(("value", "want"), [
    (8, None), ("500m", None), ("4Gi", None), ("1e3", None), (2.0, None), (0, None),
    ("eight", f'{WHERE}.nvidia.com/gpu: "eight" is not a quantity'),
    (0.5, f"{WHERE}.nvidia.com/gpu: 0.5 is a fractional number"),
    ("-1", f'{WHERE}.nvidia.com/gpu: "-1" is negative'),
    (True, f"{WHERE}.nvidia.com/gpu: true is not a quantity"),
    ([1], f"{WHERE}.nvidia.com/gpu: a list is not a quantity"),
])
def test_quantities_are_checked_with_the_field_named(value: Any, want: str | None) -> None:
    problems = parse_object(aw_with_requests({"nvidia.com/gpu": value})).problems
    if want is None:
        assert problems == ()
    else:
        (problem,) = problems
        assert problem.startswith(want)


def test_a_misspelled_field_is_a_note_not_a_failure() -> None:
    doc = load("aw-pod-custompodresources.yaml")
    doc["spec"]["schedulingSpec"]["minAvaliable"] = 2
    parsed = parse_object(doc)
    assert parsed.problems == ()
    (note,) = parsed.notes
    assert note.startswith("spec.schedulingSpec.minAvaliable: is not a field of AppWrapper")


def test_a_name_is_required() -> None:
    doc = load("aw-pod-custompodresources.yaml")
    del doc["metadata"]["name"]
    assert parse_object(doc).problems == ("metadata.name: is required",)
    doc["metadata"]["generateName"] = "sample-"
    assert parse_object(doc).problems == ()


@pytest.mark.parametrize(("selector", "labels", "want"), [
    ({}, {}, True),
    ({"matchLabels": {"zone": "east"}}, {"zone": "east", "gpu": "a100"}, True),
    ({"matchLabels": {"zone": "east"}}, {"zone": "west"}, False),
    ({"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100", "h100"]}]},
     {"gpu": "h100"}, True),
    ({"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}, {}, False),
    ({"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["t4"]}]}, {}, True),
    ({"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["t4"]}]},
     {"gpu": "t4"}, False),
    ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {"gpu": ""}, True),
    ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, {"gpu": ""}, False),
])
def test_label_selector(selector: dict[str, Any], labels: dict[str, str], want: bool) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is want


@pytest.mark.parametrize(("requirement", "want"), [
    ({"key": "gpu", "operator": "In"}, "values: is empty; operator In needs at least one value"),
    ({"key": "gpu", "operator": "Exists", "values": ["a"]},
     "values: must be empty for operator Exists"),
    ({"key": "gpu", "operator": "Like", "values": ["a"]}, 'operator: "Like" is not one of'),
])
def test_bad_cluster_selectors_are_sentences(requirement: dict[str, Any], want: str) -> None:
    doc = load("aw-cluster-scheduling.yaml")
    doc["spec"]["schedulingSpec"]["clusterScheduling"]["clusterSelector"] = {
        "matchExpressions": [requirement]}
    (problem,) = parse_object(doc).problems
    assert problem.startswith(
        "spec.schedulingSpec.clusterScheduling.clusterSelector.matchExpressions[0]." + want)
