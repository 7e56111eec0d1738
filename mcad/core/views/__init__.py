"""Read-only answers for people: why an AppWrapper waits and what would change it
(``explain``), and when each waiting one is expected to start (``estimates``, by running
the cycle forward on a copy of the snapshot).

Owns: the sentences and figures of ``mcad explain``, ``mcad queue`` and the web view.
May not touch: anything the cycle decides; a view runs the cycle on copies and
returns its answer, nothing else.
"""
