"""Demand: what an AppWrapper asks of a cluster, read off its spec.

Covers the pod request rule (containers, init containers, sidecars, limits standing in
for requests, overhead), every wrapped kind mcad reads, custompodresources, the gang
size, the errors users see, and toleration matching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from mcad.core.workload.demand import (
    Demand,
    DemandError,
    PodSet,
    Taint,
    Toleration,
    appwrapper_demand,
    pod_request,
)
from mcad.core.workload.resources import ResourceList
from tests.builders.appwrappers import container, make_appwrapper, pod_template

R = ResourceList.of


# -- pod_request --------------------------------------------------------------------------

@dataclass
class PodCase:
    id: str
    spec: dict[str, Any]
    want: ResourceList


POD_CASES = [
    PodCase("no containers", {}, R()),
    PodCase("containers add up",
            pod_template(containers=[container(cpu=1, memory="1Gi"),
                                     container(cpu="500m", gpu=2)])["spec"],
            R(cpu="1500m", memory="1Gi", gpu=2)),
    PodCase("limit stands in for a missing request",
            pod_template(containers=[container(cpu=1, limits={"cpu": 4, "memory": "2Gi"})])
            ["spec"],
            R(cpu=1, memory="2Gi")),
    PodCase("largest init container wins per resource",
            pod_template(containers=[container(cpu=1, memory="1Gi")],
                         init_containers=[container(cpu=3), container(memory="4Gi")])["spec"],
            R(cpu=3, memory="4Gi")),
    PodCase("init containers smaller than the containers do not count",
            pod_template(containers=[container(cpu=4)],
                         init_containers=[container(cpu=1)])["spec"],
            R(cpu=4)),
    PodCase("sidecar adds to the containers and to later init containers",
            pod_template(containers=[container(cpu=1)],
                         init_containers=[container(cpu="500m", restart_policy="Always"),
                                          container(cpu=2)])["spec"],
            # containers 1 + sidecar 0.5 = 1.5; later init 2 + sidecar 0.5 = 2.5
            R(cpu="2500m")),
    PodCase("sidecar started after an init container does not run beside it",
            pod_template(containers=[container(cpu=1)],
                         init_containers=[container(cpu=2),
                                          container(cpu="500m", restart_policy="Always")])
            ["spec"],
            R(cpu=2)),
    PodCase("overhead is added on top",
            pod_template(containers=[container(cpu=1)], overhead={"cpu": "250m"})["spec"],
            R(cpu="1250m")),
    PodCase("pod-level requests replace the containers' sum for what they name",
            {**pod_template(containers=[container(cpu=1, memory="1Gi", gpu=1)])["spec"],
             "resources": {"requests": {"cpu": "3"}}},
            R(cpu=3, memory="1Gi", gpu=1)),
]


@pytest.mark.parametrize("case", POD_CASES, ids=[c.id for c in POD_CASES])
def test_pod_request(case: PodCase) -> None:
    assert pod_request(case.spec) == case.want


def test_pod_request_names_the_malformed_field() -> None:
    spec = pod_template(containers=[container(cpu=1), container(memory="lots")])["spec"]
    with pytest.raises(DemandError, match=r"containers\[1\]\.resources\.requests\.memory"):
        pod_request(spec)


# -- appwrapper_demand --------------------------------------------------------------------

@dataclass
class DemandCase:
    id: str
    spec: dict[str, Any]
    want_total: ResourceList
    want_pods: int
    want_min_available: int
    want_counts: list[int] = field(default_factory=list)


def aw() -> Any:
    return make_appwrapper("a", "ns")


DEMAND_CASES = [
    DemandCase("empty", {}, R(), 0, 0),
    DemandCase("pod", aw().pod(cpu=2).spec(), R(cpu=2), 1, 1, [1]),
    DemandCase("job of 4 pods with 2 gpus", aw().job(pods=4, gpu=2).spec(),
               R(gpu=8), 4, 4, [4]),
    DemandCase("job with fewer completions than parallelism",
               aw().job(pods=4, completions=2, cpu=1).spec(), R(cpu=2), 2, 2, [2]),
    DemandCase("job item replicas multiply the pods",
               aw().job(pods=2, cpu=1).item_replicas(3).spec(), R(cpu=6), 6, 6, [6]),
    DemandCase("job with no parallelism makes one pod",
               aw().item({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                          "spec": {"template": pod_template(cpu=1)}}).spec(),
               R(cpu=1), 1, 1, [1]),
    DemandCase("deployment", aw().deployment(replicas=3, memory="1Gi").spec(),
               R(memory="3Gi"), 3, 3, [3]),
    DemandCase("statefulset", aw().statefulset(replicas=2, cpu=1).spec(), R(cpu=2), 2, 2, [2]),
    DemandCase("jobset: replicas x parallelism per replicated job",
               aw().jobset((2, 3), (1, 1), gpu=1).spec(), R(gpu=7), 7, 7, [6, 1]),
    DemandCase("pytorchjob master and workers",
               aw().pytorchjob(masters=1, workers=3, gpu=4).spec(), R(gpu=16), 4, 4, [1, 3]),
    DemandCase("raycluster head, workers, and minReplicas when replicas is absent",
               aw().raycluster(workers=[2], min_workers=[3], cpu=1).spec(),
               R(cpu=6), 6, 6, [1, 2, 3]),
    DemandCase("rayjob: the head and workers of the RayCluster it makes",
               aw().rayjob(workers=[2], gpu=4).spec(), R(gpu=12), 3, 3, [1, 2]),
    DemandCase("rayjob on an existing cluster makes no pods of its own",
               aw().item({"apiVersion": "ray.io/v1", "kind": "RayJob",
                          "metadata": {"name": "rj"},
                          "spec": {"entrypoint": "python x.py",
                                   "clusterSelector": {"ray.io/cluster": "shared"}}})
               .pod(cpu=1).spec(), R(cpu=1), 1, 1, [1]),
    DemandCase("mpijob launcher and workers",
               aw().item({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                          "metadata": {"name": "mpi"},
                          "spec": {"mpiReplicaSpecs": {
                              "Launcher": {"replicas": 1, "template": pod_template(cpu=1)},
                              "Worker": {"replicas": 2, "template": pod_template(gpu=1)}}}})
               .spec(), R(cpu=1, gpu=2), 3, 3, [1, 2]),
    DemandCase("raycluster multi-host worker groups",
               aw().item({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                          "metadata": {"name": "rc"},
                          "spec": {"workerGroupSpecs": [
                              {"replicas": 2, "numOfHosts": 4,
                               "template": pod_template(gpu=4)}]}}).spec(),
               R(gpu=32), 8, 8, [8]),
    DemandCase("podgroup adds nothing beside the job it gangs",
               aw().podgroup(min_member=4, min_resources={"cpu": 4}).job(pods=4, cpu=1)
               .spec(), R(cpu=4), 4, 4, [4]),
    DemandCase("configmap and service make no pods",
               aw().configmap().service_object().pod(cpu=1).spec(), R(cpu=1), 1, 1, [1]),
    DemandCase("custompodresources declare an unknown kind's pods",
               aw().custom(api_version="foo.example.com/v1", kind="Widget")
               .custom_pods(replicas=2, gpu=1).custom_pods(replicas=1, cpu=4).spec(),
               R(gpu=2, cpu=4), 3, 3, [2, 1]),
    DemandCase("custompodresources never lower the demand below the templates' pods",
               aw().job(pods=8, gpu=8).item_replicas(5).custom_pods(replicas=2, gpu=1).spec(),
               R(gpu=320), 40, 40, [40]),
    DemandCase("custompodresources may raise the demand above the templates' (and then "
               "ignore item replicas)",
               aw().job(pods=2, gpu=1).item_replicas(2).custom_pods(replicas=4, gpu=2).spec(),
               R(gpu=8), 4, 4, [4]),
    DemandCase("custompodresources: a missing request falls back to the limit",
               aw().custom(api_version="foo.example.com/v1", kind="Widget")
               .custom_pods(cpu=1, limits={"cpu": 2, "memory": "1Gi"}).spec(),
               R(cpu=1, memory="1Gi"), 1, 1, [1]),
    DemandCase("minAvailable below the pod count is the gang size",
               aw().job(pods=4, cpu=1).min_available(2).spec(), R(cpu=4), 4, 2, [4]),
    DemandCase("minAvailable 0 means every pod",
               aw().job(pods=4, cpu=1).min_available(0).spec(), R(cpu=4), 4, 4, [4]),
    DemandCase("zero replicas make no pod set",
               aw().deployment(replicas=0, cpu=1).pod(cpu=1).spec(), R(cpu=1), 1, 1, [1]),
    DemandCase("old spec.service is ignored", aw().service().pod(cpu=1).spec(),
               R(cpu=1), 1, 1, [1]),
]


@pytest.mark.parametrize("case", DEMAND_CASES, ids=[c.id for c in DEMAND_CASES])
def test_appwrapper_demand(case: DemandCase) -> None:
    demand = appwrapper_demand(case.spec)
    assert demand.total == case.want_total
    assert demand.pods == case.want_pods
    assert demand.min_available == case.want_min_available
    assert [s.count for s in demand.pod_sets] == case.want_counts
    assert sum((s.requests.scale(s.count) for s in demand.pod_sets), R()) == demand.total


@dataclass
class ErrorCase:
    id: str
    spec: dict[str, Any]
    want_message: str


ERROR_CASES = [
    ErrorCase("unknown kind without custompodresources",
              aw().pod(cpu=1).configmap()
              .custom(api_version="foo.example.com/v1", kind="Widget").spec(),
              r"^GenericItems\[2\] \(Kind foo.example.com/v1 Widget\) cannot be read.*"
              r"custompodresources"),
    ErrorCase("malformed container quantity names the field path",
              aw().job(pods=1, cpu="two").spec(),
              r"^GenericItems\[0\] \(Kind batch/v1 Job\): generictemplate\.spec\.template\."
              r"spec\.containers\[0\]\.resources\.requests\.cpu: 'two' is not a quantity"),
    ErrorCase("malformed custompodresources quantity names the entry",
              aw().custom(api_version="foo.example.com/v1", kind="Widget")
              .custom_pods(cpu=1).custom_pods(memory="1 gig").spec(),
              r"custompodresources\[1\]\.requests\.memory"),
    ErrorCase("negative request",
              aw().pod(cpu=-1).spec(), r"requests\.cpu is negative"),
    ErrorCase("replicas that are not a count",
              aw().deployment(replicas=1, cpu=1).item_replicas(-1).spec(),
              r"GenericItems\[0\]\.replicas must be a whole number"),
    ErrorCase("minAvailable above the pod count",
              aw().job(pods=2, cpu=1).min_available(3).spec(),
              r"minAvailable is 3 but the AppWrapper makes only 2 pods"),
    ErrorCase("item with nothing in it",
              aw().item().spec(),
              r"GenericItems\[0\] has neither a generictemplate nor custompodresources"),
    ErrorCase("containers that are not a list",
              aw().item({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": {}}}).spec(),
              r"containers must be a list"),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c.id for c in ERROR_CASES])
def test_appwrapper_demand_errors(case: ErrorCase) -> None:
    with pytest.raises(DemandError, match=case.want_message):
        appwrapper_demand(case.spec)


def test_pod_sets_carry_node_selector_tolerations_and_source() -> None:
    spec = (aw().job(pods=2, name="train", gpu=1, node_selector={"zone": "b", "gpu": "a100"},
                     tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}])
            .spec())
    want = PodSet(count=2, requests=R(gpu=1), node_selector=(("gpu", "a100"), ("zone", "b")),
                  tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists",
                                          effect="NoSchedule"),),
                  source="GenericItems[0] Job/train")
    assert appwrapper_demand(spec).pod_sets == (want,)


def test_custompodresources_keep_the_templates_node_selector() -> None:
    spec = aw().job(pods=1, name="train", node_selector={"zone": "b"}).custom_pods(gpu=1).spec()
    (pod_set,) = appwrapper_demand(spec).pod_sets
    assert pod_set.node_selector == (("zone", "b"),)
    assert pod_set.source == "GenericItems[0] Job/train custompodresources[0]"


# MCAD's own examples, reconstructed from its docs and test YAML.
MCAD_JOB_WITH_CUSTOMPODRESOURCES = """
apiVersion: workload.codeflare.dev/v1beta1
kind: AppWrapper
metadata:
  name: aw-07
  namespace: start-up-02
spec:
  schedulingSpec:
    minAvailable: 1
  resources:
    GenericItems:
    - generictemplate:
        apiVersion: batch/v1
        kind: Job
        metadata:
          namespace: start-up-02
          name: aw-07-job-01
        spec:
          template:
            metadata:
              namespace: start-up-02
            spec:
              containers:
              - name: busybox
                image: quay.io/project-codeflare/busybox
                command: ["sh", "-c", "sleep 1"]
              restartPolicy: Never
      custompodresources:
      - replicas: 1
        requests:
          cpu: 500m
          memory: 512Mi
          nvidia.com/gpu: 0
        limits:
          cpu: 500m
          memory: 512Mi
          nvidia.com/gpu: 0
      completionstatus: Complete
"""

MCAD_STATEFULSET_IN_QUOTA = """
apiVersion: workload.codeflare.dev/v1beta1
kind: AppWrapper
metadata:
  name: myGangScheduledApp
  namespace: default
  labels:
    quota_context: "alpha"
spec:
  service:
    spec: {}
  resources:
    metadata: {}
    GenericItems:
      - metadata: {}
        replicas: 1
        custompodresources:
        - replicas: 1
          requests:
            cpu: 1000m
            memory: 4000Mi
          limits:
            cpu: 1000m
            memory: 4000Mi
        generictemplate:
          apiVersion: apps/v1
          kind: StatefulSet
          metadata:
            name: myGangScheduledApp
            namespace: test1
          spec:
            replicas: 1
            template:
              spec:
                containers:
                  - name: myGangScheduledApp
                    image: registry.access.redhat.com/ubi8/ubi:latest
                    resources:
                      requests: {cpu: "1000m", memory: "4000Mi"}
"""


@pytest.mark.parametrize(("manifest", "want"), [
    pytest.param(MCAD_JOB_WITH_CUSTOMPODRESOURCES,
                 Demand(pod_sets=(PodSet(1, R(cpu="500m", memory="512Mi"),
                                         source="GenericItems[0] Job/aw-07-job-01 "
                                                "custompodresources[0]"),),
                        min_available=1, total=R(cpu="500m", memory="512Mi"), pods=1),
                 id="job with custompodresources"),
    pytest.param(MCAD_STATEFULSET_IN_QUOTA,
                 Demand(pod_sets=(PodSet(1, R(cpu=1, memory="4000Mi"),
                                         source="GenericItems[0] StatefulSet/myGangScheduledApp"
                                                " custompodresources[0]"),),
                        min_available=1, total=R(cpu=1, memory="4000Mi"), pods=1),
                 id="quota quickstart statefulset"),
])
def test_mcad_examples(manifest: str, want: Demand) -> None:
    assert appwrapper_demand(yaml.safe_load(manifest)["spec"]) == want


# -- tolerations --------------------------------------------------------------------------

@pytest.mark.parametrize(("toleration", "taint", "want"), [
    pytest.param(Toleration(operator="Exists"), Taint("anything", "x", "NoExecute"), True,
                 id="empty key with Exists tolerates everything"),
    pytest.param(Toleration("gpu", "Exists"), Taint("gpu", "a100"), True,
                 id="Exists ignores the value"),
    pytest.param(Toleration("gpu", "Equal", "a100"), Taint("gpu", "a100"), True,
                 id="Equal with the same value"),
    pytest.param(Toleration("gpu", "Equal", "a100"), Taint("gpu", "h100"), False,
                 id="Equal with another value"),
    pytest.param(Toleration("gpu", "", "a100"), Taint("gpu", "a100"), True,
                 id="empty operator means Equal"),
    pytest.param(Toleration("gpu", "Exists"), Taint("other"), False, id="other key"),
    pytest.param(Toleration("gpu", "Exists", effect="NoSchedule"),
                 Taint("gpu", effect="NoExecute"), False, id="other effect"),
    pytest.param(Toleration("gpu", "Exists", effect=""), Taint("gpu", effect="NoExecute"),
                 True, id="empty effect matches every effect"),
    pytest.param(Toleration("gpu", "Lt", "3"), Taint("gpu", "2"), False,
                 id="unknown operator tolerates nothing"),
])
def test_toleration(toleration: Toleration, taint: Taint, want: bool) -> None:
    assert toleration.tolerates(taint) is want


def test_min_available_above_declared_custompodresources_is_accepted() -> None:
    """MCAD's 0006-aw-init-containers.yaml: 1 declared pod, a 3-pod Job, minAvailable 3.
    The declaration is below what the Job's 3 pods request, so the Job's pods count."""
    spec = aw().job(pods=3, cpu=1).custom_pods(cpu=1).min_available(3).spec()
    demand = appwrapper_demand(spec)
    assert (demand.pods, demand.min_available) == (3, 3)


def test_min_available_above_custompodresources_of_an_unknown_kind_is_accepted() -> None:
    spec = aw().custom(api_version="foo.example.com/v1", kind="Widget").custom_pods(
        cpu=1).min_available(3).spec()
    demand = appwrapper_demand(spec)
    assert (demand.pods, demand.min_available) == (1, 3)
