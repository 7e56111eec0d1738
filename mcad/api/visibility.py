"""The visibility API's names: ``visibility.codeflare.dev/v1alpha1`` and its resources.

Shared by the server (``mcad.visibility``), its registration with the aggregation layer
(``mcad.webhook.apiservice``), the client side (``mcad.visibility.client``) and the RBAC
the manifests ship, so that all of them spell the resources one way. The answers' shapes
are documented in docs/user-guide.md ("Who sees what").
"""

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
