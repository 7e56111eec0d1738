"""What an AppWrapper will ask of a cluster: its pods, their shapes and its gang size.

Quota is charged and placement is decided before any wrapped object exists, so the
dispatcher must read the demand off the AppWrapper itself. MCAD's rule: an item's
``custompodresources`` (replicas x requests, a missing request falling back to the
limit) declare its pods when present; otherwise the pods are inferred from the
wrapped object's pod template(s) times the item's ``replicas``. This module is that
rule, for the workload kinds people actually wrap, and nothing else.

Decisions worth knowing:

- With ``custompodresources`` the item's own ``replicas`` is not applied (as in MCAD:
  the entries are the whole declaration), and the template is read for the
  ``nodeSelector`` and tolerations of its (first) pod template, when the kind is known.
  For a kind mcad can read, a declaration may raise the demand but never lower it: when
  the templates' pods request more of any resource than declared, the templates' pods
  count (a 2 x 8-GPU Job declared as 1 GPU is charged 16), so a declaration cannot be
  used to slip past quota.
- A ``PodGroup`` (coscheduling) contributes no demand: it creates no pods, and the pods
  it gangs are counted through the Job or Pods that make them; counting its
  ``minResources`` as well would charge the same pods twice.
- Kinds that create no pods (ConfigMap, Service, Secret, ...) contribute nothing; an
  unknown kind without ``custompodresources`` is an error that says how to fix it,
  because guessing "no pods" would admit workloads without charging their quota.
- ``schedulingSpec.minAvailable`` above the number of pods the templates make is an
  error: such a gang could never be satisfied and would be requeued forever. With
  ``custompodresources`` it is accepted: they declare what to charge, not how many pods
  the wrapped objects make (MCAD's own test YAML declares 1 pod for a 3-pod Job with
  minAvailable 3), and readiness then waits for minAvailable real pods.
- Node affinity is not read (only ``nodeSelector`` and tolerations); placement treats
  affinity as the kube-scheduler's business.
- A topology wish (``schedulingSpec.topology``, or Kueue's pod-template annotations) is
  read with the demand, since it is part of where the gang can go
  (``mcad.core.workload.topology``).
- An AppWrapper written as v1beta2 (``pod_sets`` given: its components' declared
  ``podSets``, ``mcad.core.workload.podsets``) counts its pods by v1beta2's rule: a component's
  declared podSets (``replicas`` pods of the template at each ``path``), else the pods
  its kind makes (inferred as above), else none (v1beta2 treats a component of a kind
  nobody can read, without podSets, as making no pods). Declared podSets, like
  custompodresources, never count less than the templates mcad can read ask for.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from mcad.core.workload.podsets import DeclaredPodSet, PodSetError, pod_template_at
from mcad.core.workload.quantity import QuantityError, parse_quantity
from mcad.core.workload.resources import EMPTY, ResourceList
from mcad.core.workload.topology import TopologyError, TopologyRequest, topology_request


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint, as far as scheduling pods onto the node is concerned."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration with Kubernetes' matching rules (``v1.Toleration.ToleratesTaint``)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """True when this toleration lets a pod onto a node with ``taint``.

        An empty effect matches every effect; an empty key with ``Exists`` tolerates
        every taint; ``Exists`` ignores the value; ``Equal`` (or empty) compares it.
        """
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("Equal", ""):
            return self.value == taint.value
        return False


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` identical pods: same requests, node selector and tolerations."""

    count: int
    requests: ResourceList
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    source: str = ""


@dataclass(frozen=True, slots=True)
class Demand:
    """Everything an AppWrapper asks for: pod sets, gang size and the quota charge."""

    pod_sets: tuple[PodSet, ...]
    min_available: int
    total: ResourceList
    pods: int
    raised: tuple[str, ...] = ()
    """Items whose custompodresources declared less than their pods request (and so are
    counted as their pods), for the user to see."""
    topology: TopologyRequest | None = None
    """Where the whole gang must (or would rather) run: one domain of a topology level
    (``mcad.core.workload.topology``); None: anywhere its pods fit."""
    shape: Shape = field(init=False, repr=False, compare=False)
    """What placement reads of it (``Shape``), worked out once per demand."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", shape_of(self.pod_sets, self.topology))
        object.__setattr__(self, "total", interned_total(self.total))


class Interned:
    """A key made one object: while anything holds it, equal keys give this object, so
    caches key on it at the cost of an identity hash instead of hashing and comparing the
    key's tuples for each of a long queue's entries. Each subclass has its own table,
    whose entries go once nothing holds them. (Two equal ones that came apart, e.g. made
    in two threads at once, only cost a second cache entry: a cache never joins unequal
    keys.)"""

    __slots__ = ("__weakref__", "key")
    table: ClassVar[weakref.WeakValueDictionary[tuple[object, ...], Interned]]

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.table = weakref.WeakValueDictionary()

    def __init__(self, key: tuple[object, ...]) -> None:
        self.key = key

    @classmethod
    def of(cls, key: tuple[object, ...]) -> Self:
        """The one object of this class for ``key``."""
        found = cls.table.get(key)
        if found is None:
            found = cls.table.setdefault(key, cls(key))
        assert isinstance(found, cls)
        return found

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r})"


class Shape(Interned):
    """What placement reads of a demand: each pod set's count, requests, node selector and
    tolerations, and its topology request. Interned (``Interned``): the cycle's
    per-shape caches (a 100,000-long queue has a few hundred shapes) key on it."""

    __slots__ = ()


_TOTALS: weakref.WeakValueDictionary[frozenset[tuple[str, int]], ResourceList] = \
    weakref.WeakValueDictionary()
"""Demands' totals, interned for the same reason as shapes: the cycle keys its quota
caches on a total, and a tuple that holds the very same object compares without calling
``ResourceList.__eq__``. Keyed by the amounts, not by the total itself: a key is held
strongly, and one that was its own value would never let the entry go."""


def interned_total(total: ResourceList) -> ResourceList:
    """The one total equal to ``total`` that demands hold (``total`` when it is new)."""
    key = frozenset(total.items())
    found = _TOTALS.get(key)
    if found is None:
        found = _TOTALS.setdefault(key, total)
    return found


def shape_of(pod_sets: Sequence[PodSet], topology: TopologyRequest | None) -> Shape:
    """The interned ``Shape`` of these pod sets and topology request."""
    return Shape.of((tuple((s.count, s.requests, s.node_selector, s.tolerations)
                           for s in pod_sets), topology))


class DemandError(ValueError):
    """An AppWrapper whose demand cannot be read; one sentence naming item and field."""


ComponentPodSets = Sequence[tuple[DeclaredPodSet, ...] | None]
"""A v1beta2 AppWrapper's declared podSets, per component (None or empty: inferred)."""


def appwrapper_demand(spec: Mapping[str, Any], *,
                      pod_sets: ComponentPodSets | None = None) -> Demand:
    """Read the demand of an AppWrapper from its ``.spec`` as on the wire (v1beta1's, the
    storage version); ``pod_sets``: it was written as v1beta2, with these podSets."""
    spec = _mapping(spec, "spec")
    resources = _mapping(spec.get("resources"), "spec.resources")
    items = _list(resources.get("GenericItems"), "spec.resources.GenericItems")
    pod_sets_found: list[PodSet] = []
    raised: list[str] = []
    for index, raw in enumerate(items):
        item = _mapping(raw, f"spec.resources.GenericItems[{index}]")
        if pod_sets is None:
            item_sets, was_raised = _item_pod_sets(index, item)
        else:
            item_sets, was_raised = _component_pod_sets(
                index, item, (pod_sets[index] if index < len(pod_sets) else None) or ())
        pod_sets_found.extend(s for s in item_sets if s.count > 0)
        if was_raised:
            raised.append(f"spec.resources.GenericItems[{index}]")
    pods = sum(s.count for s in pod_sets_found)
    total = _total(pod_sets_found)
    scheduling = _mapping(spec.get("schedulingSpec"), "spec.schedulingSpec")
    wanted = _count(scheduling.get("minAvailable"), "spec.schedulingSpec.minAvailable",
                    default=0)
    declared = any(isinstance(i, Mapping) and i.get("custompodresources") for i in items)
    if wanted > pods and not declared:
        raise DemandError(
            f"spec.schedulingSpec.minAvailable is {wanted} but the AppWrapper makes only "
            f"{pods} pods; lower minAvailable or raise the replicas"
        )
    try:
        topology = topology_request(spec)
    except TopologyError as err:
        raise DemandError(str(err)) from err
    return Demand(pod_sets=tuple(pod_sets_found), min_available=wanted or pods, total=total,
                  pods=pods, raised=tuple(raised), topology=topology)


def pod_request(pod_spec: Mapping[str, Any]) -> ResourceList:
    """What the kube-scheduler reserves for one pod with this spec.

    max(sum of containers (plus restartable init containers), largest init container)
    per resource, then pod-level ``resources.requests`` where set, plus ``overhead``.
    A container's limit stands in for a missing request, as Kubernetes defaults it.
    """
    return _pod_request(_mapping(pod_spec, "pod spec"), "")


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One pod template inside a wrapped object: how many pods it makes, and its spec."""

    count: int
    spec: Mapping[str, Any]
    path: str
    """Where the template sits in the object (``spec.template``...)."""
    role: str = ""
    """Its role in the object (a replica type, a replicated job, a worker group)."""


def pod_templates(obj: Mapping[str, Any]) -> tuple[PodTemplate, ...] | None:
    """The pod templates of a Kubernetes object, read by the same rules as a wrapped one
    (``mcad wrap`` declares its pods from them); None for a kind mcad cannot read.
    Raises ``DemandError`` for a malformed object."""
    obj = _mapping(obj, "the object")
    api_version = str(obj.get("apiVersion", ""))
    kind = str(obj.get("kind", ""))
    reader = _READERS.get((api_version.rpartition("/")[0], kind))
    if reader is None:
        return None
    label = f"{kind} {_mapping(obj.get('metadata'), 'metadata').get('name', '')}".strip()
    found = []
    for template in reader(obj, label):
        path = template.path.removeprefix("generictemplate.")
        pod_template = _mapping(template.template, f"{label}: {path}")
        found.append(PodTemplate(template.count,
                                 _mapping(pod_template.get("spec"), f"{label}: {path}.spec"),
                                 path, template.role))
    return tuple(found)


def inferred_pod_sets(obj: Mapping[str, Any]) -> tuple[DeclaredPodSet, ...] | None:
    """The podSets of a wrapped object as v1beta2 would infer them (paths in its grammar,
    ``template.spec.template``), read by mcad's rules; None for a kind mcad cannot read.
    Raises ``DemandError`` for a malformed object."""
    found = pod_templates(obj)
    if found is None:
        return None
    return tuple(DeclaredPodSet("template" if t.path == "generictemplate"
                                else f"template.{t.path}", t.count) for t in found)


# -- one GenericItem -------------------------------------------------------------------

def _item_pod_sets(index: int, item: Mapping[str, Any]) -> tuple[list[PodSet], bool]:
    """The item's pod sets, and whether its declaration was raised to its templates'."""
    where = f"GenericItems[{index}]"
    template = _mapping(item.get("generictemplate"), f"{where}.generictemplate")
    api_version = str(template.get("apiVersion", ""))
    kind = str(template.get("kind", ""))
    label = f"{where} (Kind {api_version} {kind})"
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    reader = _READERS.get((group, kind))
    name = _mapping(template.get("metadata"), f"{label} metadata").get("name", "")
    source = f"{where} {kind}/{name}" if kind else where
    custom = item.get("custompodresources")
    if custom:
        selector: tuple[tuple[str, str], ...] = ()
        tolerations: tuple[Toleration, ...] = ()
        from_templates: list[PodSet] = []
        if reader is not None and template:
            first = next(iter(reader(template, label)), None)
            if first is not None:
                pod_template = _mapping(first.template, f"{label}: {first.path}")
                pod_spec = _mapping(pod_template.get("spec"), f"{label}: {first.path}.spec")
                selector, tolerations = _placement(pod_spec, f"{label}: {first.path}.spec")
            from_templates = _template_pod_sets(item, template, reader, label, source)
        declared = _custom_pod_sets(custom, label=label, source=source, selector=selector,
                                    tolerations=tolerations)
        # A declaration may raise the demand, never lower it below what the templates'
        # pods will really request: a 2 x 8-GPU Job declared as 1 GPU is charged 16.
        if from_templates and not _total(from_templates).fits_in(_total(declared)):
            return from_templates, True
        return declared, False
    if not template:
        raise DemandError(
            f"{where} has neither a generictemplate nor custompodresources; "
            "add the object to wrap, or declare its pods with custompodresources"
        )
    if reader is None:
        raise DemandError(
            f"{label} cannot be read for resource demand: mcad does not know how a "
            f"{kind or 'kindless object'} makes pods; declare its pods with "
            "custompodresources on the item"
        )
    return _template_pod_sets(item, template, reader, label, source), False


def _component_pod_sets(index: int, item: Mapping[str, Any],
                        declared: tuple[DeclaredPodSet, ...]) -> tuple[list[PodSet], bool]:
    """A v1beta2 component's pod sets (stored as GenericItem ``index``), and whether its
    declaration was raised to its templates'."""
    if not declared:
        template = _mapping(item.get("generictemplate"), f"GenericItems[{index}].generictemplate")
        group, kind = _group_kind(template)
        if item.get("custompodresources") or (group, kind) in _READERS:
            return _item_pod_sets(index, item)
        return [], False  # v1beta2: a kind nobody can read, and no podSets: no pods
    where = f"components[{index}]"
    template = _mapping(item.get("generictemplate"), f"{where}.template")
    group, kind = _group_kind(template)
    name = _mapping(template.get("metadata"), f"{where}.template.metadata").get("name", "")
    out = []
    for i, pod_set in enumerate(declared):
        at = f"{where}.podSets[{i}]"
        try:
            pod_template = pod_template_at(template, pod_set.path)
        except PodSetError as err:
            raise DemandError(f"{at}.path: {err}") from err
        pod_spec = _mapping(pod_template.get("spec"), f"{at}: {pod_set.path}.spec")
        selector, tolerations = _placement(pod_spec, f"{at}: {pod_set.path}.spec")
        out.append(PodSet(count=pod_set.replicas,
                          requests=_pod_request(pod_spec, f"{at}: {pod_set.path}.spec."),
                          node_selector=selector, tolerations=tolerations,
                          source=f"{where} {kind}/{name} podSets[{i}]"))
    reader = _READERS.get((group, kind))
    if reader is not None:
        label = f"{where} (Kind {template.get('apiVersion', '')} {kind})"
        from_templates = _template_pod_sets(item, template, reader, label,
                                            f"{where} {kind}/{name}")
        if not _total(from_templates).fits_in(_total(out)):
            return from_templates, True
    return out, False


def _group_kind(template: Mapping[str, Any]) -> tuple[str, str]:
    api_version = str(template.get("apiVersion", ""))
    return (api_version.rpartition("/")[0] if "/" in api_version else ""), \
        str(template.get("kind", ""))


def _template_pod_sets(item: Mapping[str, Any], template: Mapping[str, Any], reader: _Reader,
                       label: str, source: str) -> list[PodSet]:
    """The pods the wrapped object's templates make, times the item's ``replicas``."""
    where = label.partition(" ")[0]
    replicas = _count(item.get("replicas"), f"{where}.replicas", default=1)
    out = []
    for found in reader(template, label):
        path = f"{label}: {found.path}"
        pod_spec = _mapping(_mapping(found.template, path).get("spec"), f"{path}.spec")
        selector, tolerations = _placement(pod_spec, f"{path}.spec")
        out.append(PodSet(
            count=found.count * replicas,
            requests=_pod_request(pod_spec, f"{path}.spec."),
            node_selector=selector,
            tolerations=tolerations,
            source=f"{source}{' ' + found.role if found.role else ''}",
        ))
    return out


def _total(pod_sets: list[PodSet]) -> ResourceList:
    total = EMPTY
    for pod_set in pod_sets:
        total = total + pod_set.requests.scale(pod_set.count)
    return total


def _custom_pod_sets(custom: Any, *, label: str, source: str,
                     selector: tuple[tuple[str, str], ...],
                     tolerations: tuple[Toleration, ...]) -> list[PodSet]:
    out = []
    for i, raw in enumerate(_list(custom, f"{label}: custompodresources")):
        path = f"{label}: custompodresources[{i}]"
        entry = _mapping(raw, path)
        requests = _resources(entry.get("requests"), f"{path}.requests")
        limits = _resources(entry.get("limits"), f"{path}.limits")
        out.append(PodSet(
            count=_count(entry.get("replicas"), f"{path}.replicas", default=1),
            requests=_defaulted(requests, limits),
            node_selector=selector,
            tolerations=tolerations,
            source=f"{source} custompodresources[{i}]",
        ))
    return out


# -- the kinds we can read --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Found:
    """A pod template inside a wrapped object and how many pods it stands for."""

    count: int
    template: Any
    path: str
    role: str = ""


_Reader = Callable[[Mapping[str, Any], str], Iterator[_Found]]


def _read_pod(obj: Mapping[str, Any], label: str) -> Iterator[_Found]:
    yield _Found(1, obj, "generictemplate")


def _job_pods(job_spec: Mapping[str, Any], where: str) -> int:
    parallelism = _count(job_spec.get("parallelism"), f"{where}.parallelism", default=1)
    completions = job_spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, _count(completions, f"{where}.completions", default=1))
    return parallelism


def _read_job(obj: Mapping[str, Any], label: str) -> Iterator[_Found]:
    where = f"{label}: generictemplate.spec"
    spec = _mapping(obj.get("spec"), where)
    yield _Found(_job_pods(spec, where), spec.get("template"), "generictemplate.spec.template")


def _read_replicated(obj: Mapping[str, Any], label: str) -> Iterator[_Found]:
    where = f"{label}: generictemplate.spec"
    spec = _mapping(obj.get("spec"), where)
    yield _Found(_count(spec.get("replicas"), f"{where}.replicas", default=1),
                 spec.get("template"), "generictemplate.spec.template")


def _read_jobset(obj: Mapping[str, Any], label: str) -> Iterator[_Found]:
    spec = _mapping(obj.get("spec"), f"{label}: generictemplate.spec")
    jobs = _list(spec.get("replicatedJobs"), f"{label}: generictemplate.spec.replicatedJobs")
    for i, raw in enumerate(jobs):
        path = f"generictemplate.spec.replicatedJobs[{i}]"
        where = f"{label}: {path}"
        job = _mapping(raw, where)
        replicas = _count(job.get("replicas"), f"{where}.replicas", default=1)
        job_template = _mapping(job.get("template"), f"{where}.template")
        job_spec = _mapping(job_template.get("spec"), f"{where}.template.spec")
        pods = _job_pods(job_spec, f"{where}.template.spec")
        yield _Found(replicas * pods, job_spec.get("template"),
                     f"{path}.template.spec.template", f"job {job.get('name', i)}")


def _replica_specs_reader(field: str) -> _Reader:
    """Kubeflow training jobs: ``spec.<field>.<Role>{replicas, template}``."""

    def read(obj: Mapping[str, Any], label: str) -> Iterator[_Found]:
        spec = _mapping(obj.get("spec"), f"{label}: generictemplate.spec")
        roles = _mapping(spec.get(field), f"{label}: generictemplate.spec.{field}")
        for role, raw in roles.items():
            path = f"generictemplate.spec.{field}.{role}"
            replica_spec = _mapping(raw, f"{label}: {path}")
            yield _Found(_count(replica_spec.get("replicas"), f"{label}: {path}.replicas",
                                default=1),
                         replica_spec.get("template"), f"{path}.template", str(role))

    return read


def _read_raycluster(obj: Mapping[str, Any], label: str) -> Iterator[_Found]:
    yield from _ray_cluster(_mapping(obj.get("spec"), f"{label}: generictemplate.spec"),
                            label, "generictemplate.spec")


def _read_rayjob(obj: Mapping[str, Any], label: str) -> Iterator[_Found]:
    """The RayCluster a RayJob makes (``spec.rayClusterSpec``), as the AppWrapper project
    infers a RayJob's pod sets; the submitter Job's one small pod is not counted (its
    pods carry no AppWrapper label), and a RayJob that runs on an existing cluster
    (``clusterSelector``, no ``rayClusterSpec``) makes none."""
    spec = _mapping(obj.get("spec"), f"{label}: generictemplate.spec")
    yield from _ray_cluster(_mapping(spec.get("rayClusterSpec"),
                                     f"{label}: generictemplate.spec.rayClusterSpec"),
                            label, "generictemplate.spec.rayClusterSpec")


def _ray_cluster(spec: Mapping[str, Any], label: str, prefix: str) -> Iterator[_Found]:
    head = _mapping(spec.get("headGroupSpec"), f"{label}: {prefix}.headGroupSpec")
    if head:
        yield _Found(1, head.get("template"), f"{prefix}.headGroupSpec.template", "head")
    groups = _list(spec.get("workerGroupSpecs"), f"{label}: {prefix}.workerGroupSpecs")
    for i, raw in enumerate(groups):
        path = f"{prefix}.workerGroupSpecs[{i}]"
        where = f"{label}: {path}"
        group = _mapping(raw, where)
        if group.get("replicas") is not None:
            replicas = _count(group["replicas"], f"{where}.replicas", default=0)
        else:
            replicas = _count(group.get("minReplicas"), f"{where}.minReplicas", default=0)
        hosts = _count(group.get("numOfHosts"), f"{where}.numOfHosts", default=1)
        yield _Found(replicas * hosts, group.get("template"), f"{path}.template",
                     f"workers {group.get('groupName', i)}")


def _read_leaderworkerset(obj: Mapping[str, Any], label: str) -> Iterator[_Found]:
    """``spec.replicas`` groups of ``leaderWorkerTemplate.size`` pods: one leader (from
    ``leaderTemplate``, else ``workerTemplate``) and size - 1 workers each."""
    where = f"{label}: generictemplate.spec"
    spec = _mapping(obj.get("spec"), where)
    groups = _count(spec.get("replicas"), f"{where}.replicas", default=1)
    lws = _mapping(spec.get("leaderWorkerTemplate"), f"{where}.leaderWorkerTemplate")
    size = _count(lws.get("size"), f"{where}.leaderWorkerTemplate.size", default=1)
    path = "generictemplate.spec.leaderWorkerTemplate"
    if lws.get("leaderTemplate") is not None:
        yield _Found(groups, lws["leaderTemplate"], f"{path}.leaderTemplate", "leaders")
        yield _Found(groups * max(size - 1, 0), lws.get("workerTemplate"),
                     f"{path}.workerTemplate", "workers")
    else:
        yield _Found(groups * max(size, 1), lws.get("workerTemplate"),
                     f"{path}.workerTemplate", "workers")


def _read_nothing(obj: Mapping[str, Any], label: str) -> Iterator[_Found]:
    return iter(())


_READERS: dict[tuple[str, str], _Reader] = {
    ("", "Pod"): _read_pod,
    ("batch", "Job"): _read_job,
    ("apps", "Deployment"): _read_replicated,
    ("apps", "StatefulSet"): _read_replicated,
    ("apps", "ReplicaSet"): _read_replicated,
    ("jobset.x-k8s.io", "JobSet"): _read_jobset,
    ("kubeflow.org", "PyTorchJob"): _replica_specs_reader("pytorchReplicaSpecs"),
    ("kubeflow.org", "TFJob"): _replica_specs_reader("tfReplicaSpecs"),
    ("kubeflow.org", "MPIJob"): _replica_specs_reader("mpiReplicaSpecs"),
    ("ray.io", "RayCluster"): _read_raycluster,
    ("ray.io", "RayJob"): _read_rayjob,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _read_leaderworkerset,
    # Objects that create no pods of their own.
    ("scheduling.x-k8s.io", "PodGroup"): _read_nothing,
    ("scheduling.sigs.k8s.io", "PodGroup"): _read_nothing,
    **{(group, kind): _read_nothing for group, kind in [
        ("", "ConfigMap"), ("", "Secret"), ("", "Service"), ("", "ServiceAccount"),
        ("", "PersistentVolumeClaim"), ("", "Endpoints"),
        ("networking.k8s.io", "Ingress"), ("networking.k8s.io", "NetworkPolicy"),
        ("route.openshift.io", "Route"), ("policy", "PodDisruptionBudget"),
        ("rbac.authorization.k8s.io", "Role"), ("rbac.authorization.k8s.io", "RoleBinding"),
        ("autoscaling", "HorizontalPodAutoscaler"),
    ]},
}


# -- one pod ---------------------------------------------------------------------------

def _pod_request(pod_spec: Mapping[str, Any], where: str) -> ResourceList:
    containers = _list(pod_spec.get("containers"), f"{where}containers")
    total: dict[str, int] = {}
    for i, container in enumerate(containers):
        for name, value in _container_request(container, f"{where}containers[{i}]").items():
            total[name] = total.get(name, 0) + value
    init_peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    inits = _list(pod_spec.get("initContainers"), f"{where}initContainers")
    for i, raw in enumerate(inits):
        path = f"{where}initContainers[{i}]"
        request = _container_request(raw, path)
        if _mapping(raw, path).get("restartPolicy") == "Always":
            # A sidecar keeps running next to the main containers and later inits.
            for name, value in request.items():
                total[name] = total.get(name, 0) + value
                sidecars[name] = sidecars.get(name, 0) + value
            running = dict(sidecars)
        else:
            running = {name: request.get(name, 0) + sidecars.get(name, 0)
                       for name in request.keys() | sidecars.keys()}
        for name, value in running.items():
            if value > init_peak.get(name, 0):
                init_peak[name] = value
    result = ResourceList(total).max(init_peak)
    pod_resources = _mapping(pod_spec.get("resources"), f"{where}resources")
    if pod_resources:
        pod_level = _defaulted(
            _resources(pod_resources.get("requests"), f"{where}resources.requests"),
            _resources(pod_resources.get("limits"), f"{where}resources.limits"))
        result = ResourceList({**result, **pod_level})
    return result + _resources(pod_spec.get("overhead"), f"{where}overhead")


def _container_request(raw: Any, where: str) -> ResourceList:
    container = _mapping(raw, where)
    resources = _mapping(container.get("resources"), f"{where}.resources")
    return _defaulted(_resources(resources.get("requests"), f"{where}.resources.requests"),
                      _resources(resources.get("limits"), f"{where}.resources.limits"))


def _defaulted(requests: ResourceList, limits: ResourceList) -> ResourceList:
    """Requests, with the limit standing in for each resource that has no request."""
    missing = [name for name in limits if name not in requests]
    if not missing:
        return requests
    return requests + {name: limits[name] for name in missing}


def _placement(pod_spec: Mapping[str, Any],
               where: str) -> tuple[tuple[tuple[str, str], ...], tuple[Toleration, ...]]:
    selector = _mapping(pod_spec.get("nodeSelector"), f"{where}.nodeSelector")
    tolerations = []
    for i, raw in enumerate(_list(pod_spec.get("tolerations"), f"{where}.tolerations")):
        entry = _mapping(raw, f"{where}.tolerations[{i}]")
        tolerations.append(Toleration(
            key=str(entry.get("key") or ""),
            operator=str(entry.get("operator") or "Equal"),
            value=str(entry.get("value") or ""),
            effect=str(entry.get("effect") or ""),
        ))
    pairs = tuple(sorted((str(k), str(v)) for k, v in selector.items()))
    return pairs, tuple(tolerations)


# -- reading wire values ----------------------------------------------------------------

def _resources(value: Any, where: str) -> ResourceList:
    quantities = _mapping(value, where)
    if not quantities:
        return EMPTY
    out: dict[str, int] = {}
    for name, amount in quantities.items():
        try:
            nano = parse_quantity(amount)
        except QuantityError as err:
            raise DemandError(f"{where}.{name}: {err}") from err
        if nano < 0:
            raise DemandError(f"{where}.{name} is negative ({amount}); requests are never "
                              "below zero")
        out[str(name)] = nano
    return ResourceList(out)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DemandError(f"{where} must be an object, not {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise DemandError(f"{where} must be a list, not {type(value).__name__}")
    return list(value)


def _count(value: Any, where: str, *, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DemandError(f"{where} must be a whole number of zero or more, not {value!r}")
    return value
