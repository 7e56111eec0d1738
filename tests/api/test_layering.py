"""mcad.api is data shapes only: importing it pulls in no asyncio, Kubernetes client or HTTP
(checked in a fresh interpreter, so transitive imports count too)."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("asyncio", "kubernetes_asyncio", "aiohttp")


def test_importing_the_api_loads_no_io_stack() -> None:
    code = (
        "import sys\n"
        "import mcad.api.appwrapper, mcad.api.quotasubtree, mcad.api.spokecluster\n"
        "import mcad.api.documents, mcad.api.crds\n"
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == ""
