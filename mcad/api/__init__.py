"""The wire formats: AppWrapper, QuotaSubtree and SpokeCluster as pydantic models.

Rule of this package: data shapes and their validation only. No I/O beyond writing the
generated CRDs (``python -m mcad.api.crds``), no asyncio, no Kubernetes client, no
clock. ``mcad validate`` and the admission webhook check objects against these models
(``mcad.validation``), and the CRDs the API server enforces are generated from them, so
what the desk says and what the API server enforces cannot drift. The controller itself
reads objects as plain JSON (a model per AppWrapper would cost more than the rest of a
cycle at 10,000 AppWrappers); what it writes is checked against these models by
``tests/api``.

- ``meta``: shared shapes (object metadata, conditions, label selectors, quantities).
- ``appwrapper``, ``quotasubtree``, ``spokecluster``: one module per kind.
- ``documents``: a decoded document -> model, or sentences saying what is wrong.
- ``crds``: the CRD generator.
"""
