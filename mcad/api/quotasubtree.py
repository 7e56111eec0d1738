"""The QuotaSubtree (``quota.codeflare.dev/v1alpha1``): quota trees as MCAD v1 declared them.

Why these models: administrators already have QuotaSubtrees written for MCAD v1, so
the shape is MCAD's, field for field: a tree is the union of the QuotaSubtrees that
carry the label ``tree: <name>``; each object lists ``children`` (nodes of the tree)
with ``quotas.requests`` and ``quotas.hardLimit`` and hangs them under ``spec.parent``
(a node declared by another QuotaSubtree of the same tree; none for the root). MCAD's
quick start uses ``quota.codeflare.dev/v1``, so the CRD serves that version too, with
the same schema.

Checks that need one object only live here (quantities, duplicate or empty child
names, a parent that is one of the object's own children, the ``tree`` label); checks
across objects (unknown parents, cycles, a node declared twice) belong to the quota
forest in ``mcad.core.quota.forest``.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field, model_validator

from mcad.api.meta import Condition, ObjectMeta, ResourceQuantities, WireModel, field_error

GROUP: Final = "quota.codeflare.dev"
VERSION: Final = "v1alpha1"
SERVED_VERSIONS = ("v1alpha1", "v1")
API_VERSION: Final = "quota.codeflare.dev/v1alpha1"
KIND: Final = "QuotaSubtree"
TREE_LABEL = "tree"
"""The metadata label naming the tree a QuotaSubtree belongs to."""


class Quota(WireModel):
    """How much a node may use."""

    requests: ResourceQuantities = Field(default_factory=dict)
    """The node's quota per resource; resources not named here are not limited by it."""
    hard_limit: bool = Field(False, alias="hardLimit")
    """True: the node never uses more than its own quota. False: it may borrow what its
    ancestors have unused (and borrowers may be preempted when owners need it back)."""
    disabled: bool | None = None
    """MCAD v1 field; accepted and ignored."""


class Child(WireModel):
    """A node of the quota tree."""

    name: str = Field(min_length=1)
    """The node's name; AppWrappers pick it with the label <tree>: <name>."""
    namespace: str = ""
    """MCAD v1 field; accepted and ignored."""
    quotas: Quota = Field(default_factory=Quota)
    """The node's quota."""
    path: str = ""
    """MCAD v1 field; accepted and ignored."""
    share: int | None = None
    """Accepted and ignored (found in some QuotaSubtrees written for MCAD, which never
    read it either)."""


class QuotaSubtreeSpec(WireModel):
    """Nodes of one tree and where they hang."""

    parent: str = ""
    """The node these children hang under; empty for the root of the tree."""
    parent_namespace: str = Field("", alias="parentNamespace")
    """MCAD v1 field; accepted and ignored (the tree label, not namespaces, joins subtrees)."""
    children: list[Child] = Field(default_factory=list)
    """The nodes this object declares."""

    @model_validator(mode="after")
    def _children_are_distinct(self) -> QuotaSubtreeSpec:
        seen: dict[str, int] = {}
        for index, child in enumerate(self.children):
            if child.name in seen:
                raise field_error(
                    f"children[{index}].name",
                    f'"{child.name}" repeats children[{seen[child.name]}].name; each node of '
                    "a tree is declared once",
                )
            seen[child.name] = index
            if child.name == self.parent:
                raise field_error(
                    f"children[{index}].name",
                    f'"{child.name}" is also spec.parent; a node cannot be its own parent',
                )
        return self


class AllocatedRequests(WireModel):
    """Usage of a node."""

    requests: dict[str, str] = Field(default_factory=dict)
    """Quantities in use per resource."""


class ResourceAllocation(WireModel):
    """Usage of one node of the tree."""

    name: str = ""
    """The node."""
    namespace: str = ""
    path: str = ""
    """The node's path from the root, e.g. /context-root/alpha."""
    allocated: AllocatedRequests = Field(default_factory=AllocatedRequests)
    """What AppWrappers charged to this node (and its descendants) use."""


class QuotaSubtreeStatus(WireModel):
    """Usage of the nodes this object declares; written only by the controller."""

    total_allocation: ResourceAllocation | None = Field(None, alias="totalAllocation")
    """Usage of spec.parent (the sum over its children)."""
    children: list[ResourceAllocation] = Field(default_factory=list)
    """Usage per node declared in spec.children."""
    summary: str = ""
    """Usage against quota per child, e.g. ``gold 16/8 gpu, silver 0/4 gpu``."""
    conditions: list[Condition] = Field(default_factory=list)
    """Valid: whether the tree this object belongs to could be built, and why not."""


class QuotaSubtree(WireModel):
    """Part of a quota tree: some nodes, their quotas and their parent."""

    api_version: Literal["quota.codeflare.dev/v1alpha1", "quota.codeflare.dev/v1"] = Field(
        API_VERSION, alias="apiVersion"
    )
    kind: Literal["QuotaSubtree"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: QuotaSubtreeSpec
    """The nodes."""
    status: QuotaSubtreeStatus = Field(default_factory=QuotaSubtreeStatus)
    """Usage per node."""

    @model_validator(mode="after")
    def _names_its_tree(self) -> QuotaSubtree:
        if not self.metadata.labels.get(TREE_LABEL):
            raise field_error(
                f"metadata.labels.{TREE_LABEL}",
                f"is missing; every QuotaSubtree names its quota tree with the label "
                f"{TREE_LABEL}: <tree name>",
            )
        return self

    @property
    def tree(self) -> str:
        """The name of the tree this object belongs to."""
        return self.metadata.labels.get(TREE_LABEL, "")
