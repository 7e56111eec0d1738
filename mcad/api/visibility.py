"""The visibility API's names: ``visibility.codeflare.dev/v1alpha1`` and its resources.

Shared by the server (``mcad.visibility``), its registration with the aggregation layer
(``mcad.webhook.apiservice``), the client side (``mcad.visibility.client``) and the RBAC
the manifests ship, so that all of them spell the resources one way. The answers' shapes
are documented in docs/user-guide.md ("Who sees what").
"""

from __future__ import annotations

from datetime import UTC, datetime

GROUP = "visibility.codeflare.dev"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
API_SERVICE = f"{VERSION}.{GROUP}"
"""The APIService's name."""
PENDING = "pendingappwrappers"
"""Namespaced, ``get`` and ``list``: the queue's rows."""
EXPLANATIONS = "explanations"
"""Namespaced, ``get`` (``mcad explain``) and ``create`` (a dry run)."""
VIEWS = "views"
"""Cluster-scoped, ``get``: the web view (``page``, ``script``, ``style``, ``state``)."""


def parse_moment(value: str | None) -> datetime | None:
    """A moment of an answer (``estimatedStart``, ``waitingSince``: RFC 3339), as an aware
    datetime; None when absent or unreadable (a view shows "-", never a traceback)."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
