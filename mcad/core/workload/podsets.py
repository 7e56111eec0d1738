"""AppWrapper v1beta2's podSets: where in a wrapped object the template of its pods is,
and how many pods it makes.

Why: a v1beta2 component says how it makes pods with ``podSets`` (a ``path`` to a
PodTemplateSpec inside its ``template``, and ``replicas``), or leaves them to be
inferred for the kinds everyone knows (project-codeflare/appwrapper's ``InferPodSets``).
The demand (``mcad.core.workload.demand``) counts pods by them, so a path that leads nowhere must
be refused with a sentence before anything is charged or created, and a declaration
that contradicts what the template says must not slip past: for the kinds the AppWrapper
project infers, declared podSets must match the inferred ones (its ``ValidatePodSets``:
same paths, same replicas); for other kinds they are taken as written (and the demand
still never counts less than the templates mcad can read ask for).

Paths are in v1beta2's grammar: ``template`` (the wrapped object itself), then
``.field`` and ``[index]`` steps, e.g. ``template.spec.replicatedJobs[0].template.spec.
template``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ROOT = "template"
UPSTREAM_INFERRED = frozenset({
    ("", "Pod"), ("apps", "Deployment"), ("apps", "StatefulSet"), ("batch", "Job"),
    ("kubeflow.org", "PyTorchJob"), ("ray.io", "RayCluster"), ("ray.io", "RayJob"),
    ("jobset.x-k8s.io", "JobSet"),
})
"""(group, kind): the kinds whose podSets project-codeflare/appwrapper v1.2.1 infers, and
so checks declared ones against."""


@dataclass(frozen=True, slots=True)
class DeclaredPodSet:
    """One podSet: ``replicas`` pods from the PodTemplateSpec at ``path``."""

    path: str
    replicas: int = 1

    def to_wire(self) -> dict[str, Any]:
        return {"path": self.path, "replicas": self.replicas}


class PodSetError(ValueError):
    """A path that does not lead to a pod template; the message says where it stops."""


def parse_path(path: str) -> tuple[str | int, ...]:
    """The steps of ``path`` after ``template``: field names and list indexes."""
    if not isinstance(path, str) or not path.startswith(ROOT):
        raise PodSetError(f"{_show(path)} does not start with {ROOT!r} (the component's "
                          "template)")
    steps: list[str | int] = []
    rest = path[len(ROOT):]
    while rest:
        if rest.startswith("["):
            end = rest.find("]")
            index = rest[1:end] if end > 0 else ""
            if not index.isdigit():
                raise PodSetError(f"{_show(path)} has an index that is not a whole number "
                                  f"at {_show(rest)}")
            steps.append(int(index))
            rest = rest[end + 1:]
        elif rest.startswith("."):
            rest = rest[1:]
            cut = min((i for i in (rest.find("."), rest.find("[")) if i >= 0),
                      default=len(rest))
            if cut == 0:
                raise PodSetError(f"{_show(path)} has an empty field name")
            steps.append(rest[:cut])
            rest = rest[cut:]
        else:
            raise PodSetError(f"{_show(path)} is not template followed by .field and "
                              "[index] steps")
    return tuple(steps)


def resolve(template: Mapping[str, Any], path: str) -> Any:
    """What is at ``path`` inside ``template``; raises ``PodSetError`` naming where the
    path leaves the object."""
    cursor: Any = template
    walked = ROOT
    for step in parse_path(path):
        if isinstance(step, int):
            if not isinstance(cursor, list) or step >= len(cursor):
                why = "no such item" if isinstance(cursor, list) else "not a list"
                raise PodSetError(f"{_show(path)} leaves the template at {walked}[{step}] "
                                  f"({why})")
            cursor = cursor[step]
            walked += f"[{step}]"
        else:
            if not isinstance(cursor, Mapping) or step not in cursor:
                why = "no such field" if isinstance(cursor, Mapping) else "not an object"
                raise PodSetError(f"{_show(path)} leaves the template at {walked}.{step} "
                                  f"({why})")
            cursor = cursor[step]
            walked += f".{step}"
    return cursor


def pod_template_at(template: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """The PodTemplateSpec (or Pod) at ``path``: an object whose ``spec`` has
    ``containers``; raises ``PodSetError`` otherwise."""
    found = resolve(template, path)
    spec = found.get("spec") if isinstance(found, Mapping) else None
    if not isinstance(found, Mapping) or not isinstance(spec, Mapping) or \
            not isinstance(spec.get("containers"), list):
        raise PodSetError(f"{_show(path)} does not lead to a pod template (an object whose "
                          "spec has containers)")
    return found


def declared_from_wire(value: Any) -> tuple[DeclaredPodSet, ...]:
    """``podSets`` as written (a list of {path, replicas}), without checking the paths;
    an entry that is not of that shape raises ``PodSetError``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PodSetError("podSets is not a list")
    out = []
    for index, entry in enumerate(value):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("path"), str):
            raise PodSetError(f"podSets[{index}] has no path")
        replicas = entry.get("replicas", 1)
        replicas = 1 if replicas is None else replicas
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise PodSetError(f"podSets[{index}].replicas is {replicas!r}, not a whole "
                              "number of zero or more")
        out.append(DeclaredPodSet(entry["path"], replicas))
    return tuple(out)


def declared_problems(template: Mapping[str, Any], declared: Sequence[DeclaredPodSet],
                      inferred: Sequence[DeclaredPodSet] | None, *, where: str) -> list[str]:
    """What is wrong with the podSets declared for ``template``: a path that does not lead
    to a pod template, a path given twice, and, for a kind whose podSets the AppWrapper
    project infers, a declaration that differs from what ``inferred`` found. ``where``
    names the component (``spec.components[0]``)."""
    problems = []
    seen: set[str] = set()
    for index, pod_set in enumerate(declared):
        at = f"{where}.podSets[{index}].path"
        if pod_set.path in seen:
            problems.append(f"{at}: {pod_set.path} is declared twice; give each pod "
                            "template one podSet")
        seen.add(pod_set.path)
        try:
            pod_template_at(template, pod_set.path)
        except PodSetError as err:
            problems.append(f"{at}: {err}")
    if problems or not declared or inferred is None or _group_kind(template) \
            not in UPSTREAM_INFERRED:
        return problems
    by_path = {p.path: p for p in declared}
    if len(inferred) != len(declared):
        return [f"{where}.podSets: {len(declared)} declared, but the "
                f"{template.get('kind')} makes pods from {len(inferred)} pod template"
                f"{'s' if len(inferred) != 1 else ''} "
                f"({', '.join(p.path for p in inferred)}); declare them all, or leave "
                "podSets out and they are inferred"]
    for pod_set in inferred:
        mine = by_path.get(pod_set.path)
        if mine is None:
            problems.append(f"{where}.podSets: no podSet for {pod_set.path}, where the "
                            f"{template.get('kind')} has a pod template")
        elif mine.replicas != pod_set.replicas:
            problems.append(f"{where}.podSets: {pod_set.path} declares {mine.replicas} "
                            f"replicas, but the template makes {pod_set.replicas} pods "
                            "there; correct the replicas, or leave podSets out")
    return problems


def _group_kind(template: Mapping[str, Any]) -> tuple[str, str]:
    api_version = str(template.get("apiVersion", ""))
    return api_version.rpartition("/")[0], str(template.get("kind", ""))


def _show(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def is_pod_template(key: object, value: Any) -> bool:
    """A PodTemplateSpec: a ``template`` (or ``...Template``: a LeaderWorkerSet's
    ``leaderTemplate`` and ``workerTemplate``) whose spec has containers (Job,
    Deployment, JobSet, PyTorchJob, RayCluster... at any depth)."""
    return ((key == "template" or (isinstance(key, str) and key.endswith("Template")))
            and isinstance(value, Mapping)
            and isinstance(value.get("spec"), Mapping) and "containers" in value["spec"])


def every_pod_template(node: Any) -> Iterator[Mapping[str, Any]]:
    """Every pod template inside ``node`` (an object's spec), to read: a plan shares what
    it does not change with the spec, so nothing found here may be changed in place."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if is_pod_template(key, value):
                yield value
            yield from every_pod_template(value)
    elif isinstance(node, list):
        for value in node:
            yield from every_pod_template(value)


def rewrite_pod_templates(node: Any, rewrite: Callable[[Mapping[str, Any], Any], Any]) -> Any:
    """``node`` with every pod template inside it replaced by ``rewrite(template, spec)``,
    where ``spec`` is the template's spec with the templates inside it already rewritten.

    Copy on write: what holds no pod template (containers, volumes, ...) is returned as
    it is, shared, and only the dicts and lists on a path to a changed template are new,
    so a plan that shares its spec with the AppWrapper's never changes the caller's
    objects. Why one walk: labels (``mcad.core.life.wrapping``), a topology pin
    (``mcad.core.workload.topology``) and GPU-health affinity (``mcad.core.life.health``) are all
    written this way, and the copy-on-write rule must hold the same for each."""
    if isinstance(node, Mapping):
        out: dict[str, Any] | None = None
        for key, value in node.items():
            if is_pod_template(key, value):
                changed: Any = rewrite(value, rewrite_pod_templates(value["spec"], rewrite))
            else:
                changed = rewrite_pod_templates(value, rewrite)
            if changed is not value:
                if out is None:
                    out = dict(node)
                out[key] = changed
        return node if out is None else out
    if isinstance(node, list):
        items = [rewrite_pod_templates(value, rewrite) for value in node]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    return node
