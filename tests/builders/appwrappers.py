"""Fluent builders for AppWrappers as they appear on the wire (workload.codeflare.dev/v1beta1).

    aw = (make_appwrapper("a", "ns").priority(5).job(pods=4, gpu=2).min_available(4)
          .labels(quota_context="gold"))
    aw.spec()   # the .spec dict appwrapper_demand() reads
    aw.obj()    # the whole object, as the API server would hand it over

Each workload method appends one ``GenericItems`` entry; ``custom_pods``,
``item_replicas`` and ``completion_status`` amend the last one. Resource keywords are
``cpu``, ``memory`` and ``gpu`` (``nvidia.com/gpu``); ``requests=``/``limits=`` take any
names. Every pod template carries ``nodeSelector``/``tolerations`` when given.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

Quantity = int | str
Wire = dict[str, Any]


def make_appwrapper(name: str, namespace: str = "default") -> AppWrapperBuilder:
    return AppWrapperBuilder(name, namespace)


def resources(*, cpu: Quantity | None = None, memory: Quantity | None = None,
              gpu: Quantity | None = None,
              extra: Mapping[str, Quantity] | None = None) -> dict[str, str]:
    """A wire quantity map: ``resources(cpu=2, gpu=1)`` -> ``{"cpu": "2", ...}``."""
    out = {name: str(value) for name, value in
           (("cpu", cpu), ("memory", memory), ("nvidia.com/gpu", gpu)) if value is not None}
    out.update({k: str(v) for k, v in (extra or {}).items()})
    return out


def container(*, name: str = "main", cpu: Quantity | None = None,
              memory: Quantity | None = None, gpu: Quantity | None = None,
              requests: Mapping[str, Quantity] | None = None,
              limits: Mapping[str, Quantity] | None = None,
              restart_policy: str | None = None) -> Wire:
    """One container with requests (and limits, when given)."""
    wanted = resources(cpu=cpu, memory=memory, gpu=gpu, extra=requests)
    res: Wire = {}
    if wanted:
        res["requests"] = wanted
    if limits:
        res["limits"] = {k: str(v) for k, v in limits.items()}
    out: Wire = {"name": name, "image": "quay.io/project-codeflare/busybox",
                 "command": ["sh", "-c", "sleep 10"], "resources": res}
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    return out


def pod_template(*, containers: Sequence[Wire] | None = None,
                 init_containers: Sequence[Wire] | None = None,
                 node_selector: Mapping[str, str] | None = None,
                 tolerations: Sequence[Mapping[str, Any]] | None = None,
                 overhead: Mapping[str, Quantity] | None = None,
                 annotations: Mapping[str, str] | None = None,
                 restart_policy: str = "Never", **shape: Any) -> Wire:
    """A PodTemplateSpec; without ``containers`` one container of ``shape`` (cpu=...)."""
    spec: Wire = {"restartPolicy": restart_policy,
                  "containers": [dict(c) for c in containers] if containers
                  else [container(**shape)]}
    if init_containers:
        spec["initContainers"] = [dict(c) for c in init_containers]
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if overhead:
        spec["overhead"] = {k: str(v) for k, v in overhead.items()}
    return {"metadata": {"annotations": dict(annotations)} if annotations else {},
            "spec": spec}


class AppWrapperBuilder:
    """An AppWrapper under construction; every method returns the builder."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self._metadata: Wire = {"name": name, "namespace": namespace}
        self._spec: Wire = {"resources": {"GenericItems": []}}
        self._status: Wire | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    # -- metadata and scheduling ------------------------------------------------------

    def labels(self, **labels: str) -> AppWrapperBuilder:
        self._metadata.setdefault("labels", {}).update(labels)
        return self

    def label(self, key: str, value: str) -> AppWrapperBuilder:
        """A label whose key is not a Python name (``example.com/team``)."""
        return self.labels(**{key: value})

    def annotations(self, **annotations: str) -> AppWrapperBuilder:
        self._metadata.setdefault("annotations", {}).update(annotations)
        return self

    def uid(self, uid: str) -> AppWrapperBuilder:
        self._metadata["uid"] = uid
        return self

    def created(self, timestamp: str) -> AppWrapperBuilder:
        """``metadata.creationTimestamp`` (RFC 3339, e.g. ``2024-05-01T10:00:00Z``)."""
        self._metadata["creationTimestamp"] = timestamp
        return self

    def generation(self, generation: int) -> AppWrapperBuilder:
        self._metadata["generation"] = generation
        return self

    def priority(self, priority: int) -> AppWrapperBuilder:
        self._spec["priority"] = priority
        return self

    def priority_slope(self, slope: float) -> AppWrapperBuilder:
        self._spec["priorityslope"] = slope
        return self

    def min_available(self, pods: int) -> AppWrapperBuilder:
        self._spec.setdefault("schedulingSpec", {})["minAvailable"] = pods
        return self

    def requeuing(self, **fields: Any) -> AppWrapperBuilder:
        """``schedulingSpec.requeuing`` with wire names (``timeInSeconds=60``)."""
        self._spec.setdefault("schedulingSpec", {}).setdefault("requeuing", {}).update(fields)
        return self

    def clusters(self, *names: str) -> AppWrapperBuilder:
        """``schedulingSpec.clusterScheduling.clusters``: where it may be dispatched."""
        scheduling = self._spec.setdefault("schedulingSpec", {})
        scheduling["clusterScheduling"] = {"clusters": [{"name": n} for n in names]}
        return self

    def topology(self, *, required: str | None = None,
                 preferred: str | None = None) -> AppWrapperBuilder:
        """``schedulingSpec.topology``: a node label key, required or preferred."""
        asked = {k: v for k, v in (("required", required), ("preferred", preferred))
                 if v is not None}
        self._spec.setdefault("schedulingSpec", {})["topology"] = asked
        return self

    def status(self, **fields: Any) -> AppWrapperBuilder:
        if self._status is None:
            self._status = {}
        self._status.update(fields)
        return self

    def service(self) -> AppWrapperBuilder:
        """The empty ``spec.service`` old MCAD YAML carries (ignored)."""
        self._spec["service"] = {"spec": {}}
        return self

    # -- wrapped workloads ------------------------------------------------------------

    def item(self, generictemplate: Wire | None = None, *, replicas: int | None = None,
             custompodresources: Sequence[Wire] | None = None,
             completionstatus: str | None = None,
             minavailable: int | None = None) -> AppWrapperBuilder:
        """A raw GenericItem."""
        entry: Wire = {}
        if replicas is not None:
            entry["replicas"] = replicas
        if minavailable is not None:
            entry["minavailable"] = minavailable
        if custompodresources is not None:
            entry["custompodresources"] = [dict(c) for c in custompodresources]
        if completionstatus is not None:
            entry["completionstatus"] = completionstatus
        if generictemplate is not None:
            entry["generictemplate"] = generictemplate
        self._items().append(entry)
        return self

    def pod(self, *, name: str | None = None, **shape: Any) -> AppWrapperBuilder:
        template = pod_template(**shape)
        return self.item(self._object("v1", "Pod", name, template["spec"]))

    def job(self, *, pods: int = 1, completions: int | None = None,
            name: str | None = None, **shape: Any) -> AppWrapperBuilder:
        """A batch/v1 Job of ``pods`` parallel pods (completions default to ``pods``)."""
        spec = {"parallelism": pods,
                "completions": pods if completions is None else completions,
                "template": pod_template(**shape)}
        return self.item(self._object("batch/v1", "Job", name, spec),
                         completionstatus="Complete")

    def deployment(self, *, replicas: int = 1, name: str | None = None,
                   **shape: Any) -> AppWrapperBuilder:
        return self._replicated("Deployment", replicas, name, shape)

    def statefulset(self, *, replicas: int = 1, name: str | None = None,
                    **shape: Any) -> AppWrapperBuilder:
        return self._replicated("StatefulSet", replicas, name, shape)

    def jobset(self, *jobs: tuple[int, int], name: str | None = None,
               **shape: Any) -> AppWrapperBuilder:
        """A JobSet: one replicatedJob per ``(replicas, parallelism)``."""
        replicated = [{"name": f"rj{i}", "replicas": replicas,
                       "template": {"spec": {"parallelism": parallelism,
                                             "completions": parallelism,
                                             "template": pod_template(**shape)}}}
                      for i, (replicas, parallelism) in enumerate(jobs)]
        return self.item(self._object("jobset.x-k8s.io/v1alpha2", "JobSet", name,
                                      {"replicatedJobs": replicated}),
                         completionstatus="Completed")

    def pytorchjob(self, *, masters: int = 1, workers: int = 0, name: str | None = None,
                   **shape: Any) -> AppWrapperBuilder:
        specs: Wire = {"Master": {"replicas": masters, "template": pod_template(**shape)}}
        if workers:
            specs["Worker"] = {"replicas": workers, "template": pod_template(**shape)}
        return self.item(self._object("kubeflow.org/v1", "PyTorchJob", name,
                                      {"pytorchReplicaSpecs": specs}))

    def raycluster(self, *, workers: Sequence[int] = (), min_workers: Sequence[int] = (),
                   name: str | None = None, **shape: Any) -> AppWrapperBuilder:
        """A RayCluster: one head, a group per ``workers`` entry (replicas) and per
        ``min_workers`` entry (only ``minReplicas`` set)."""
        groups: list[Wire] = [
            {"groupName": f"g{i}", "replicas": n, "minReplicas": 0, "maxReplicas": n,
             "template": pod_template(**shape)} for i, n in enumerate(workers)]
        groups += [{"groupName": f"m{i}", "minReplicas": n, "maxReplicas": n,
                    "template": pod_template(**shape)} for i, n in enumerate(min_workers)]
        spec = {"headGroupSpec": {"template": pod_template(**shape)},
                "workerGroupSpecs": groups}
        return self.item(self._object("ray.io/v1", "RayCluster", name, spec))

    def rayjob(self, *, workers: Sequence[int] = (), name: str | None = None,
               **shape: Any) -> AppWrapperBuilder:
        """A RayJob whose RayCluster has one head and a group per ``workers`` entry."""
        groups: list[Wire] = [
            {"groupName": f"g{i}", "replicas": n, "minReplicas": 0, "maxReplicas": n,
             "template": pod_template(**shape)} for i, n in enumerate(workers)]
        spec = {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True,
                "rayClusterSpec": {"headGroupSpec": {"template": pod_template(**shape)},
                                   "workerGroupSpecs": groups}}
        return self.item(self._object("ray.io/v1", "RayJob", name, spec))

    def podgroup(self, *, min_member: int, name: str | None = None,
                 min_resources: Mapping[str, Quantity] | None = None) -> AppWrapperBuilder:
        spec: Wire = {"minMember": min_member}
        if min_resources:
            spec["minResources"] = {k: str(v) for k, v in min_resources.items()}
        return self.item(self._object("scheduling.x-k8s.io/v1alpha1", "PodGroup", name,
                                      spec))

    def configmap(self, *, name: str | None = None) -> AppWrapperBuilder:
        obj = self._object("v1", "ConfigMap", name, None)
        obj["data"] = {"key": "value"}
        return self.item(obj)

    def service_object(self, *, name: str | None = None) -> AppWrapperBuilder:
        return self.item(self._object("v1", "Service", name,
                                      {"ports": [{"port": 80}], "selector": {}}))

    def custom(self, *, api_version: str, kind: str, name: str | None = None,
               spec: Wire | None = None) -> AppWrapperBuilder:
        """Any object, e.g. a CRD mcad cannot read: follow with ``custom_pods``."""
        return self.item(self._object(api_version, kind, name, spec or {}))

    def custom_pods(self, *, replicas: int = 1, cpu: Quantity | None = None,
                    memory: Quantity | None = None, gpu: Quantity | None = None,
                    requests: Mapping[str, Quantity] | None = None,
                    limits: Mapping[str, Quantity] | None = None) -> AppWrapperBuilder:
        """Add a ``custompodresources`` entry to the last item."""
        entry: Wire = {"replicas": replicas,
                       "requests": resources(cpu=cpu, memory=memory, gpu=gpu, extra=requests)}
        if limits:
            entry["limits"] = {k: str(v) for k, v in limits.items()}
        self._last().setdefault("custompodresources", []).append(entry)
        return self

    def item_replicas(self, replicas: int) -> AppWrapperBuilder:
        self._last()["replicas"] = replicas
        return self

    def completion_status(self, conditions: str) -> AppWrapperBuilder:
        self._last()["completionstatus"] = conditions
        return self

    # -- results ----------------------------------------------------------------------

    def spec(self) -> Wire:
        return copy.deepcopy(self._spec)

    def obj(self) -> Wire:
        out: Wire = {"apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
                     "metadata": copy.deepcopy(self._metadata), "spec": self.spec()}
        if self._status is not None:
            out["status"] = copy.deepcopy(self._status)
        return out

    # -- internals --------------------------------------------------------------------

    def _items(self) -> list[Wire]:
        items: list[Wire] = self._spec["resources"]["GenericItems"]
        return items

    def _last(self) -> Wire:
        items = self._items()
        if not items:
            raise ValueError("add a workload item before amending it")
        return items[-1]

    def _object(self, api_version: str, kind: str, name: str | None,
                spec: Wire | None) -> Wire:
        obj: Wire = {"apiVersion": api_version, "kind": kind,
                     "metadata": {"name": name or f"{self.name}-{kind.lower()}-"
                                                  f"{len(self._items())}",
                                  "namespace": self.namespace}}
        if spec is not None:
            obj["spec"] = spec
        return obj

    def _replicated(self, kind: str, replicas: int, name: str | None,
                    shape: Mapping[str, Any]) -> AppWrapperBuilder:
        spec = {"replicas": replicas, "template": pod_template(**shape)}
        return self.item(self._object("apps/v1", kind, name, spec))
