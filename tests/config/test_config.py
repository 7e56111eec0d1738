"""``mcad.config``: defaults without a file, camelCase and snake_case names, the example
manifest documenting every setting, allowed kinds, and one sentence naming the file
and the field for every kind of mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from mcad.config import ConfigError, RequeuingDefaults, RunConfig, load_run_config
from mcad.core.cycle.decide import CyclePolicy
from mcad.core.life.requeue import GrowthType, RequeuePolicy
from mcad.core.placement.clusters import PlacementPolicy
from mcad.core.placement.victims import PreemptionPolicy

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "base" / "mcad-config.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mcad-config.yaml"
    path.write_text(text)
    return path


def problem(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_run_config(path)
    message = str(err.value)
    assert str(path) in message
    assert message.endswith(".") and "\n" not in message
    return message


# -- defaults and names ---------------------------------------------------------------------

def test_no_file_means_the_documented_defaults() -> None:
    config = load_run_config(None)
    assert config == RunConfig()
    assert (config.namespace, config.placement) == ("mcad-system", "best-fit")
    assert config.cycle_policy().preemption == PreemptionPolicy(priority=False, reclaim=True)
    assert (config.starvation_seconds, config.deletion_retry_seconds) == (300, 5)
    assert config.allowed_kinds == ["*"]
    assert config.default_requeuing.policy() == RequeuePolicy()


@pytest.mark.parametrize("text", ["", "# only comments\n", "---\n"])
def test_an_empty_file_means_the_defaults(tmp_path: Path, text: str) -> None:
    assert load_run_config(write(tmp_path, text)) == RunConfig()


def test_settings_are_read_by_their_camel_case_names(tmp_path: Path) -> None:
    config = load_run_config(write(tmp_path, """
namespace: batch-system
placement: spread
preemption: true
starvationSeconds: 12.5
defaultRequeuing: {timeInSeconds: 60, growthType: linear, maxNumRequeuings: 3}
allowedKinds: [batch/Job, Pod]
deletionRetrySeconds: 1
"""))
    assert config.namespace == "batch-system"
    assert config.cycle_policy() == CyclePolicy(
        placement=PlacementPolicy.SPREAD,
        preemption=PreemptionPolicy(priority=True, reclaim=True), starvation_seconds=12.5)
    assert config.default_requeuing.policy() == RequeuePolicy(
        time_in_seconds=60, growth_type=GrowthType.LINEAR, max_num_requeuings=3)
    assert config.allowed_kinds == ["batch/Job", "Pod"]
    assert config.deletion_retry_seconds == 1.0


def test_snake_case_names_work_in_code() -> None:
    config = RunConfig(starvation_seconds=1.0,
                       default_requeuing=RequeuingDefaults(pause_time_in_seconds=5))
    assert config.default_requeuing.pause_time_in_seconds == 5


# -- the example manifest --------------------------------------------------------------------

def wire_names(model: type[BaseModel], prefix: str = "") -> set[str]:
    names = set()
    for name, info in model.model_fields.items():
        wire = f"{prefix}{info.alias or name}"
        names.add(wire)
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            names |= wire_names(info.annotation, f"{wire}.")
    return names


def keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for key, value in data.items():
        out.add(f"{prefix}{key}")
        if isinstance(value, dict):
            out |= keys(value, f"{prefix}{key}.")
    return out


def test_the_example_sets_every_setting_to_its_default() -> None:
    assert keys(yaml.safe_load(EXAMPLE.read_text())) == wire_names(RunConfig)
    assert load_run_config(EXAMPLE) == RunConfig()


def test_the_example_explains_every_setting_in_a_comment() -> None:
    lines = EXAMPLE.read_text().splitlines()
    for index, line in enumerate(lines):
        if line.strip() and not line.lstrip().startswith(("#", "-")):
            assert lines[index - 1].lstrip().startswith("#"), f"no comment above {line!r}"


# -- allowed kinds ---------------------------------------------------------------------------

KINDS = ["batch/Job", "Pod", "scheduling.x-k8s.io/PodGroup", "ray.io/*"]


@pytest.mark.parametrize(("api_version", "kind", "want"), [
    ("batch/v1", "Job", True),
    ("batch/v1", "CronJob", False),
    ("v1", "Pod", True),
    ("v1", "Service", False),
    ("apps/v1", "Pod", False),  # "Pod" is the core group's Pod only
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup", True),
    ("scheduling.sigs.k8s.io/v1alpha1", "PodGroup", False),
    ("ray.io/v1", "RayCluster", True),
    ("ray.io/v1alpha1", "RayJob", True),
    ("kubeflow.org/v1", "PyTorchJob", False),
])
def test_kinds_are_allowed_by_group_and_kind(api_version: str, kind: str, want: bool) -> None:
    assert RunConfig(allowed_kinds=KINDS).kind_allowed(api_version, kind) is want


def test_a_star_allows_every_kind() -> None:
    assert RunConfig().kind_allowed("kubeflow.org/v1", "PyTorchJob")
    assert RunConfig(allowed_kinds=["batch/Job", "*"]).kind_allowed("v1", "ConfigMap")


# -- mistakes, each one sentence naming the field -----------------------------------------

@pytest.mark.parametrize(("text", "says"), [
    ("placement: fast", "placement should be 'best-fit' or 'spread', not 'fast'"),
    ("preemtion: true", "preemtion is not a setting mcad knows (the settings here are "
                        "namespace, placement, preemption,"),
    ("defaultRequeuing: {growthType: quick}",
     "defaultRequeuing.growthType should be 'exponential', 'linear' or 'none', not 'quick'"),
    ("defaultRequeuing: {timeInSeconds: -1}",
     "defaultRequeuing.timeInSeconds should be greater than or equal to 0, not -1"),
    ("defaultRequeuing: {pauseTime: 5}",
     "defaultRequeuing.pauseTime is not a setting mcad knows (the settings here are "
     "timeInSeconds,"),
    ("defaultRequeuing: 300", "defaultRequeuing should be a mapping of settings, not 300"),
    ("starvationSeconds: '300'", "starvationSeconds should be a valid number, not '300'"),
    ("preemption: 'yes'", "preemption is 'yes'; use true, false, or {priority: true|false, "
                          "reclaim: true|false}"),
    ("preemption: {priority: 1}", "preemption.priority should be a valid boolean, not 1"),
    ("deletionRetrySeconds: 0", "deletionRetrySeconds should be greater than 0, not 0"),
    ("namespace: MCAD", "namespace is 'MCAD'; a namespace name has lower-case letters"),
    ("allowedKinds: '*'", "allowedKinds should be a valid list, not '*'"),
    ("allowedKinds: []", 'allowedKinds is empty, so no AppWrapper could run; use ["*"]'),
    ("allowedKinds: [Pod, v1/Pod]",
     "allowedKinds[1] is 'v1/Pod'; write the group without the version"),
    ("allowedKinds: [batch/v1/Job]",
     "allowedKinds[0] is 'batch/v1/Job'; write the group without the version"),
    ("allowedKinds: ['ba tch/Job']", "allowedKinds[0] is 'ba tch/Job'; use \"*\", "
                                     '"group/*", "group/Kind" or "Kind" (core group)'),
])
def test_each_mistake_is_a_sentence_naming_the_field(tmp_path: Path, text: str,
                                                     says: str) -> None:
    message = problem(tmp_path, text)
    assert message.startswith(f"the configuration file {tmp_path}/mcad-config.yaml is not "
                              "valid: ")
    assert says in message


def test_every_mistake_in_a_file_is_named(tmp_path: Path) -> None:
    message = problem(tmp_path, "placement: fast\ndefaultRequeuing: {maxNumRequeuings: -2}\n")
    assert "placement should be" in message
    assert "; defaultRequeuing.maxNumRequeuings should be" in message


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    message = problem(tmp_path, "placement: spread\nallowedKinds: [Pod\n")
    assert message.startswith(f"the configuration file {tmp_path}/mcad-config.yaml is not "
                              "valid YAML at line 3 (expected")


def test_a_list_instead_of_settings_is_a_sentence(tmp_path: Path) -> None:
    assert "should hold a mapping of settings" in problem(tmp_path, "- placement: spread\n")


def test_a_missing_file_is_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^cannot read the configuration file .*/nope\.yaml: "
                                          r"No such file or directory\.$"):
        load_run_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(("allowed", "kind", "want"), [
    (["*"], "RoleBinding", False),
    (["*"], "Role", False),
    (["*", "rbac.authorization.k8s.io/RoleBinding"], "RoleBinding", True),
    (["*", "rbac.authorization.k8s.io/RoleBinding"], "Role", False),
    (["rbac.authorization.k8s.io/*"], "Role", True),
])
def test_rbac_kinds_must_be_named_a_star_is_not_enough(allowed: list[str], kind: str,
                                                      want: bool) -> None:
    config = RunConfig(allowed_kinds=allowed)
    assert config.kind_allowed("rbac.authorization.k8s.io/v1", kind) is want


def test_quota_is_read_from_the_configured_namespaces_and_the_controllers() -> None:
    config = RunConfig(namespace="mcad", quota_namespaces=["kube-system", "quota"])
    assert [config.reads_quota_from(ns) for ns in ("kube-system", "quota", "mcad", "team-a")] \
        == [True, True, True, False]


@pytest.mark.parametrize(("text", "priority", "reclaim"), [
    ("preemption: true", True, True), ("preemption: false", False, False),
    ("preemption: {priority: true}", True, True), ("preemption: {reclaim: false}", False, False),
])
def test_preemption_takes_the_old_boolean_or_its_two_kinds(
        tmp_path: Path, text: str, priority: bool, reclaim: bool) -> None:
    policy = load_run_config(write(tmp_path, text)).cycle_policy().preemption
    assert (policy.priority, policy.reclaim) == (priority, reclaim)


@pytest.mark.parametrize(("text", "want"), [
    ("", "same"), ("spokeNamespaces: managed", "managed"),
    ("allowUnmanagedNamespaces: true", "same"), ("allowUnmanagedNamespaces: false", "managed"),
])
def test_spoke_namespaces_default_to_sameness_and_the_old_setting_keeps_its_meaning(
        tmp_path: Path, text: str, want: str) -> None:
    assert load_run_config(write(tmp_path, text)).spoke_namespaces == want


def test_the_old_and_new_namespace_settings_together_are_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="allowUnmanagedNamespaces and spokeNamespaces are "
                                          "both set; keep spokeNamespaces"):
        load_run_config(write(tmp_path, "allowUnmanagedNamespaces: true\n"
                                        "spokeNamespaces: managed"))


# -- refused namespaces ------------------------------------------------------------------------

def test_refused_namespaces_default_to_kube_and_openshift() -> None:
    config = RunConfig()
    assert config.refused_namespaces == ["kube-*", "openshift-*"]
    for namespace in ("kube-system", "openshift-monitoring", "mcad-system"):
        refusal = config.refused_namespace(namespace)
        assert refusal is not None and refusal.reason == "SystemNamespace", namespace
    assert config.refused_namespace("cert-manager") is None
    assert config.refused_namespace("team-a") is None


def test_an_admin_s_patterns_replace_the_default(tmp_path: Path) -> None:
    config = load_run_config(write(tmp_path, """
namespace: batch-control
refusedNamespaces: ["kube-*", monitoring, "gpu-*", "cert-manage?"]
"""))
    refused = {ns: config.refused_namespace(ns) for ns in (
        "kube-public", "monitoring", "gpu-operator", "cert-manager", "openshift-monitoring",
        "batch-control", "team-a")}
    assert {ns for ns, r in refused.items() if r is not None} == {
        "kube-public", "monitoring", "gpu-operator", "cert-manager", "batch-control"}
    said = refused["gpu-operator"]
    assert said is not None
    assert said.message.startswith("namespace gpu-operator is refused by the pattern gpu-* "
                                   "(refusedNamespaces); mcad does not create")
    own = refused["batch-control"]
    assert own is not None and "is mcad's own namespace" in own.message


@pytest.mark.parametrize(("text", "says"), [
    ("refusedNamespaces: [kube-*, Monitoring]",
     "refusedNamespaces[1] is 'Monitoring'; a pattern is a namespace name (lower-case "
     "letters, digits and '-', at most 63 characters) with * for any characters and ? for "
     "one"),
    ("refusedNamespaces: [kube-*, 'ops/*']", "refusedNamespaces[1] is 'ops/*'; a pattern"),
    ("refusedNamespaces: ['*']",
     "refusedNamespaces[0] is '*', which refuses every namespace, so no AppWrapper could run"),
    ("refusedNamespaces: [monitoring]",
     "refusedNamespaces is ['monitoring'], which lets AppWrappers into kube-system; the list "
     'replaces the default, so keep "kube-*" in it'),
    ("refusedNamespaces: []", "refusedNamespaces is [], which lets AppWrappers into "
                              "kube-system"),
    ("refusedNamespaces: kube-*", "refusedNamespaces should be a valid list, not 'kube-*'"),
])
def test_a_bad_refused_namespace_pattern_is_a_sentence(tmp_path: Path, text: str,
                                                        says: str) -> None:
    assert says in problem(tmp_path, text)


# -- queue names (AppWrapper v1beta2's kueue.x-k8s.io/queue-name) ---------------------------

def test_queue_names_map_to_a_node_per_tree(tmp_path: Path) -> None:
    config = load_run_config(write(tmp_path, "queueNames:\n  default-queue: {gpus: team-a}\n"))
    assert config.queue_names == {"default-queue": {"gpus": "team-a"}}
    assert RunConfig().queue_names == {}


@pytest.mark.parametrize(("text", "says"), [
    ("queueNames:\n  q: {}\n", "queueNames['q'] maps to no quota node"),
    ("queueNames:\n  q: {'bad key!': a}\n", "queueNames['q']['bad key!']"),
    ("queueNames:\n  q: [a]\n", "queueNames.q"),
])
def test_a_bad_queue_mapping_is_a_sentence(tmp_path: Path, text: str, says: str) -> None:
    assert says in problem(tmp_path, text)
