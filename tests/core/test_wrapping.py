"""What gets created for an AppWrapper: labels everywhere pods come from, and refusals
(before anything is created) for kinds and namespaces an AppWrapper may not use; and how
a wrapped object's end is read (conditions, or a RayJob's own status)."""

from __future__ import annotations

from typing import Any

import pytest

from mcad.core.life.completion import ItemState
from mcad.core.life.wrapping import (
    NAME_LABEL,
    RESOURCE_NAME_LABEL,
    UID_LABEL,
    Refusal,
    WrappedObject,
    is_ours,
    owned_by,
    reported_conditions,
    wrapped_objects,
)


def spec(*templates: dict[str, Any]) -> dict[str, Any]:
    return {"resources": {"GenericItems": [{"generictemplate": t} for t in templates]}}


def job(name: str = "train", namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"team": "a"}}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"template": {"metadata": {"labels": {"app": "x"}},
                                  "spec": {"containers": [{"name": "c"}]}}},
            "status": {"active": 1}}


def plan(*templates: dict[str, Any], allowed: bool = True) -> list[WrappedObject] | Refusal:
    return wrapped_objects(name="aw", namespace="ns", uid="u-1", spec=spec(*templates),
                           kind_allowed=lambda _v, _k: allowed)


def test_objects_and_pod_templates_carry_the_appwrapper_identity() -> None:
    planned = plan(job())
    assert isinstance(planned, list)
    (obj,) = planned
    manifest = obj.manifest
    assert manifest["metadata"]["namespace"] == "ns"
    identity = {NAME_LABEL: "aw", RESOURCE_NAME_LABEL: "train",
                "workload.codeflare.dev/appwrapper": "aw", UID_LABEL: "u-1"}
    assert manifest["metadata"]["labels"] == {"team": "a", **identity}
    # As MCAD: the object's labels go onto its pods as well.
    assert manifest["spec"]["template"]["metadata"]["labels"] == {"team": "a", "app": "x",
                                                                   **identity}
    assert "status" not in manifest
    assert is_ours(manifest, uid="u-1") and not is_ours(manifest, uid="other")


def test_nested_pod_templates_of_any_kind_are_labelled() -> None:
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "js"},
              "spec": {"replicatedJobs": [{"template": {"spec": {"template": {
                  "spec": {"containers": [{"name": "c"}]}}}}}]}}
    planned = plan(jobset)
    assert isinstance(planned, list)
    inner = planned[0].manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert inner["metadata"]["labels"][UID_LABEL] == "u-1"


def test_a_deployment_selecting_its_objects_labels_is_valid_after_the_merge() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "labels": {"app": "web", "tier": "front"}},
                  "spec": {"selector": {"matchLabels": {"app": "web"}},
                           "template": {"metadata": {"labels": {"tier": "back",
                                                                 "role": "server"}},
                                        "spec": {"containers": [{"name": "c"}]}}}}
    planned = plan(deployment)
    assert isinstance(planned, list)
    pod_labels = planned[0].manifest["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["app"] == "web"      # the selector matches now
    assert pod_labels["tier"] == "front"   # on a key both set, the object's value wins
    assert pod_labels["role"] == "server"  # a key only the template sets is kept
    assert pod_labels[RESOURCE_NAME_LABEL] == "web"


def test_the_objects_label_wins_over_the_templates_as_under_mcad() -> None:
    """MCAD's addLabelsToPodTemplateField writes the object's labels over the
    template's: a selector of app=trainer matches a template that said app=echo."""
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "trainer", "labels": {"app": "trainer"}},
                  "spec": {"selector": {"matchLabels": {"app": "trainer"}},
                           "template": {"metadata": {"labels": {"app": "echo"}},
                                        "spec": {"containers": [{"name": "c"}]}}}}
    planned = plan(deployment)
    assert isinstance(planned, list)
    assert planned[0].manifest["spec"]["template"]["metadata"]["labels"]["app"] == "trainer"


def test_a_name_too_long_for_a_label_value_gets_no_resource_name_label() -> None:
    planned = plan(job("x" * 64))
    assert isinstance(planned, list)
    assert RESOURCE_NAME_LABEL not in planned[0].manifest["metadata"]["labels"]


def test_owned_by_adds_a_controller_reference_and_leaves_the_plan_alone() -> None:
    planned = plan(job())
    assert isinstance(planned, list)
    owned = owned_by(planned[0].manifest, name="aw", uid="u-1")
    assert owned["metadata"]["ownerReferences"] == [{
        "apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper", "name": "aw",
        "uid": "u-1", "controller": True, "blockOwnerDeletion": True}]
    assert "ownerReferences" not in planned[0].manifest["metadata"]


def test_the_template_given_is_not_changed() -> None:
    original = job()
    plan(original)
    assert original["metadata"]["labels"] == {"team": "a"}


@pytest.mark.parametrize(("template", "allowed", "want_reason"), [
    pytest.param(job(namespace="other"), True, "ForeignNamespace", id="other-namespace"),
    pytest.param({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                  "metadata": {"name": "r"}}, True, "ClusterScoped", id="cluster-scoped"),
    pytest.param(job(), False, "KindNotAllowed", id="kind-not-allowed"),
    pytest.param({"apiVersion": "v1", "kind": "Pod", "metadata": {}}, True, "InvalidItem",
                 id="no-name"),
])
def test_refusals(template: dict[str, Any], allowed: bool, want_reason: str) -> None:
    refused = plan(job("fine"), template, allowed=allowed)
    assert isinstance(refused, Refusal)
    assert refused.reason == want_reason
    assert "GenericItems[" in refused.message


def test_same_namespace_named_explicitly_is_fine() -> None:
    assert isinstance(plan(job(namespace="ns")), list)


def test_custompodresources_without_a_template_create_nothing() -> None:
    planned = wrapped_objects(name="aw", namespace="ns", uid="u", kind_allowed=lambda *_: True,
                              spec={"resources": {"GenericItems": [
                                  {"custompodresources": [{"replicas": 1}]}]}})
    assert planned == []


def test_a_job_without_completionstatus_completes_on_its_own_complete_condition() -> None:
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}
    planned = plan(job(), configmap)
    assert isinstance(planned, list)
    assert [w.completion for w in planned] == [("Complete",), ()]


def test_a_given_completionstatus_wins_over_the_kinds_own() -> None:
    planned = wrapped_objects(name="aw", namespace="ns", uid="u", kind_allowed=lambda *_: True,
                              spec={"resources": {"GenericItems": [
                                  {"completionstatus": "Complete,Failed",
                                   "generictemplate": job()}]}})
    assert isinstance(planned, list)
    assert planned[0].completion == ("Complete", "Failed")


def test_a_rayjob_without_completionstatus_completes_on_its_own_status() -> None:
    rayjob = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj"},
              "spec": {"entrypoint": "python train.py"}}
    planned = plan(rayjob)
    assert isinstance(planned, list)
    assert planned[0].completion == ("Complete",)


@pytest.mark.parametrize(("api_version", "kind", "status", "want_complete", "want_failed"), [
    # A RayJob ends by jobDeploymentStatus and jobStatus (KubeRay writes no conditions).
    ("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"},
     True, False),
    ("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED"},
     False, True),
    ("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Failed", "jobStatus": "RUNNING",
                             "reason": "DeadlineExceeded"}, False, True),
    ("ray.io/v1", "RayJob", {"jobDeploymentStatus": "ValidationFailed"}, False, True),
    ("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"},
     False, True),
    # Not an end yet: running, the submitter still running after the Ray job succeeded,
    # and a failed Ray job that KubeRay retries (its backoffLimit).
    ("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"},
     False, False),
    ("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Running", "jobStatus": "SUCCEEDED"},
     False, False),
    ("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Retrying", "jobStatus": "FAILED"},
     False, False),
    ("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Initializing"}, False, False),
    ("ray.io/v1", "RayJob", {}, False, False),
    ("ray.io/v1", "RayJob", None, False, False),
    # Other kinds: their conditions, whatever their status says besides.
    ("batch/v1", "Job", {"conditions": [{"type": "Complete", "status": "True"}]},
     True, False),
    ("batch/v1", "Job", {"conditions": [{"type": "Failed", "status": "True"}]},
     False, True),
    ("example.com/v1", "RayJob", {"jobDeploymentStatus": "Complete",
                                  "jobStatus": "SUCCEEDED"}, False, False),
])
def test_how_a_wrapped_object_ends(api_version: str, kind: str, status: dict[str, Any] | None,
                                   want_complete: bool, want_failed: bool) -> None:
    item = ItemState(("Complete",), reported_conditions(api_version, kind, status))
    assert (item.complete, item.failed) == (want_complete, want_failed)


def test_a_service_account_token_secret_is_refused_unless_allowed() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "tok", "annotations": {"kubernetes.io/service-account.name": "admin"}},
        "type": "kubernetes.io/service-account-token"}
    refused = plan(secret)
    assert isinstance(refused, Refusal) and refused.reason == "KindNotAllowed"
    assert "allowServiceAccountTokenSecrets" in refused.message
    allowed = wrapped_objects(name="aw", namespace="ns", uid="u", spec=spec(secret),
                              kind_allowed=lambda *_: True, token_secrets_allowed=True)
    assert isinstance(allowed, list)
    plain = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
             "stringData": {"a": "b"}}
    assert isinstance(plan(plain), list)


def test_the_plan_shares_what_it_does_not_change_with_the_spec() -> None:
    """No deep copy per plan (a quarter of the CPU per dispatch at scale): containers
    and other parts without labels to write are the spec's own objects."""
    template = job()
    planned = plan(template)
    assert isinstance(planned, list)
    pod_spec = planned[0].manifest["spec"]["template"]["spec"]
    assert pod_spec["containers"] is template["spec"]["template"]["spec"]["containers"]
    assert planned[0].manifest["metadata"] is not template["metadata"]
