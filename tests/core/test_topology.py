"""What an AppWrapper asks of topology (schedulingSpec.topology, Kueue's pod-template
annotations), the sentences that refuse a malformed wish, and the pin: its node
affinity in every pod template, next to the affinity a template already has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from mcad.core.workload.demand import DemandError, appwrapper_demand
from mcad.core.workload.topology import (
    PREFERRED_ANNOTATION,
    REQUIRED_ANNOTATION,
    TopologyError,
    TopologyPin,
    TopologyRequest,
    pinned,
    topology_request,
)
from tests.builders.appwrappers import make_appwrapper, pod_template
from tests.builders.clusters import BLOCK, RACK

KUEUE_RACK = "cloud.provider.com/topology-rack"


@dataclass
class RequestCase:
    id: str
    spec: dict[str, Any]
    want: TopologyRequest | None = None
    want_error: str | None = None


def _with_jobset_annotations(first: dict[str, str], second: dict[str, str]) -> dict[str, Any]:
    aw = make_appwrapper("t").jobset((1, 2), name="js", gpu=8)
    spec = aw.spec()
    jobs = spec["resources"]["GenericItems"][0]["generictemplate"]["spec"]["replicatedJobs"]
    jobs.append({"name": "rj1", "replicas": 1, "template": {"spec": {
        "parallelism": 1, "template": pod_template(gpu=8, annotations=second)}}})
    jobs[0]["template"]["spec"]["template"]["metadata"] = {"annotations": first}
    return spec


REQUESTS = [
    RequestCase("nothing asked", make_appwrapper("t").job(pods=2, gpu=8).spec()),
    RequestCase(
        "schedulingSpec.topology.required",
        make_appwrapper("t").job(pods=2, gpu=8).topology(required=RACK).spec(),
        want=TopologyRequest(RACK, True, "spec.schedulingSpec.topology.required")),
    RequestCase(
        "schedulingSpec.topology.preferred",
        make_appwrapper("t").job(pods=2, gpu=8).topology(preferred=BLOCK).spec(),
        want=TopologyRequest(BLOCK, False, "spec.schedulingSpec.topology.preferred")),
    RequestCase(
        "both required and preferred",
        make_appwrapper("t").job(gpu=8).topology(required=RACK, preferred=BLOCK).spec(),
        want_error="spec.schedulingSpec.topology must give exactly one of required and "
                   "preferred (a node label key, such as kubernetes.io/hostname)"),
    RequestCase(
        "neither", make_appwrapper("t").job(gpu=8).topology().spec(),
        want_error="spec.schedulingSpec.topology must give exactly one of required and "
                   "preferred"),
    RequestCase(
        "a level that is no label key",
        make_appwrapper("t").job(gpu=8).topology(required="rack with spaces").spec(),
        want_error="spec.schedulingSpec.topology.required: 'rack with spaces' is not a "
                   "label key"),
    RequestCase(
        "Kueue's required annotation on a Job's pod template",
        make_appwrapper("t").job(pods=2, gpu=8, name="train",
                                 annotations={REQUIRED_ANNOTATION: KUEUE_RACK}).spec(),
        want=TopologyRequest(KUEUE_RACK, True, f"the annotation {REQUIRED_ANNOTATION} on "
                                               "GenericItems[0] Job/train")),
    RequestCase(
        "Kueue's preferred annotation on a bare Pod",
        make_appwrapper("t").item({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "annotations": {PREFERRED_ANNOTATION: BLOCK}},
            "spec": pod_template(gpu=1)["spec"]}).spec(),
        want=TopologyRequest(BLOCK, False, f"the annotation {PREFERRED_ANNOTATION} on "
                                           "GenericItems[0] Pod/p")),
    RequestCase(
        "templates that agree on one level",
        _with_jobset_annotations({REQUIRED_ANNOTATION: RACK}, {REQUIRED_ANNOTATION: RACK}),
        want=TopologyRequest(RACK, True, f"the annotation {REQUIRED_ANNOTATION} on "
                                         "GenericItems[0] JobSet/js")),
    RequestCase(
        "required wins over a preferred one on another template",
        _with_jobset_annotations({PREFERRED_ANNOTATION: BLOCK}, {REQUIRED_ANNOTATION: RACK}),
        want=TopologyRequest(RACK, True, f"the annotation {REQUIRED_ANNOTATION} on "
                                         "GenericItems[0] JobSet/js")),
    RequestCase(
        "templates that ask for two levels",
        _with_jobset_annotations({REQUIRED_ANNOTATION: RACK}, {REQUIRED_ANNOTATION: BLOCK}),
        want_error=f"the pod templates ask for different levels with {REQUIRED_ANNOTATION} "
                   f"({BLOCK} on GenericItems[0] JobSet/js; {RACK} on GenericItems[0] "
                   "JobSet/js); mcad places the whole gang in one domain"),
    RequestCase(
        "schedulingSpec.topology is the only word when given",
        make_appwrapper("t").job(gpu=8, annotations={REQUIRED_ANNOTATION: RACK})
        .topology(preferred=BLOCK).spec(),
        want=TopologyRequest(BLOCK, False, "spec.schedulingSpec.topology.preferred")),
]


@pytest.mark.parametrize("case", REQUESTS, ids=lambda c: c.id)
def test_what_an_appwrapper_asks(case: RequestCase) -> None:
    if case.want_error is not None:
        with pytest.raises(TopologyError) as err:
            topology_request(case.spec)
        assert str(err.value).startswith(case.want_error)
        return
    assert topology_request(case.spec) == case.want


def test_the_demand_carries_the_wish_and_refuses_a_malformed_one() -> None:
    asked = appwrapper_demand(make_appwrapper("t").job(pods=2, gpu=8)
                              .topology(required=RACK).spec())
    assert asked.topology == TopologyRequest(RACK, True,
                                             "spec.schedulingSpec.topology.required")
    with pytest.raises(DemandError, match="must give exactly one of required and preferred"):
        appwrapper_demand(make_appwrapper("t").job(gpu=8).topology().spec())


# -- the pin -----------------------------------------------------------------------------

RACKS = TopologyPin((BLOCK, RACK), (("b1", "r1"), ("b1", "r2"), ("b2", "r1")))


def test_a_pin_holds_the_nodes_of_its_domains_by_their_whole_path() -> None:
    assert RACKS.holds({BLOCK: "b1", RACK: "r2", "other": "x"})
    assert RACKS.holds({BLOCK: "b2", RACK: "r1"})
    assert not RACKS.holds({BLOCK: "b2", RACK: "r2"}), "r2 is pinned in b1 only"
    assert not RACKS.holds({RACK: "r1"}), "a node without the block label is outside"


def test_a_pin_becomes_one_node_selector_term_per_parent() -> None:
    assert RACKS.node_selector_terms() == [
        {"matchExpressions": [{"key": BLOCK, "operator": "In", "values": ["b1"]},
                              {"key": RACK, "operator": "In", "values": ["r1", "r2"]}]},
        {"matchExpressions": [{"key": BLOCK, "operator": "In", "values": ["b2"]},
                              {"key": RACK, "operator": "In", "values": ["r1"]}]}]


def test_a_pin_goes_to_the_status_and_back() -> None:
    assert TopologyPin.from_status(RACKS.to_status()) == RACKS
    assert TopologyPin.from_status(None) is None
    assert TopologyPin.from_status({"levels": [BLOCK], "domains": [["b1", "r1"]]}) is None
    assert TopologyPin.from_status({"levels": [BLOCK], "domains": []}) is None


def _job(template: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"parallelism": 2, "template": template}}


def _terms(template: dict[str, Any]) -> Any:
    return template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_the_pin_is_a_required_node_affinity_in_every_pod_template() -> None:
    pin = TopologyPin((BLOCK, RACK), (("b2", "r1"),))
    job = _job(pod_template(gpu=8))
    out = pinned(job, pin)
    assert _terms(out["spec"]["template"]) == pin.node_selector_terms()
    assert "affinity" not in job["spec"]["template"]["spec"], "the input is not changed"
    assert out["spec"]["template"]["spec"]["containers"] is \
        job["spec"]["template"]["spec"]["containers"], "what it does not change is shared"
    assert pinned(job, None) is job


def test_a_bare_pod_is_pinned_in_its_own_spec() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": pod_template(gpu=1)["spec"]}
    out = pinned(pod, RACKS)
    assert out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == \
        RACKS.node_selector_terms()


def test_a_template_s_own_node_affinity_must_hold_as_well() -> None:
    own = [{"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["a100"]}]},
           {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["h100"]}],
            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]}]
    template = pod_template(gpu=8)
    template["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": own}}}
    pin = TopologyPin((RACK,), (("r1",), ("r2",)))
    terms = _terms(pinned(_job(template), pin)["spec"]["template"])
    rack = {"key": RACK, "operator": "In", "values": ["r1", "r2"]}
    assert terms == [
        {"matchExpressions": [own[0]["matchExpressions"][0], rack]},
        {"matchExpressions": [own[1]["matchExpressions"][0], rack],
         "matchFields": own[1]["matchFields"]}]
