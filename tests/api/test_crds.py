"""The committed CRDs are exactly what the models generate, are structural, agree with the
models field by field (wire names, defaults, required), and accept MCAD v1 YAML and the
examples as the API server would (strict field validation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from mcad.api import appwrapper_v1beta2, crds
from mcad.api.meta import ObjectMeta, WireModel
from tests.api.schema_check import schema_errors

ROOT = Path(__file__).resolve().parents[2]
RESOURCES = {r.kind: r for r in crds.RESOURCES}


def test_committed_crds_are_up_to_date() -> None:
    outdated = crds.stale(crds.DEFAULT_DIR)
    assert not outdated, (
        f"{', '.join(outdated)} differ from what the models generate; "
        "run `python -m mcad.api.crds` and commit the result"
    )


def test_generation_is_deterministic(tmp_path: Path) -> None:
    crds.write(tmp_path)
    first = {p.name: p.read_text() for p in tmp_path.iterdir()}
    crds.write(tmp_path)
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == first
    assert crds.main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "workload.codeflare.dev_appwrappers.yaml").write_text("stale\n")
    assert crds.main(["--check", "--dir", str(tmp_path)]) == 1


def schema_of(kind: str) -> dict[str, Any]:
    return crds.structural_schema(RESOURCES[kind].model)


@pytest.mark.parametrize("kind", sorted(RESOURCES))
def test_schemas_are_structural(kind: str) -> None:
    assert list(crds.structural_problems(schema_of(kind))) == []


def test_the_structural_check_can_fail() -> None:
    bad = {"type": "object", "properties": {"a": {"$ref": "#/x"}, "b": {"anyOf": []}}}
    assert len(list(crds.structural_problems(bad))) == 4  # $ref, no type, no type, anyOf


def preserved_paths(schema: dict[str, Any], path: str = "") -> list[str]:
    out = [path] if schema.get("x-kubernetes-preserve-unknown-fields") else []
    for name, sub in schema.get("properties", {}).items():
        out += preserved_paths(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        out += preserved_paths(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        out += preserved_paths(schema["items"], f"{path}[]")
    return out


def test_unknown_fields_are_preserved_only_where_intended() -> None:
    assert preserved_paths(schema_of("AppWrapper")) == [
        ".spec.resources.GenericItems[].generictemplate",
        ".spec.resources.GenericItems[].metadata",
        ".spec.resources.Items[]",
        ".spec.resources.metadata",
        ".spec.schedulingSpec.clusterScheduling.policyResult",
        ".spec.schedulingSpec.dispatchingWindow",
        ".spec.service.spec",
    ]
    assert preserved_paths(schema_of("QuotaSubtree")) == []
    assert preserved_paths(schema_of("SpokeCluster")) == []
    template = schema_of("AppWrapper")["properties"]["spec"]["properties"]["resources"][
        "properties"]["GenericItems"]["items"]["properties"]["generictemplate"]
    assert template["x-kubernetes-embedded-resource"] is True


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The WireModel inside ``X``, ``X | None``, ``list[X]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is dict:
        return None  # resource lists and free-form objects
    for arg in get_args(annotation):
        found = nested_model(arg)
        if found is not None:
            return found
    return None


def compare(model: type[BaseModel], schema: dict[str, Any], path: str) -> list[str]:
    """Differences between a model and its schema, recursively."""
    problems = []
    properties = schema.get("properties", {})
    wire_names = set()
    for attr, info in model.model_fields.items():
        wire = info.alias or attr
        wire_names.add(wire)
        where = f"{path}.{wire}"
        if not path and wire in ("apiVersion", "kind", "metadata"):
            continue  # the API server's own fields, declared by the generator
        if wire not in properties:
            problems.append(f"{where}: in the model, not in the schema")
            continue
        sub = properties[wire]
        problems += compare_default(info, sub, where)
        required = info.is_required()
        if required != (wire in schema.get("required", [])):
            problems.append(f"{where}: required={required} in the model, not in the schema")
        inner = nested_model(info.annotation)
        if inner is not None and inner is not ObjectMeta:
            target = sub.get("items", sub) if sub.get("type") == "array" else sub
            problems += compare(inner, target, where)
    extra = set(properties) - wire_names - ({"apiVersion", "kind", "metadata"} if not path
                                            else set())
    if extra and model is not ObjectMeta:
        problems.append(f"{path}: schema has {sorted(extra)} the model does not")
    return problems


def compare_default(info: FieldInfo, schema: dict[str, Any], where: str) -> list[str]:
    default = None if info.is_required() or info.default_factory else info.default
    emits = crds._emits_default(default)
    if emits and schema.get("default") != default:
        return [f"{where}: default {default!r} in the model, {schema.get('default')!r} in schema"]
    if not emits and "default" in schema:
        return [f"{where}: schema defaults to {schema['default']!r}, the model does not"]
    return []


@pytest.mark.parametrize("kind", sorted(RESOURCES))
def test_models_and_schemas_agree_field_by_field(kind: str) -> None:
    model = RESOURCES[kind].model
    schema = schema_of(kind)
    problems = compare(model, schema, "")
    assert problems == []


def test_the_field_by_field_comparison_can_fail() -> None:
    schema = schema_of("SpokeCluster")
    del schema["properties"]["spec"]["properties"]["unschedulable"]
    schema["properties"]["spec"]["properties"]["kubeconfigSecret"]["properties"]["key"][
        "default"] = "config"
    problems = compare(RESOURCES["SpokeCluster"].model, schema, "")
    assert ".spec.unschedulable: in the model, not in the schema" in problems
    assert any(p.startswith(".spec.kubeconfigSecret.key: default") for p in problems)


@pytest.mark.parametrize(("kind", "short", "columns"), [
    ("AppWrapper", "aw", ["State", "Cluster", "Requeues", "Priority", "Pods", "Message", "Age"]),
    ("QuotaSubtree", "qst", ["Tree", "Parent", "Usage", "Valid", "Age"]),
    ("SpokeCluster", "spoke", ["Ready", "Nodes", "GPUs free", "Topology", "Reason", "Age"]),
])
def test_names_and_printer_columns(kind: str, short: str, columns: list[str]) -> None:
    crd = yaml.safe_load((crds.DEFAULT_DIR / RESOURCES[kind].filename).read_text())
    names = crd["spec"]["names"]
    assert names["shortNames"] == [short]
    assert names["categories"] == ["mcad"]
    own = {v.name for v in RESOURCES[kind].own_versions}
    for version in crd["spec"]["versions"]:
        if version["name"] not in own:
            assert [c["name"] for c in version["additionalPrinterColumns"]] == columns
        assert version["subresources"] == {"status": {}}
    assert [v["storage"] for v in crd["spec"]["versions"]].count(True) == 1


def test_appwrappers_are_served_as_v1beta1_stored_and_v1beta2_converted_by_mcad() -> None:
    crd = yaml.safe_load((crds.DEFAULT_DIR / RESOURCES["AppWrapper"].filename).read_text())
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert [(n, v["served"], v["storage"]) for n, v in versions.items()] == [
        ("v1beta1", True, True), ("v1beta2", True, False)]
    assert [c["name"] for c in versions["v1beta2"]["additionalPrinterColumns"]] == [
        "Status", "Quota Reserved", "Resources Deployed", "Unhealthy", "Cluster", "Message",
        "Age"]  # project-codeflare/appwrapper's, then mcad's (wide)
    assert crd["spec"]["conversion"] == {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"], "clientConfig": {"service": {
            "namespace": "mcad-system", "name": "mcad-webhook", "path": "/convert",
            "port": 8443},  # the conversion's own process (manifests: --conversion-address)
            "url": None}}}  # apply removes the URL an out-of-cluster mcad set (e2e/install)
    v1beta2 = versions["v1beta2"]["schema"]["openAPIV3Schema"]
    assert list(crds.structural_problems(v1beta2)) == []
    assert sorted(preserved_paths(v1beta2)) == [
        ".spec.components[].podSetInfos[].schedulingGates[]",
        ".spec.components[].podSetInfos[].tolerations[]",
        ".spec.components[].template"]
    assert compare(appwrapper_v1beta2.AppWrapper, v1beta2, "") == []
    assert set(v1beta2["properties"]["status"]["properties"]["phase"]["enum"]) == {
        "", "Suspended", "Resuming", "Running", "Resetting", "Suspending", "Succeeded",
        "Failed", "Terminating"}


COLUMNS = [(kind, None) for kind in sorted(RESOURCES)] + [
    (kind, own) for kind in sorted(RESOURCES) for own in RESOURCES[kind].own_versions]


@pytest.mark.parametrize(("kind", "own"), COLUMNS, ids=[
    f"{k}{'-' + o.name if o else ''}" for k, o in COLUMNS])
def test_printer_columns_point_at_fields_that_exist(kind: str, own: crds.Version | None
                                                    ) -> None:
    schema = crds.structural_schema(own.model) if own else schema_of(kind)
    for column in (own.columns if own else RESOURCES[kind].columns):
        steps = column.json_path.split("[")[0].replace("\\.", "\0").strip(".").split(".")
        node = schema
        for step in (s.replace("\0", ".") for s in steps):
            if step in ("metadata",):
                break
            node = node.get("properties", {}).get(step) or node.get("additionalProperties", {})
            assert node, f"{column.name}: {column.json_path} names no field of {kind}"


def manifests() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for folder in (ROOT / "tests" / "fixtures" / "mcad-v1", ROOT / "examples"):
        for path in sorted(folder.glob("*.yaml")):
            for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
                if doc:
                    out.append((f"{path.parent.name}/{path.name}#{index}", doc))
    return out


@pytest.mark.parametrize(("name", "doc"), manifests(), ids=[n for n, _ in manifests()])
def test_the_api_server_would_accept_mcad_v1_yaml_and_the_examples(
        name: str, doc: dict[str, Any]) -> None:
    resource = RESOURCES[doc["kind"]]
    assert doc["apiVersion"] in [f"{resource.group}/{v}" for v in resource.versions]
    assert list(schema_errors(doc, schema_of(doc["kind"]))) == []


def test_the_schema_check_rejects_what_the_api_server_rejects() -> None:
    doc = {"apiVersion": "x", "kind": "AppWrapper", "metadata": {},
           "spec": {"priority": "high", "minavailable": 1, "resources": {"GenericItems": [
               {"generictemplate": {}, "custompodresources": [
                   {"replicas": 1, "requests": {"cpu": 0.5, "memory": "lots"}}]}]}}}
    errors = list(schema_errors(doc, schema_of("AppWrapper")))
    assert errors == [
        "spec.priority: 'high' is not of type integer",
        "spec.minavailable: unknown field",
        "spec.resources.GenericItems[0].custompodresources[0].requests.cpu: 0.5 is not an "
        "integer or a string",
        "spec.resources.GenericItems[0].custompodresources[0].requests.memory: 'lots' does "
        "not match the quantity pattern",
    ]


def test_wire_model_base_is_used_everywhere() -> None:
    for resource in crds.RESOURCES:
        assert issubclass(resource.model, WireModel)
