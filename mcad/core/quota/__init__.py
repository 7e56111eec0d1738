"""Quota: the forest of QuotaSubtrees with its hard limits and borrowing (``forest``),
fair sharing among the queues it feeds (``fairness``), what a QuotaSubtree's status says
(``status``), and the Kueue labels that map an AppWrapper to quota nodes and a priority
(``queues``).

Owns: what is charged where and whether a charge fits. May not touch: placement or
clusters (quota and placement are side by side; the cycle asks both).
"""
