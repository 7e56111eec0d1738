"""One AppWrapper's life, rule by rule: the objects it wraps as they will be created
(``wrapping``), whether they completed or failed (``completion``), when a gang that did
not come up goes back to the queue (``requeue``), when a running gang is unhealthy and
which nodes' GPUs to avoid (``health``), and how long its kind of run takes
(``runhistory``).

Owns: the rules; every function takes ``now`` and what was observed, and returns a
verdict. May not touch: the queue, quota or placement of other AppWrappers (that is the
cycle's, above); it reads only ``workload``.
"""
