"""mcad: an AppWrapper dispatcher for Kubernetes.

Layers, from the bottom up (import-linter keeps them so):

- ``mcad.core``: the pure decisions (quantities, demand, quota trees, capacity and
  placement, queue order, requeue policy, the dispatch cycle). No I/O, no clock.
- ``mcad.api``: the wire formats (pydantic models of AppWrapper, QuotaSubtree,
  SpokeCluster) and the CRDs generated from them.
- ``mcad.cli``: the ``mcad`` command.
"""
