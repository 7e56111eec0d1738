"""The CRDs, generated from the pydantic models: ``python -m mcad.api.crds``.

Why generate: the models are what the controller and ``mcad validate`` read, the CRDs
are what the API server enforces; written by hand they drift. Here the model's JSON
schema (pydantic) is turned into a *structural* OpenAPI v3 schema as
apiextensions.k8s.io/v1 requires it: every ``$ref`` inlined, ``Optional`` collapsed to
its type, titles dropped, quantities as ``x-kubernetes-int-or-string``, free-form
objects (``generictemplate`` and fields kept only for MCAD v1 compatibility) as
``x-kubernetes-preserve-unknown-fields``, and nothing else preserved, so the API server
prunes or rejects unknown fields. Defaults that change behaviour (numbers, non-empty
strings) are emitted; empty strings and false are left out so stored objects stay
small. Names, scope, short names, categories and printer columns are declared below,
next to the model they belong to.

The AppWrapper is served as v1beta1 (stored) and v1beta2 (each version its own schema
and columns), converted by mcad's webhook (``spec.conversion``: the Service of the
manifests, path ``/convert``; mcad keeps its caBundle, or with ``--webhook-url`` the
whole clientConfig, current: ``mcad.webhook.certmanager``).

Output is deterministic (sorted keys), so ``tests/api/test_crds.py`` can regenerate and
compare with the committed files.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mcad.api import appwrapper, appwrapper_v1beta2, quotasubtree, spokecluster
from mcad.api.conversion import CONVERSION_SERVICE_PORT, CONVERT_PATH
from mcad.api.meta import WireModel

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "crds"
"""Where the committed CRDs live (``crds/`` at the repository root)."""

Schema = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """A ``kubectl get`` column."""

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


AGE = Column("Age", "date", ".metadata.creationTimestamp")


@dataclass(frozen=True)
class Version:
    """A version served with a schema and columns of its own (not the storage version)."""

    name: str
    model: type[WireModel]
    columns: tuple[Column, ...]


WEBHOOK_SERVICE = ("mcad-system", "mcad-webhook")
"""The manifests' Service in front of every replica's TLS server."""


def webhook_conversion(path: str) -> dict[str, Any]:
    """``spec.conversion`` calling mcad's webhook through the manifests' Service, at the
    port of the conversion's own process (``--conversion-address``).

    ``url: null`` is there on purpose: an mcad run outside the cluster (URL mode) points
    the live CRD at its URL, and ``kubectl apply`` merges the Service in beside it, which
    the API server refuses ("exactly one of url or service is required"). An explicit
    null makes apply remove the URL; on create it is simply absent.
    """
    namespace, name = WEBHOOK_SERVICE
    return {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": {"service": {"namespace": namespace, "name": name, "path": path,
                                     "port": CONVERSION_SERVICE_PORT},
                         "url": None}}}


@dataclass(frozen=True)
class Resource:
    """One custom resource: its model and how Kubernetes names and shows it."""

    model: type[WireModel]
    group: str
    kind: str
    plural: str
    short_names: tuple[str, ...]
    scope: str
    versions: tuple[str, ...]
    """Served versions; the first is the storage version. All share one schema."""
    columns: tuple[Column, ...]
    categories: tuple[str, ...] = ("mcad",)
    source: str = field(default="", compare=False)
    own_versions: tuple[Version, ...] = ()
    """Further served versions, each with its own schema (converted by ``conversion``)."""
    conversion: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def filename(self) -> str:
        return f"{self.group}_{self.plural}.yaml"


RESOURCES: tuple[Resource, ...] = (
    Resource(
        model=appwrapper.AppWrapper, group=appwrapper.GROUP, kind=appwrapper.KIND,
        plural="appwrappers", short_names=("aw",), scope="Namespaced",
        versions=(appwrapper.VERSION,),
        source="mcad/api/appwrapper.py and mcad/api/appwrapper_v1beta2.py",
        columns=(
            Column("State", "string", ".status.state", "Pending, Running, Completed, ..."),
            Column("Cluster", "string", ".status.clusterName", "Where it is dispatched"),
            Column("Requeues", "integer", ".status.numberOfRequeueings", "Times requeued"),
            Column("Priority", "integer", ".spec.priority", priority=1),
            Column("Pods", "integer", ".status.admittedPods",
                   "Elastic: the pods it runs with now", priority=1),
            Column("Message", "string", ".status.message", priority=1),
            AGE,
        ),
        own_versions=(Version(appwrapper_v1beta2.VERSION, appwrapper_v1beta2.AppWrapper, (
            Column("Status", "string", ".status.phase",
                   "Suspended, Resuming, Running, Succeeded, Failed, ..."),
            Column("Quota Reserved", "string",
                   '.status.conditions[?(@.type=="QuotaReserved")].status'),
            Column("Resources Deployed", "string",
                   '.status.conditions[?(@.type=="ResourcesDeployed")].status'),
            Column("Unhealthy", "string", '.status.conditions[?(@.type=="Unhealthy")].status'),
            Column("Cluster", "string", ".status.clusterName", "Where it is dispatched",
                   priority=1),
            Column("Message", "string", ".status.message", priority=1),
            AGE,
        )),),
        conversion=webhook_conversion(CONVERT_PATH),
    ),
    Resource(
        model=quotasubtree.QuotaSubtree, group=quotasubtree.GROUP, kind=quotasubtree.KIND,
        plural="quotasubtrees", short_names=("qst",), scope="Namespaced",
        versions=quotasubtree.SERVED_VERSIONS, source="mcad/api/quotasubtree.py",
        columns=(
            Column("Tree", "string", f".metadata.labels.{quotasubtree.TREE_LABEL}",
                   "The quota tree this subtree belongs to"),
            Column("Parent", "string", ".spec.parent", "The node the children hang under"),
            Column("Usage", "string", ".status.summary",
                   "Used/quota per child (GPUs when the child names them)"),
            Column("Valid", "string", '.status.conditions[?(@.type=="Valid")].status'),
            AGE,
        ),
    ),
    Resource(
        model=spokecluster.SpokeCluster, group=spokecluster.GROUP, kind=spokecluster.KIND,
        plural="spokeclusters", short_names=("spoke",), scope="Cluster",
        versions=(spokecluster.VERSION,), source="mcad/api/spokecluster.py",
        columns=(
            Column("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            Column("Nodes", "integer", ".status.nodes"),
            Column("GPUs free", "string", ".status.free.nvidia\\.com/gpu"),
            Column("Topology", "string", ".status.topology.summary",
                   "Free GPUs per domain, and those on partly used nodes", priority=1),
            Column("Reason", "string", '.status.conditions[?(@.type=="Ready")].reason',
                   priority=1),
            AGE,
        ),
    ),
)


# --- JSON schema -> structural schema ---------------------------------------------

_KEEP = ("type", "format", "enum", "minimum", "maximum", "minLength", "maxLength",
         "pattern", "minItems", "x-kubernetes-int-or-string",
         "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
         "x-kubernetes-validations")


def structural_schema(model: type[WireModel]) -> Schema:
    """The model's schema as the API server wants it (see the module docstring)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: Mapping[str, Schema] = raw.get("$defs", {})
    root = _convert(raw, defs)
    properties = root["properties"]
    properties["apiVersion"] = {"type": "string", "description": "The schema version."}
    properties["kind"] = {"type": "string", "description": "The kind of object."}
    properties["metadata"] = {"type": "object"}
    root["required"] = ["spec"]
    return root


def _convert(node: Schema, defs: Mapping[str, Schema]) -> Schema:
    node = _resolve(node, defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        branches = [b for b in node["anyOf"] if b != {"type": "null"}]
        if len(branches) != 1:
            raise ValueError(f"cannot express a union of {branches} structurally")
        outer = {k: v for k, v in node.items() if k != "anyOf"}
        return _convert({**_resolve(branches[0], defs), **outer}, defs)
    out: Schema = {k: node[k] for k in _KEEP if k in node}
    if "const" in node:
        out["enum"] = [node["const"]]
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = node["anyOf"]
    if node.get("description"):
        out["description"] = " ".join(node["description"].replace("``", "").split())
    default = node.get("default")
    if _emits_default(default):
        out["default"] = default
    if "properties" in node:
        out["properties"] = {name: _convert(sub, defs)
                             for name, sub in node["properties"].items()}
        if node.get("required"):
            out["required"] = sorted(node["required"])
    additional = node.get("additionalProperties")
    if isinstance(additional, dict):
        out["additionalProperties"] = _convert(additional, defs)
    elif additional is True and "properties" not in node:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "items" in node:
        out["items"] = _convert(node["items"], defs)
    return out


def _resolve(node: Schema, defs: Mapping[str, Schema]) -> Schema:
    """Inline a ``$ref`` (or a single-branch ``allOf``), keeping the referrer's keys."""
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**node["allOf"][0], **{k: v for k, v in node.items() if k != "allOf"}}
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _emits_default(default: object) -> bool:
    if isinstance(default, bool) or default is None:
        return False
    return isinstance(default, (int, float)) or (isinstance(default, str) and default != "")


def structural_problems(schema: Schema, path: str = "") -> Iterator[str]:
    """Ways ``schema`` breaks the structural-schema rules (none when it is fine)."""
    here = path or "<root>"
    for forbidden in ("$ref", "$defs", "allOf", "oneOf", "not", "title", "const", "nullable"):
        if forbidden in schema:
            yield f"{here}: has {forbidden}"
    int_or_string = schema.get("x-kubernetes-int-or-string")
    if "type" not in schema and not int_or_string and not schema.get(
            "x-kubernetes-preserve-unknown-fields"):
        yield f"{here}: has no type"
    if "anyOf" in schema and not int_or_string:
        yield f"{here}: has anyOf outside an int-or-string"
    if "properties" in schema and "additionalProperties" in schema:
        yield f"{here}: has both properties and additionalProperties"
    for name, sub in schema.get("properties", {}).items():
        yield from structural_problems(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from structural_problems(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        yield from structural_problems(schema["items"], f"{path}[]")


# --- the CRD documents -------------------------------------------------------------

def crd(resource: Resource) -> dict[str, Any]:
    """The CustomResourceDefinition of ``resource``."""
    schema = _checked_schema(resource.model, resource.kind)
    plural, kind = resource.plural, resource.kind
    versions = [
        {
            "name": version,
            "served": True,
            "storage": index == 0,
            "schema": {"openAPIV3Schema": schema},
            "subresources": {"status": {}},
            "additionalPrinterColumns": [c.to_wire() for c in resource.columns],
        }
        for index, version in enumerate(resource.versions)
    ] + [
        {
            "name": own.name,
            "served": True,
            "storage": False,
            "schema": {"openAPIV3Schema": _checked_schema(own.model, resource.kind)},
            "subresources": {"status": {}},
            "additionalPrinterColumns": [c.to_wire() for c in own.columns],
        }
        for own in resource.own_versions
    ]
    spec: dict[str, Any] = {
        "group": resource.group,
        "names": {
            "kind": kind, "listKind": f"{kind}List", "plural": plural,
            "singular": kind.lower(), "shortNames": list(resource.short_names),
            "categories": list(resource.categories),
        },
        "scope": resource.scope,
        "versions": versions,
    }
    if resource.conversion is not None:
        spec["conversion"] = resource.conversion
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": resource.name},
        "spec": spec,
    }


def _checked_schema(model: type[WireModel], kind: str) -> Schema:
    schema = structural_schema(model)
    problems = list(structural_problems(schema))
    if problems:
        raise ValueError(f"{kind}'s schema is not structural: {'; '.join(problems)}")
    return schema


def render(resource: Resource) -> str:
    """The CRD as the committed YAML text."""
    header = (f"# Generated from {resource.source} by `python -m mcad.api.crds`; "
              "do not edit by hand.\n")
    body = yaml.dump(crd(resource), Dumper=_Dumper, sort_keys=True, default_flow_style=False,
                     width=100)
    return header + body


class _Dumper(yaml.SafeDumper):
    """Writes shared sub-schemas out in full: CRDs are read by people, not only parsers."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


KUSTOMIZATION = "kustomization.yaml"


def kustomization() -> str:
    """``crds/kustomization.yaml``: the CRDs as a kustomize base (``kubectl apply -k``),
    which ``manifests/`` builds on."""
    lines = ["# Generated by `python -m mcad.api.crds`; do not edit.",
             "apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization",
             "resources:", *(f"- {r.filename}" for r in RESOURCES)]
    return "\n".join(lines) + "\n"


def _files() -> list[tuple[str, str]]:
    return [*((r.filename, render(r)) for r in RESOURCES), (KUSTOMIZATION, kustomization())]


def stale(directory: Path = DEFAULT_DIR) -> list[str]:
    """Files under ``directory`` that differ from what the models generate."""
    out = []
    for name, text in _files():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            out.append(str(path))
    return out


def write(directory: Path = DEFAULT_DIR) -> list[Path]:
    """Write every CRD (and their kustomization) to ``directory``; the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in _files():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mcad.api.crds", description="Generate the CRDs from mcad.api's models."
    )
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="output directory")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a committed CRD is out of date")
    args = parser.parse_args(argv)
    if args.check:
        outdated = stale(args.dir)
        for name in outdated:
            print(f"{name} is out of date; run python -m mcad.api.crds", file=sys.stderr)
        return 1 if outdated else 0
    for path in write(args.dir):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
