"""The controller: read, decide, act.

Rule of this package: no decision logic here. Watches keep in-memory caches of the
hub (AppWrappers, quota trees, SpokeClusters and their Secrets) and of every spoke
(nodes, pods, wrapped objects); the controller turns them into a ``mcad.core``
snapshot, asks the core (``dispatch_cycle``, ``progress``, ``wrapped_objects``), and
applies the answer through ``mcad.gateway``. All API access goes through the gateway.

Who writes what: an AppWrapper's record has three parts with one writer each
(``records``: observed by the informers, ordered by the dispatcher, done by the
reconciler); the dispatcher only decides and orders; the reconciler (one at a time per
AppWrapper, from the work queue) is the only one that writes about an AppWrapper. The
concurrency is stated once in ``runner``.
"""
