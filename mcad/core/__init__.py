"""The pure core of mcad: every decision, no I/O.

Rule of this package: purely computational. Nothing here imports asyncio, a
Kubernetes client, an HTTP library or the clock; time comes in as ``now``
arguments. That keeps each decision a function of a snapshot, exhaustively
testable and deterministic (same snapshot, same decisions).
"""
