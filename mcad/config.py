"""The settings of ``mcad run``, read from one YAML file (``--config``).

Why a file and a model: the dispatcher's policies (placement, preemption, default
requeuing, which kinds AppWrappers may wrap) belong to the administrator, are few, and
should be reviewable in one ConfigMap rather than spread over flags. The model gives
each setting its default, so no file at all is a working configuration, and a typo
in a setting's name or value stops ``mcad run`` with one sentence naming the field
instead of being silently ignored.

Wire names are camelCase like every Kubernetes object (``starvationSeconds``);
attributes are snake_case; either is accepted. See ``manifests/base/mcad-config.yaml`` for
an example that documents every setting.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from mcad.api.documents import UnreadableFile, read_yaml
from mcad.core.cycle.backfill import BackfillRule
from mcad.core.cycle.decide import CyclePolicy
from mcad.core.life.health import AUTOPILOT_LABEL, FaultPolicy, NodeHealthRules
from mcad.core.life.requeue import GrowthType, RequeuePolicy
from mcad.core.life.wrapping import Refusal
from mcad.core.placement.clusters import PlacementPolicy
from mcad.core.placement.namespaces import (
    DEFAULT_PATTERNS,
    matching_pattern,
    pattern_problem,
    refused_namespace,
)
from mcad.core.placement.victims import PreemptionPolicy
from mcad.core.workload.resources import GPU
from mcad.core.workload.topology import label_key_problem

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KIND = r"[A-Za-z][A-Za-z0-9]*"
_GROUP = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
ALLOWED_KIND = re.compile(rf"^(\*|{_KIND}|{_GROUP}/(\*|{_KIND}))$")
_VERSION = re.compile(r"^v[0-9]+((alpha|beta)[0-9]+)?$")


SENSITIVE_KINDS = frozenset({("rbac.authorization.k8s.io", "Role"),
                             ("rbac.authorization.k8s.io", "RoleBinding")})
"""Kinds "*" does not allow: only an allowedKinds entry naming them (or their group) does."""


class ConfigError(ValueError):
    """The configuration cannot be used; the message is a sentence naming the field."""


class _Settings(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        strict=True,
        frozen=True,
        use_attribute_docstrings=True,
    )


class EstimateSettings(_Settings):
    """Estimated starts (``mcad.core.views.estimates``): how long runs are taken to last, and
    what the plan of the future may cost."""

    default_runtime_seconds: float = Field(3600.0, gt=0)
    """Expected run time of an AppWrapper that declares no dispatchDuration.expected and
    has no past runs in its family or namespace."""
    every_seconds: float = Field(15.0, ge=1)
    """Seconds between refreshes of the plan (longer when a plan takes long: the plan
    never uses more than a tenth of the controller's time)."""
    max_cycles: int = Field(64, ge=1, le=10000)
    """Simulated cycles per plan: AppWrappers not placed within them have no estimate."""
    horizon_seconds: float = Field(7 * 86400.0, gt=0)
    """How far ahead the plan looks."""


class RequeuingDefaults(_Settings):
    """``schedulingSpec.requeuing`` for AppWrappers that do not give one."""

    time_in_seconds: int = Field(300, ge=0)
    """Seconds after dispatch by which the gang's pods must be running."""
    max_time_in_seconds: int = Field(0, ge=0)
    """Cap on the grown timeout; 0 means no cap."""
    growth_type: Literal["exponential", "linear", "none"] = "exponential"
    """How the timeout grows after each requeue."""
    max_num_requeuings: int = Field(0, ge=0)
    """Requeues before the AppWrapper fails; 0 means unlimited."""
    pause_time_in_seconds: int = Field(90, ge=0)
    """Seconds a requeued AppWrapper waits before it may be dispatched again."""
    force_deletion_time_in_seconds: int = Field(570, ge=0)
    """Seconds after a graceful deletion at which leftovers are force-deleted."""

    def policy(self) -> RequeuePolicy:
        """These defaults as the core's requeue policy."""
        return RequeuePolicy(
            time_in_seconds=self.time_in_seconds,
            max_time_in_seconds=self.max_time_in_seconds,
            growth_type=GrowthType(self.growth_type),
            max_num_requeuings=self.max_num_requeuings,
            pause_time_in_seconds=self.pause_time_in_seconds,
            force_deletion_time_in_seconds=self.force_deletion_time_in_seconds,
        )


class FaultToleranceSettings(_Settings):
    """The defaults of AppWrapper v1beta2's fault-tolerance annotations
    (``workload.codeflare.dev.appwrapper/...``, ``mcad.core.life.health``) for AppWrappers whose
    annotations do not set them, in seconds; an annotation may not make a grace period
    longer than ``gracePeriodMaximumSeconds``."""

    admission_grace_period_seconds: float = Field(60.0, ge=0)
    """The gang's pods must exist (Pending or later) this long after its objects are made."""
    warmup_grace_period_seconds: float = Field(300.0, ge=0)
    """... and be Running this long after."""
    failure_grace_period_seconds: float = Field(60.0, ge=0)
    """A failed pod: how long its own controller has to mend the gang before it is reset."""
    retry_pause_period_seconds: float = Field(90.0, ge=0)
    """A reset deletes everything, waits this long, then creates everything again."""
    retry_limit: int = Field(3, ge=0)
    """Resets before the AppWrapper is Failed."""
    forceful_deletion_grace_period_seconds: float = Field(600.0, ge=0)
    """Pods still there this long after a reset or a failure began deleting them are
    deleted with no grace."""
    deletion_on_failure_grace_period_seconds: float = Field(0.0, ge=0)
    """How long a Failed AppWrapper's objects are kept (for debugging; it keeps its quota
    meanwhile)."""
    success_ttl_seconds: float = Field(7 * 86400.0, ge=0, alias="successTTLSeconds")
    """A completed AppWrapper is deleted this long after it completed."""
    grace_period_maximum_seconds: float = Field(86400.0, gt=0)
    """No annotation may make a grace period longer."""
    mcad_v1_defaults: bool = True
    """An AppWrapper that sets none of the annotations keeps what MCAD did where MCAD
    did something: a gang that never comes up is requeued by its
    schedulingSpec.requeuing (not reset after the admission and warm-up graces), and a
    completed one is kept (not deleted after successTTL). Failed pods, exit codes,
    unhealthy nodes and failed or deleted objects are acted on for every AppWrapper.
    false: the v1beta2 defaults above for every AppWrapper."""

    def policy(self, *, mcad_v1: bool) -> FaultPolicy:
        """The defaults as the core's policy; ``mcad_v1``: for an AppWrapper that sets no
        annotation, when ``mcadV1Defaults`` holds."""
        keep = mcad_v1 and self.mcad_v1_defaults
        cap = self.grace_period_maximum_seconds
        return FaultPolicy(
            admission_grace=None if keep else min(self.admission_grace_period_seconds, cap),
            warmup_grace=None if keep else min(self.warmup_grace_period_seconds, cap),
            failure_grace=min(self.failure_grace_period_seconds, cap),
            retry_pause=min(self.retry_pause_period_seconds, cap),
            retry_limit=self.retry_limit,
            forceful_deletion_grace=min(self.forceful_deletion_grace_period_seconds, cap),
            deletion_on_failure_grace=min(self.deletion_on_failure_grace_period_seconds, cap),
            success_ttl=None if keep else self.success_ttl_seconds)


class NodeHealthSettings(_Settings):
    """Which node label says how healthy a node's GPUs are, and what its values mean
    (Autopilot's, by default): ``preferNot`` nodes are chosen last, ``noSchedule`` and
    ``noExecute`` nodes take no new work, and gangs running on a ``noExecute`` node are
    reset onto other nodes. Pods asking for ``resource`` get the matching node
    anti-affinity."""

    label: str = AUTOPILOT_LABEL
    prefer_not: list[str] = Field(default_factory=lambda: ["WARN"])
    no_schedule: list[str] = Field(default_factory=lambda: ["TESTING", "ERR"])
    no_execute: list[str] = Field(default_factory=lambda: ["EVICT"])
    resource: str = GPU

    @field_validator("label")
    @classmethod
    def _label_is_a_key(cls, value: str) -> str:
        problem = label_key_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    def rules(self) -> NodeHealthRules:
        return NodeHealthRules(self.label, frozenset(self.prefer_not),
                               frozenset(self.no_schedule), frozenset(self.no_execute),
                               self.resource)


class PreemptionSettings(_Settings):
    """When running AppWrappers are evicted for others (``mcad.core.placement.victims``)."""

    priority: bool = False
    """A higher-priority AppWrapper evicts lower-priority ones: within its quota node, and
    on one cluster when its gang fits nowhere. Off by default: users set their own
    priorities, so turn it on once priorities are policed (e.g. by admission)."""
    reclaim: bool = True
    """A quota node takes back what others borrowed from it: an AppWrapper within its own
    quota evicts borrowers (of any priority, lowest first). On by default: without it,
    lending makes quota a promise that is not kept."""

    def policy(self) -> PreemptionPolicy:
        return PreemptionPolicy(priority=self.priority, reclaim=self.reclaim)


class RunConfig(_Settings):
    """Everything ``mcad run`` can be told in its configuration file."""

    namespace: str = "mcad-system"
    """Namespace of the Secrets holding the SpokeClusters' kubeconfigs, and of the
    leader Lease."""
    placement: Literal["best-fit", "spread"] = "best-fit"
    """best-fit packs gangs onto the cluster left fullest; spread onto the one left emptiest."""
    preemption: PreemptionSettings = Field(default_factory=PreemptionSettings)
    """{priority: ..., reclaim: ...}; the old boolean still works: true is both, false
    neither."""
    fair_sharing: bool = True
    """True: AppWrappers within their quota go first, then borrowers by their node's
    share (DRF); false: one queue by priority and age."""
    starvation_seconds: float = Field(300.0, ge=0)
    """Seconds a pending AppWrapper may be overtaken by smaller ones before it blocks them."""
    backfill: Literal["mcad", "reservation"] = "mcad"
    """mcad: smaller AppWrappers overtake the head of the line until it has waited
    starvationSeconds, then it holds their room (MCAD's rule). reservation: the head
    gets a reservation at its expected start, and one behind it starts now only if it
    leaves the reserved room whole or, on the promise to end by then, is expected to
    (EASY backfill; run times as for estimates); one still running when its promise
    comes due, while the head waits, is evicted for it (Preempted)."""
    default_requeuing: RequeuingDefaults = Field(default_factory=RequeuingDefaults)
    """Requeuing for AppWrappers whose schedulingSpec has none."""
    allowed_kinds: list[str] = Field(default_factory=lambda: ["*"])
    """Kinds AppWrappers may wrap: "*", "group/*", "group/Kind", or "Kind" (core group).
    Roles and RoleBindings only when named ("rbac.authorization.k8s.io/RoleBinding")."""
    allow_service_account_token_secrets: bool = False
    """True: AppWrappers may wrap Secrets of type kubernetes.io/service-account-token (a
    token for any ServiceAccount of the namespace)."""
    deletion_retry_seconds: float = Field(5.0, gt=0)
    """Seconds between attempts to delete wrapped objects that are still there."""
    allow_exec_credentials: bool = False
    """True: a spoke's kubeconfig may run an exec credential plugin (clouds that need
    one); otherwise such a SpokeCluster is Ready=False and the plugin never runs."""
    spoke_namespace_pod_security: Literal["privileged", "baseline", "restricted"] = "baseline"
    """The Pod Security level enforced in the namespaces mcad creates on spokes, so a
    spoke's own admission refuses, say, a privileged pod in an AppWrapper."""
    spoke_namespaces: Literal["same", "managed"] = "same"
    """same: a namespace is the same team's on every cluster (SIG Multicluster's namespace
    sameness, which MultiKueue follows): mcad writes into a spoke namespace of the
    AppWrapper's namespace's name when it exists (made by the platform, with its
    ResourceQuota and policies) and creates it, labelled as mcad's, when it is missing.
    managed: only into namespaces mcad created or that carry the label
    workload.codeflare.dev/managed=true, for spokes shared with strangers. Either way
    refusedNamespaces, mcad's own namespace, its identity's on each spoke and the
    namespaces a spoke's admin labels cluster.codeflare.dev/closed=true are refused."""
    refused_namespaces: list[str] = Field(default_factory=lambda: list(DEFAULT_PATTERNS))
    """Patterns (* any characters, ? one) of namespaces where mcad creates no
    AppWrapper's objects on any cluster; an AppWrapper in one is refused at admission
    and fails before it is dispatched. mcad's own namespace and, on each spoke, the
    namespace of the identity mcad uses there are refused whatever the list says."""
    quota_namespaces: list[str] = Field(default_factory=lambda: ["kube-system"])
    """Namespaces QuotaSubtrees are read from (the controller's own namespace too); a
    QuotaSubtree anywhere else is ignored, so creating one grants nobody quota."""
    workers: int = Field(32, ge=1, le=512)
    """The most AppWrappers reconciled at once (each waits on API writes, so this is how
    many dispatches can be in flight together); one AppWrapper is never reconciled twice
    at once. Fewer are while the hub's writes queue in its API server: the limit
    follows the hub's write latency between 8 (or this, if lower) and this
    (``mcad_reconcile_limit``, ``controller/inflight.py``). Why (docs/benchmarks.md,
    "Scale", eleventh stop): once the API servers' CPU is full, each write waits behind
    the others in flight, so fewer dispatch as fast and a priority job's writes go
    sooner (10,000 queued: 8 at once, its Job 0.36-0.44 s after its creation; 32 at
    once, 1.26-1.32 s); while the servers have CPU to spare, the rate is at most the
    limit over a dispatch's write time, so the limit rises to this."""
    topology_levels: list[str] = Field(default_factory=list, max_length=8)
    """Node label keys, broadest first, that are the topology levels of every spoke whose
    SpokeCluster names none (spec.topology.levels), e.g. [example.com/block,
    example.com/rack, kubernetes.io/hostname]. Empty: on such a spoke any node label an
    AppWrapper names in schedulingSpec.topology is a level as it stands."""
    estimates: EstimateSettings = Field(default_factory=EstimateSettings)
    """Estimated starts: run times, and the plan's period and budget."""
    spoke_lost_seconds: float = Field(300.0, gt=0)
    """Seconds a cluster may not answer before the AppWrappers on it are requeued
    elsewhere (reason SpokeLost) and deletions there stop waiting for it."""
    fault_tolerance: FaultToleranceSettings = Field(default_factory=FaultToleranceSettings)
    """When a running gang is reset or failed, and when a completed one is deleted: the
    defaults of AppWrapper v1beta2's annotations."""
    node_health: NodeHealthSettings = Field(default_factory=NodeHealthSettings)
    """The node label that says how healthy a node's GPUs are, and what it means."""
    queue_names: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Kueue queue names (the label kueue.x-k8s.io/queue-name, which AppWrapper v1beta2
    users set) mapped to quota nodes, a node per tree: {default-queue: {gpus: team-a}}.
    An AppWrapper with the label is charged to those nodes, unless it names a node of
    that tree itself. With a mapping, a queue name not in it waits (QueueNotFound);
    empty: the label is ignored."""

    @model_validator(mode="before")
    @classmethod
    def _old_unmanaged_namespaces_setting(cls, data: Any) -> Any:
        """``allowUnmanagedNamespaces`` (before ``spokeNamespaces``) keeps its meaning:
        true is ``same``, false is ``managed``."""
        if isinstance(data, dict):
            for old in ("allowUnmanagedNamespaces", "allow_unmanaged_namespaces"):
                if old in data:
                    data = dict(data)
                    value = data.pop(old)
                    if not isinstance(value, bool):
                        raise ValueError(f"{old} is {value!r}; use true or false (or "
                                         "spokeNamespaces: same|managed, which replaces it)")
                    if "spokeNamespaces" in data or "spoke_namespaces" in data:
                        raise ValueError(f"{old} and spokeNamespaces are both set; keep "
                                         "spokeNamespaces, which replaces it")
                    data["spokeNamespaces"] = "same" if value else "managed"
        return data

    @field_validator("namespace")
    @classmethod
    def _namespace_is_a_dns_label(cls, value: str) -> str:
        if len(value) > 63 or not DNS_LABEL.match(value):
            raise ValueError(f"is {value!r}; a namespace name has lower-case letters, "
                             "digits and '-', at most 63 characters")
        return value

    @field_validator("preemption", mode="before")
    @classmethod
    def _a_boolean_means_both(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return {"priority": value, "reclaim": value}
        if not isinstance(value, dict | PreemptionSettings):
            raise ValueError(f"is {value!r}; use true, false, or "
                             "{priority: true|false, reclaim: true|false}")
        return value

    @field_validator("quota_namespaces")
    @classmethod
    def _quota_namespaces_are_dns_labels(cls, value: list[str]) -> list[str]:
        return _each(value, lambda _, entry: None if len(entry) <= 63 and DNS_LABEL.match(entry)
                     else f" is {entry!r}; a namespace name has lower-case letters, digits "
                          "and '-', at most 63 characters")

    @field_validator("queue_names")
    @classmethod
    def _queues_map_to_nodes(cls, value: dict[str, dict[str, str]]
                             ) -> dict[str, dict[str, str]]:
        for queue, nodes in value.items():
            if not queue or len(queue) > 63:
                raise ValueError(f"[{queue!r}] is not a queue name (a label value of 1 to "
                                 "63 characters)")
            if not nodes:
                raise ValueError(f"[{queue!r}] maps to no quota node; give {{tree: node}}")
            for tree, node in nodes.items():
                problem = label_key_problem(tree)
                if problem is not None or not node:
                    raise ValueError(f"[{queue!r}][{tree!r}]: "
                                     f"{problem or 'the node name is empty'}")
        return value

    @field_validator("topology_levels")
    @classmethod
    def _levels_are_label_keys(cls, value: list[str]) -> list[str]:
        def problem(index: int, key: str) -> str | None:
            found = label_key_problem(key)
            if found is not None:
                return f": {found}"
            return f" names {key} twice; each level once" if key in value[:index] else None

        return _each(value, problem)

    @field_validator("refused_namespaces")
    @classmethod
    def _patterns_are_namespace_globs(cls, value: list[str]) -> list[str]:
        _each(value, lambda _, pattern: None if (found := pattern_problem(pattern)) is None
              else f" {found}")
        if matching_pattern("kube-system", value) is None:
            raise ValueError(f"is {value!r}, which lets AppWrappers into kube-system; the "
                             'list replaces the default, so keep "kube-*" in it')
        return value

    def refused_namespace(self, namespace: str) -> Refusal | None:
        """Why no AppWrapper's objects are created in ``namespace`` on any cluster (a
        refusedNamespaces pattern, or mcad's own namespace), or None."""
        return refused_namespace(namespace, patterns=self.refused_namespaces,
                                 controller_namespace=self.namespace)

    def reads_quota_from(self, namespace: str) -> bool:
        """May a QuotaSubtree in ``namespace`` grant quota?"""
        return namespace == self.namespace or namespace in self.quota_namespaces

    @field_validator("allowed_kinds")
    @classmethod
    def _kinds_are_group_and_kind(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError('is empty, so no AppWrapper could run; use ["*"] to allow '
                             "every kind")
        for index, entry in enumerate(value):
            group = entry.rpartition("/")[0]
            if entry.count("/") > 1 or _VERSION.match(group):
                raise ValueError(f"[{index}] is {entry!r}; write the group without the "
                                 'version, e.g. "batch/Job", or the kind alone for the core '
                                 'group, e.g. "Pod"')
            if not ALLOWED_KIND.match(entry):
                raise ValueError(f'[{index}] is {entry!r}; use "*", "group/*", '
                                 '"group/Kind" or "Kind" (core group)')
        return value

    def kind_allowed(self, api_version: str, kind: str) -> bool:
        """May an AppWrapper wrap objects of ``kind`` in ``api_version``?

        The group is read from ``api_version`` ("batch/v1" -> "batch"; "v1" is the
        core group ""); an entry without a "/" names a kind of the core group. The
        kinds of ``SENSITIVE_KINDS`` (a Role or RoleBinding made with mcad's rights
        could grant anything) are allowed only by an entry that names them or their
        group, never by "*".
        """
        group = api_version.rpartition("/")[0]
        sensitive = (group, kind) in SENSITIVE_KINDS
        for entry in self.allowed_kinds:
            if entry == "*":
                if sensitive:
                    continue
                return True
            entry_group, _, entry_kind = entry.rpartition("/")
            if entry_group == group and entry_kind in ("*", kind):
                return True
        return False

    def cycle_policy(self) -> CyclePolicy:
        """The settings the dispatch cycle decides with."""
        return CyclePolicy(placement=PlacementPolicy(self.placement),
                           preemption=self.preemption.policy(),
                           starvation_seconds=self.starvation_seconds,
                           fair_sharing=self.fair_sharing,
                           backfill=BackfillRule(self.backfill))


def _each(value: list[str], problem: Callable[[int, str], str | None]) -> list[str]:
    """``value``, or a ``ValueError`` for its first entry that has a ``problem`` (said
    after the entry's index, as pydantic's sentences name a field): the one loop of the
    validators of lists."""
    for index, entry in enumerate(value):
        found = problem(index, entry)
        if found is not None:
            raise ValueError(f"[{index}]{found}")
    return value


def load_run_config(path: Path | None) -> RunConfig:
    """The configuration in ``path``; the defaults when ``path`` is None.

    Raises ``ConfigError`` with a sentence naming the file and the field.
    """
    if path is None:
        return RunConfig()
    try:
        _, data = read_yaml(path, what="the configuration file")
    except UnreadableFile as err:
        raise ConfigError(f"{err}.") from err
    if data is None:
        return RunConfig()
    if not isinstance(data, dict):
        raise ConfigError(f"the configuration file {path} should hold a mapping of settings "
                          f"(namespace: ..., placement: ...), not a {type(data).__name__}.")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        problems = [_sentence(e) for e in err.errors()]
        raise ConfigError(f"the configuration file {path} is not valid: "
                          f"{'; '.join(problems)}.") from None


def _sentence(error: Any) -> str:
    """One pydantic error as "field should be ..., not X"."""
    path = ""
    for part in error["loc"]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    if error["type"] == "extra_forbidden":
        known = ", ".join(_wire_names(error["loc"][:-1]))
        return f"{path} is not a setting mcad knows (the settings here are {known})"
    if error["type"] in ("model_type", "dict_type"):
        return f"{path} should be a mapping of settings, not {error['input']!r}"
    message = str(error["msg"])
    if message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
        return f"{path}{'' if message.startswith('[') else ' '}{message}"
    message = message.replace("Input should", "should", 1)
    return f"{path} {message}, not {error['input']!r}"


def _wire_names(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = RunConfig
    for part in loc:
        if not isinstance(part, str):
            continue
        for name, info in model.model_fields.items():
            annotation = info.annotation
            if part in (name, info.alias) and isinstance(annotation, type) and \
                    issubclass(annotation, BaseModel):
                model = annotation
    return [info.alias or name for name, info in model.model_fields.items()]
