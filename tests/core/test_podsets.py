"""v1beta2's podSets: paths in its grammar, inference per kind (as project-codeflare/
appwrapper's InferPodSets for the kinds it knows), declared podSets checked against the
template, and the demand of a component counted by them."""

from __future__ import annotations

from typing import Any

import pytest

from mcad.core.life.wrapping import wrapped_objects
from mcad.core.workload.demand import DemandError, appwrapper_demand, inferred_pod_sets
from mcad.core.workload.podsets import (
    DeclaredPodSet,
    PodSetError,
    declared_problems,
    parse_path,
    pod_template_at,
)

GPU = "nvidia.com/gpu"


def pod_template(cpu: str = "1", gpus: int = 0) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu, **({GPU: gpus} if gpus else {})}
    return {"spec": {"containers": [{"name": "c", "image": "i",
                                     "resources": {"requests": requests}}]}}


def job(parallelism: int | None = None, completions: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": pod_template()}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": spec}


def ray(kind: str = "RayCluster", workers: int | None = 2) -> dict[str, Any]:
    group: dict[str, Any] = {"groupName": "w", "template": pod_template(gpus=1)}
    if workers is not None:
        group["replicas"] = workers
    cluster = {"headGroupSpec": {"template": pod_template()}, "workerGroupSpecs": [group]}
    spec = cluster if kind == "RayCluster" else {"rayClusterSpec": cluster}
    return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": "r"}, "spec": spec}


INFERRED: list[tuple[str, dict[str, Any], list[tuple[str, int]]]] = [
    ("Pod", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
             **pod_template()}, [("template", 1)]),
    ("Job, defaults", job(), [("template.spec.template", 1)]),
    ("Job, parallelism below completions", job(3, 5), [("template.spec.template", 3)]),
    ("Job, completions below parallelism", job(4, 2), [("template.spec.template", 2)]),
    ("Deployment", {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                    "spec": {"replicas": 3, "template": pod_template()}},
     [("template.spec.template", 3)]),
    ("StatefulSet without replicas", {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                      "metadata": {"name": "s"},
                                      "spec": {"template": pod_template()}},
     [("template.spec.template", 1)]),
    ("JobSet", {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "js"}, "spec": {"replicatedJobs": [
                    {"name": "w", "replicas": 2, "template": {"spec": {
                        "parallelism": 2, "completions": 2, "template": pod_template()}}},
                    {"name": "d", "template": {"spec": {"template": pod_template()}}}]}},
     [("template.spec.replicatedJobs[0].template.spec.template", 4),
      ("template.spec.replicatedJobs[1].template.spec.template", 1)]),
    ("PyTorchJob", {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                    "metadata": {"name": "pt"}, "spec": {"pytorchReplicaSpecs": {
                        "Master": {"replicas": 1, "template": pod_template()},
                        "Worker": {"replicas": 2, "template": pod_template()}}}},
     [("template.spec.pytorchReplicaSpecs.Master.template", 1),
      ("template.spec.pytorchReplicaSpecs.Worker.template", 2)]),
    ("RayCluster", ray(), [("template.spec.headGroupSpec.template", 1),
                           ("template.spec.workerGroupSpecs[0].template", 2)]),
    ("RayJob", ray("RayJob"), [
        ("template.spec.rayClusterSpec.headGroupSpec.template", 1),
        ("template.spec.rayClusterSpec.workerGroupSpecs[0].template", 2)]),
    ("LeaderWorkerSet", {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                         "metadata": {"name": "l"}, "spec": {"replicas": 2,
                                                             "leaderWorkerTemplate": {
                             "size": 3, "leaderTemplate": pod_template(),
                             "workerTemplate": pod_template()}}},
     [("template.spec.leaderWorkerTemplate.leaderTemplate", 2),
      ("template.spec.leaderWorkerTemplate.workerTemplate", 4)]),
    ("LeaderWorkerSet, workers lead", {"apiVersion": "leaderworkerset.x-k8s.io/v1",
                                       "kind": "LeaderWorkerSet", "metadata": {"name": "l"},
                                       "spec": {"leaderWorkerTemplate": {
                                           "size": 4, "workerTemplate": pod_template()}}},
     [("template.spec.leaderWorkerTemplate.workerTemplate", 4)]),
    ("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}, []),
]


LWS = next(obj for case, obj, _ in INFERRED if case == "LeaderWorkerSet")


@pytest.mark.parametrize(("case", "obj", "want"), INFERRED, ids=[c[0] for c in INFERRED])
def test_podsets_are_inferred_per_kind(case: str, obj: dict[str, Any],
                                       want: list[tuple[str, int]]) -> None:
    found = inferred_pod_sets(obj)
    assert found is not None
    assert [(p.path, p.replicas) for p in found] == want
    for pod_set in found:  # every inferred path resolves, in v1beta2's grammar
        assert pod_template_at(obj, pod_set.path)["spec"]["containers"]


def test_a_kind_nobody_reads_has_no_inferred_podsets() -> None:
    assert inferred_pod_sets({"apiVersion": "example.com/v1", "kind": "Widget"}) is None


def test_the_pods_of_a_leader_worker_set_get_the_appwrappers_labels() -> None:
    lws = LWS
    planned = wrapped_objects(name="aw", namespace="ns", uid="u-1",
                              spec={"resources": {"GenericItems": [{"generictemplate": lws}]}},
                              kind_allowed=lambda *_: True)
    assert isinstance(planned, list)
    templates = planned[0].manifest["spec"]["leaderWorkerTemplate"]
    for name in ("leaderTemplate", "workerTemplate"):
        assert templates[name]["metadata"]["labels"]["workload.codeflare.dev/appwrapper-uid"] \
            == "u-1"


@pytest.mark.parametrize(("path", "steps"), [
    ("template", ()),
    ("template.spec.template", ("spec", "template")),
    ("template.spec.replicatedJobs[10].template", ("spec", "replicatedJobs", 10, "template")),
])
def test_paths_are_read_in_v1beta2s_grammar(path: str, steps: tuple[object, ...]) -> None:
    assert parse_path(path) == steps


@pytest.mark.parametrize(("path", "says"), [
    ("spec.template", "does not start with 'template'"),
    ("template.spec..x", "empty field name"),
    ("template.spec[x]", "not a whole number"),
    ("templatex", "is not template followed by"),
])
def test_a_malformed_path_is_a_sentence(path: str, says: str) -> None:
    with pytest.raises(PodSetError, match=says):
        parse_path(path)


def test_declared_podsets_that_do_not_resolve_are_named() -> None:
    problems = declared_problems(job(), [DeclaredPodSet("template.spec.templat", 1),
                                         DeclaredPodSet("template.spec", 1)],
                                 inferred_pod_sets(job()), where="spec.components[0]")
    assert problems == [
        'spec.components[0].podSets[0].path: "template.spec.templat" leaves the template '
        "at template.spec.templat (no such field)",
        'spec.components[0].podSets[1].path: "template.spec" does not lead to a pod template '
        "(an object whose spec has containers)"]


def test_declared_podsets_must_match_what_the_project_infers_for_its_kinds() -> None:
    where = "spec.components[0]"
    ok = [DeclaredPodSet("template.spec.template", 3)]
    assert declared_problems(job(3), ok, inferred_pod_sets(job(3)), where=where) == []
    wrong = [DeclaredPodSet("template.spec.template", 2)]
    (problem,) = declared_problems(job(3), wrong, inferred_pod_sets(job(3)), where=where)
    assert "declares 2 replicas, but the template makes 3 pods" in problem
    (problem,) = declared_problems(ray(), [DeclaredPodSet("template.spec.headGroupSpec."
                                                          "template", 1)],
                                   inferred_pod_sets(ray()), where=where)
    assert "1 declared, but the RayCluster makes pods from 2 pod templates" in problem


def test_declared_podsets_of_other_kinds_are_taken_as_written() -> None:
    lws = LWS
    declared = [DeclaredPodSet("template.spec.leaderWorkerTemplate.leaderTemplate", 2),
                DeclaredPodSet("template.spec.leaderWorkerTemplate.workerTemplate", 3)]
    assert declared_problems(lws, declared, inferred_pod_sets(lws), where="c") == []


def spec_of(*templates: dict[str, Any]) -> dict[str, Any]:
    return {"resources": {"GenericItems": [{"generictemplate": t} for t in templates]}}


def test_a_v1beta2_component_counts_its_declared_podsets() -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
              "spec": {"pods": {"template": pod_template(gpus=2)}}}
    demand = appwrapper_demand(spec_of(widget), pod_sets=[
        (DeclaredPodSet("template.spec.pods.template", 3),)])
    assert demand.pods == 3 and demand.total[GPU] == 6 * 10**9
    assert demand.pod_sets[0].source == "components[0] Widget/w podSets[0]"


def test_a_v1beta2_component_of_a_kind_nobody_reads_makes_no_pods() -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert appwrapper_demand(spec_of(job(2), widget), pod_sets=[None, None]).pods == 2
    with pytest.raises(DemandError, match="custompodresources"):  # v1beta1: a sentence
        appwrapper_demand(spec_of(job(2), widget))


def test_declared_podsets_never_count_less_than_the_templates() -> None:
    demand = appwrapper_demand(spec_of(job(4)), pod_sets=[
        (DeclaredPodSet("template.spec.template", 1),)])
    assert demand.pods == 4 and demand.raised == ("spec.resources.GenericItems[0]",)


def test_a_declared_path_that_leads_nowhere_is_a_demand_error() -> None:
    with pytest.raises(DemandError, match=r"components\[0\].podSets\[0\].path"):
        appwrapper_demand(spec_of(job()), pod_sets=[(DeclaredPodSet("template.nope", 1),)])
