"""Which namespaces mcad refuses to create an AppWrapper's objects in, and the sentence.

Why: under namespace sameness (``spokeNamespaces: same``) a hub namespace is taken as
the same team's on every cluster, and mcad creates the AppWrapper's objects there with
its own rights. A hub namespace named like a spoke's platform namespace
(``openshift-monitoring``, ``cert-manager``) would put a user's Jobs beside that
platform's privileged ServiceAccounts, which the webhook's SubjectAccessReview (a
question asked of the hub) cannot see. So three doors, each the admin's:

- **patterns** (``refusedNamespaces``, by default ``kube-*`` and ``openshift-*``):
  refused on every cluster, checked at admission (webhook, ``mcad validate``) and again
  before a dispatch is written;
- **always**: mcad's own namespace on the hub, and on each cluster the namespace of
  the identity mcad uses there (learned from a SelfSubjectReview), whose token a Pod
  there could mount;
- **the closing label**: a namespace its cluster's admin labels
  ``cluster.codeflare.dev/closed: "true"`` is refused on that cluster; the cycle takes
  such a cluster out of the AppWrapper's candidates (``open_candidates``) before
  anything is decided, and creation checks the label again for a label set since.

Every refusal says what refused it in one shape (``refused_sentence``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from fnmatch import fnmatchcase

from mcad.core.life.wrapping import Refusal
from mcad.core.placement.capacity import Board, ClusterCapacity

CLOSED_LABEL = "cluster.codeflare.dev/closed"
"""The label (value ``"true"``) by which a cluster's admin closes one of its namespaces
to mcad."""
DEFAULT_PATTERNS = ("kube-*", "openshift-*")
"""``refusedNamespaces`` when the configuration names none."""
REFUSED = "SystemNamespace"
"""The reason of a refusal by pattern, mcad's own namespace or its identity's."""
CLOSED = "NamespaceClosed"
"""The reason of a refusal by the closing label."""
_PATTERN = re.compile(r"^[a-z0-9*?]([-a-z0-9*?]*[a-z0-9*?])?$")
_SERVICE_ACCOUNT = "system:serviceaccount:"


def refused_sentence(namespace: str, why: str, where: str) -> str:
    """The one shape of every namespace refusal: what it is, who refused it, what to do."""
    return (f"namespace {namespace} is {why}; mcad does not create AppWrappers' objects "
            f"there{where}: submit it in the namespace of the team that runs it")


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a refused-namespace pattern, or None."""
    if len(pattern) > 63 or not _PATTERN.match(pattern):
        return (f"is {pattern!r}; a pattern is a namespace name (lower-case letters, "
                "digits and '-', at most 63 characters) with * for any characters and ? "
                "for one")
    if not pattern.strip("*"):
        return f"is {pattern!r}, which refuses every namespace, so no AppWrapper could run"
    return None


def matching_pattern(namespace: str, patterns: Iterable[str]) -> str | None:
    """The first of ``patterns`` that ``namespace`` matches, or None."""
    return next((p for p in patterns if fnmatchcase(namespace, p)), None)


def refused_namespace(namespace: str, *, patterns: Sequence[str],
                      controller_namespace: str) -> Refusal | None:
    """Why mcad refuses ``namespace`` on every cluster, or None: mcad's own namespace,
    or a namespace matching one of the admin's ``patterns``."""
    if namespace == controller_namespace:
        return Refusal(REFUSED, refused_sentence(namespace, "mcad's own namespace",
                                                 " on any cluster"))
    pattern = matching_pattern(namespace, patterns)
    if pattern is not None:
        return Refusal(REFUSED, refused_sentence(
            namespace, f"refused by the pattern {pattern} (refusedNamespaces)",
            " on any cluster"))
    return None


def identity_namespace(username: str) -> str | None:
    """The namespace of a ServiceAccount's username (``system:serviceaccount:NS:NAME``),
    None for any other identity (a user, a certificate's common name)."""
    if not username.startswith(_SERVICE_ACCOUNT):
        return None
    namespace, sep, name = username.removeprefix(_SERVICE_ACCOUNT).partition(":")
    return namespace if sep and namespace and name else None


def closed_because(cluster: ClusterCapacity, namespace: str) -> tuple[str, str] | None:
    """(reason, what) when ``namespace`` is closed on ``cluster``, or None."""
    return _closed(namespace, cluster.closed_namespaces, cluster.identity_namespace)


def _closed(namespace: str, closed: Collection[str],
            identity: str | None) -> tuple[str, str] | None:
    """(reason, what) when ``namespace`` is labelled closed (among ``closed``) or is the
    namespace of mcad's ``identity``, or None."""
    if namespace in closed:
        return CLOSED, f"labelled {CLOSED_LABEL}=true"
    if namespace == identity:
        return REFUSED, "the namespace of mcad's identity"
    return None


def closed_on(cluster: ClusterCapacity, namespace: str) -> Refusal | None:
    """The refusal of ``namespace`` on ``cluster`` alone, or None."""
    return closed_refusal(namespace, cluster=cluster.name, closed=cluster.closed_namespaces,
                          identity=cluster.identity_namespace)


def closed_refusal(namespace: str, *, cluster: str, closed: Collection[str],
                   identity: str | None) -> Refusal | None:
    """The refusal of ``namespace`` on the cluster named ``cluster``, whose ``closed``
    namespaces and mcad ``identity``'s namespace are given, or None (what creation
    checks again, for a label set after the cycle decided)."""
    found = _closed(namespace, closed, identity)
    if found is None:
        return None
    reason, what = found
    return Refusal(reason, refused_sentence(namespace, f"{what} on cluster {cluster}", ""))


def closed_anywhere(clusters: Iterable[ClusterCapacity]) -> frozenset[str]:
    """Every namespace closed on some cluster: what the cycle looks up once per
    AppWrapper before narrowing its candidates (empty: nothing to look up)."""
    out: set[str] = set()
    for cluster in clusters:
        out.update(cluster.closed_namespaces)
        if cluster.identity_namespace:
            out.add(cluster.identity_namespace)
    return frozenset(out)


def open_candidates(board: Board, candidates: tuple[int, ...],
                    namespace: str) -> tuple[int, ...] | str:
    """The candidates where ``namespace`` is open, or the sentence when none is: each
    cluster that closes it, and why."""
    closed: dict[str, list[str]] = {}
    still: list[int] = []
    for i in candidates:
        cluster = board.clusters[i]
        because = closed_because(cluster, namespace)
        if because is None:
            still.append(i)
        else:
            closed.setdefault(because[1], []).append(cluster.name)
    if not closed:
        return candidates
    if still:
        return tuple(still)
    why = " and ".join(f"{what} on cluster{'s' if len(names) > 1 else ''} "
                       f"{', '.join(names)}" for what, names in closed.items())
    return refused_sentence(namespace, why, ", and it may use no other cluster")
