"""``python -m mcad.cli``: the same as the ``mcad`` console script."""

from __future__ import annotations

import sys

from mcad.cli.main import main

sys.exit(main())
