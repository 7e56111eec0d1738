"""The ``mcad`` command line: ``mcad run`` (the controller), ``mcad cluster`` (register,
list and remove spokes), ``mcad validate``, ``mcad queue`` and ``mcad explain``, ``mcad
wrap``; also installed as the kubectl plugin ``kubectl mcad``.

Rule of this package: parse arguments, read inputs, call into ``mcad.api`` and
``mcad.core``, print sentences. Decisions live in the core; the command only reports
them. ``main`` is the boundary where every failure becomes a sentence and an exit status.
"""
