"""The pure core of mcad: every decision, no I/O.

Rule of this package: purely computational. Nothing here imports asyncio, a
Kubernetes client, an HTTP library or the clock; time comes in as ``now``
arguments. That keeps each decision a function of a snapshot, exhaustively
testable and deterministic (same snapshot, same decisions).

Its sub-packages are layers, each importing only from those below it (the import
linter holds this, ``pyproject.toml``), read from the top:

- ``views``: read-only answers for people (``explain``, start ``estimates``), which run
  the cycle on copies and change nothing;
- ``cycle``: the dispatch cycle and its parts: the snapshot it reads, the books it keeps,
  ordering, the quota gate, head of line and backfill, preemption, elasticity, the
  carried cycle;
- ``quota`` and ``placement``, side by side: the quota forest (with fairness and its
  status), and where a gang fits (capacity, nodes, topology domains, victims, clusters);
- ``life``: one AppWrapper's life: the objects it wraps, its progress to completion,
  requeueing, gang and node health, how long its runs take;
- ``workload``: what an AppWrapper asks for: quantities, resource lists, pod sets,
  its demand and its topology request.
"""
