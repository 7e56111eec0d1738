"""Print ``/metrics`` as a freshly started mcad serves it on an idle hub.

Run as its own process (``python -m tests.metrics.fresh_start``): mcad's registry lives
for a whole process, so only a new one shows what a new ``mcad run`` serves before
anything has happened. A whole ``Controller`` runs over the scripted hub of
``tests.controller.seam`` (its only spoke ``local`` with 4 nodes x 8 GPUs, one quota
tree, no AppWrapper at all); once the spoke is ready and reported, the exposition is
printed on stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

from mcad import metrics
from mcad.gateway import watch as watch_module
from tests.controller.seam import Hub, run_controller, spoke_transport
from tests.gateway.scripted import listing, reply

QUOTA_PATH = "/apis/quota.codeflare.dev/v1alpha1/quotasubtrees"
READY_WITHIN_S = 20.0

QUOTA_TREE: dict[str, Any] = {
    "apiVersion": "quota.codeflare.dev/v1alpha1", "kind": "QuotaSubtree",
    "metadata": {"name": "gpus", "namespace": "mcad-system", "uid": "qst-uid",
                 "resourceVersion": "1", "labels": {"tree": "quota_context"}},
    "spec": {"children": [{"name": "root", "quotas": {
        "hardLimit": True, "requests": {"nvidia.com/gpu": "32"}}}]},
}


def idle_hub() -> Hub:
    """The scripted hub with one quota tree and nothing queued."""
    hub = Hub()
    hub.transport.only("GET", QUOTA_PATH, listing([QUOTA_TREE]))
    hub.transport.on("PATCH", "/apis/quota.codeflare.dev/v1alpha1/namespaces/mcad-system/"
                     "quotasubtrees/gpus/status", reply(200, QUOTA_TREE))
    return hub


async def exposition() -> str:
    """Start the controller, wait until the spoke is reported ready, render /metrics."""
    watch_module.BACKOFF_MIN_S = 0.01
    async with contextlib.asynccontextmanager(run_controller)(idle_hub(), spoke_transport()):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_WITHIN_S
        while metrics.REGISTRY.get_sample_value("mcad_cluster_ready",
                                                {"cluster": "local"}) != 1:
            if loop.time() > deadline:
                raise SystemExit(f"the spoke was not reported ready within {READY_WITHIN_S}s")
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # one more round of reports and dispatch cycles
        return metrics.render().decode()


if __name__ == "__main__":
    sys.stdout.write(asyncio.run(exposition()))
