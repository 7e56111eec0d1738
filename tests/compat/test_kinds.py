"""MCAD's YAML reaches the same API objects under mcad: the "same" rows of
docs/mcad-compatibility.md sections 1 to 3 about kinds, names, scope, the QuotaSubtree
versions, the state before the controller looks and the state values.

MCAD's side, as read in its CRDs (config/crd/bases) and API types
(pkg/apis/controller/v1beta1/appwrapper.go): AppWrapper is ``appwrappers`` /
``appwrapper``, namespaced, with a status subresource and no default anywhere in its
status; QuotaSubtree is ``quotasubtrees`` / ``quotasubtree``, namespaced, served as
``quota.codeflare.dev/v1`` by v1.34.1 and v1.35 and as ``v1alpha1`` from v1.36; the
states are Pending, Running, Deleted, Failed, Completed and RunningHoldCompletion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mcad.api import crds
from mcad.api.appwrapper import AppWrapper, AppWrapperStatus
from mcad.api.documents import parse_object
from mcad.api.quotasubtree import QuotaSubtree
from tests.compat.mcad_yaml import FIXTURES, documents

MCAD_NAMES = {
    "AppWrapper": {"plural": "appwrappers", "singular": "appwrapper",
                   "listKind": "AppWrapperList"},
    "QuotaSubtree": {"plural": "quotasubtrees", "singular": "quotasubtree",
                     "listKind": "QuotaSubtreeList"},
}
MCAD_STATES = {"Pending", "Running", "Deleted", "Failed", "Completed",
               "RunningHoldCompletion"}
MCAD_DOCS = [(path.name, i, doc) for path in sorted(FIXTURES.glob("*.yaml"))
             for i, doc in enumerate(documents(path.name))]


def crd_serving(api_version: str, kind: str) -> dict[str, Any]:
    """The committed CRD (what the API server is given) that serves this apiVersion."""
    group, _, version = api_version.rpartition("/")
    for resource in crds.RESOURCES:
        if resource.group == group and resource.kind == kind and version in resource.versions:
            crd: dict[str, Any] = yaml.safe_load(
                (crds.DEFAULT_DIR / resource.filename).read_text())
            return crd
    raise AssertionError(f"no CRD serves {kind} {api_version}")


@pytest.mark.parametrize(("name", "index", "doc"), MCAD_DOCS,
                         ids=[f"{n}[{i}]" for n, i, _ in MCAD_DOCS])
def test_mcad_yaml_reaches_a_crd_with_mcads_names_and_scope(
        name: str, index: int, doc: dict[str, Any]) -> None:
    crd = crd_serving(doc["apiVersion"], doc["kind"])
    names = crd["spec"]["names"]
    assert {k: names[k] for k in ("plural", "singular", "listKind")} == MCAD_NAMES[doc["kind"]]
    assert crd["spec"]["scope"] == "Namespaced"


def test_quota_subtrees_are_served_in_both_versions_mcad_served() -> None:
    """v1 (MCAD v1.34.1 and v1.35, its quick start) and v1alpha1 (v1.36 on, its tests)."""
    served = {v["name"] for v in crd_serving("quota.codeflare.dev/v1", "QuotaSubtree")
              ["spec"]["versions"] if v["served"]}
    assert served == {"v1", "v1alpha1"}
    by_version = {doc["apiVersion"]: doc for _, _, doc in MCAD_DOCS
                  if doc["kind"] == "QuotaSubtree"}
    assert set(by_version) == {"quota.codeflare.dev/v1", "quota.codeflare.dev/v1alpha1"}
    for doc in by_version.values():
        assert parse_object(doc).problems == ()
        assert QuotaSubtree.model_validate(doc).tree in ("quota_context", "quota_service")


def test_before_the_controller_looks_an_appwrapper_has_no_state() -> None:
    """Status is a subresource (a status sent with the object at creation is dropped) and
    nothing in it has a default at the top, so a new AppWrapper has no state, as under
    MCAD, until the controller writes one."""
    crd = crd_serving("workload.codeflare.dev/v1beta1", "AppWrapper")
    for version in crd["spec"]["versions"]:
        assert version["subresources"] == {"status": {}}
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert "default" not in status
        assert "default" not in status["properties"]["state"]
    for path in sorted(Path(FIXTURES).glob("aw-*.yaml")):
        (doc,) = documents(path.name)
        assert "status" not in doc
        assert AppWrapper.model_validate(doc).status.state in ("", None)


def test_the_states_are_mcads() -> None:
    crd = crd_serving("workload.codeflare.dev/v1beta1", "AppWrapper")
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    state = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["state"]
    assert set(state["enum"]) == MCAD_STATES | {""}
    for value in sorted(MCAD_STATES):
        assert AppWrapperStatus.model_validate({"state": value}).state == value


def test_a_policy_result_is_kept_and_named_as_doing_nothing() -> None:
    """No MCAD release declares clusterScheduling.policyResult (newer MCAD's CRD has no
    clusterScheduling at all, so the API server drops it); mcad keeps it and says so."""
    (doc,) = documents("aw-cluster-scheduling.yaml")
    doc["spec"]["schedulingSpec"]["clusterScheduling"]["policyResult"] = {
        "targetCluster": {"name": "helloworld"}}
    parsed = parse_object(doc)
    assert parsed.problems == ()
    assert "spec.schedulingSpec.clusterScheduling.policyResult: accepted for MCAD " \
           "compatibility and not acted on (the chosen cluster is status.clusterName)" \
           in parsed.notes
