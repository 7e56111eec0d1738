"""``kubectl mcad``: the same command line, installed also as the kubectl plugin
``kubectl-mcad``.

Why: kubectl users expect ``kubectl <plugin>``, and a plugin is any ``kubectl-<name>``
executable on PATH (kubectl hands it every argument after its name, flags included, as
given). So the console script ``kubectl-mcad`` runs the same ``main`` as ``mcad``, and the
commands that talk to the hub (``mcad.cli.queue``) take kubectl's own flags:
``--kubeconfig`` (another name of mcad's ``--hub-kubeconfig``), ``--context`` and
``-n``/``--namespace``. This module only names the program as it was typed.
"""

from __future__ import annotations

import os
import sys

PLUGIN = "kubectl-mcad"


def program_name(argv0: str | None = None) -> str:
    """``kubectl mcad`` when run as the plugin (so usage says what was typed), else ``mcad``."""
    invoked = os.path.basename(argv0 if argv0 is not None else sys.argv[0])
    return "kubectl mcad" if invoked.removesuffix(".exe") == PLUGIN else "mcad"
