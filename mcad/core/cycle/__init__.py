"""The dispatch cycle, snapshot in, decisions out, and its parts.

In the order a cycle uses them: the ``snapshot`` it reads (and the ``CycleResult`` it
returns), the ``books`` it keeps for one pass (quota charged, room on the board,
misfits known), the ``quotagate``, the head of the line and its ``promises``
(``headofline``, ``backfill``), ``preemptor`` and ``elastic`` (which return ``plans``),
the decision loop itself (``decide``) and the ``carried`` cycle that resumes the last
one's books when little changed.

Owns: every dispatch, eviction and resize decision; only the cycle writes its books.
May not touch: I/O or the clock (``now`` comes in); it asks ``quota`` and ``placement``
and never the other way round.
"""
