"""Where a gang fits: each cluster's nodes and free room (``capacity``), a node for every
pod (``nodefit``), inside topology domains (``domains``, ``domainfit``), the one entry
point that chooses between them (``gangfit``), whom to evict to make room (``victims``),
which namespaces a cluster refuses (``namespaces``), what can never fit (``lasting``)
and which cluster a gang goes to (``clusters``, with the per-cycle ``ClusterBoard``).

Its modules are layers in that order: ``nodefit`` knows nothing of topology, and
``domainfit`` builds on it and on ``victims``, so nothing runs back up.
Owns: node-level fit and the sentences that say why not. May not touch: quota, the
queue's order or any AppWrapper's state (the cycle decides; this answers).
"""
