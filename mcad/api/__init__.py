"""The wire formats: AppWrapper, QuotaSubtree and SpokeCluster as pydantic models.

Rule of this package: data shapes and their validation only. No I/O beyond writing the
generated CRDs (``python -m mcad.api.crds``), no asyncio, no Kubernetes client, no
clock. The controller and ``mcad validate`` read objects through these models, and the
CRDs the API server enforces are generated from them, so the two cannot drift.

- ``meta``: shared shapes (object metadata, conditions, label selectors, quantities).
- ``appwrapper``, ``quotasubtree``, ``spokecluster``: one module per kind.
- ``documents``: a decoded document -> model, or sentences saying what is wrong.
- ``crds``: the CRD generator.
"""
