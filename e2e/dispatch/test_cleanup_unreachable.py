"""Deleting an AppWrapper whose spoke is unreachable: mcad keeps the finalizer, says
so in the status (CleanupPending), retries, and finishes once the spoke answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e.clusters import Cluster
from e2e.dispatch.conftest import (
    AW,
    ControllerProcess,
    condition,
    create_aw,
    get_aw,
    job_appwrapper,
    mcad_cli,
    wait_state,
)
from e2e.waiting import wait_until


async def test_deletion_waits_for_an_unreachable_spoke_and_then_cleans_it(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
    tmp_path: Path, testbed: Any
) -> None:
    hub, spoke = clusters["hub"], clusters["spoke-2"]
    paths = {c.name: c.kubeconfig for c in testbed.clusters}
    good = Path(paths["spoke-2"])
    port = next(c.port for c in testbed.clusters if c.name == "spoke-2")
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(good.read_text().replace(f"127.0.0.1:{port}", "127.0.0.1:1"))  # noqa: ASYNC240
    register = ["cluster", "register", "alias", "--hub-kubeconfig", paths["hub"],
                "--kubeconfig"]
    assert await mcad_cli(*register, str(good)) == 0
    try:
        await create_aw(hub, aw_namespace, job_appwrapper("far", pods=1, gpus=1, runtime=None,
                        scheduling={"clusterScheduling": {"clusters": [{"name": "alias"}]}}))
        await wait_state(hub, aw_namespace, "far", "Running")

        async def job_there() -> bool:
            return bool((await spoke.batch.list_namespaced_job(aw_namespace)).items)

        await wait_until(job_there, within=30, what="the Job on spoke-2")
        assert await mcad_cli(*register, str(dead)) == 0  # the spoke stops answering
        await hub.custom.delete_namespaced_custom_object(*AW[:2], aw_namespace, AW[2], "far")

        async def cleanup_pending() -> dict[str, Any] | None:
            obj = await get_aw(hub, aw_namespace, "far")
            return obj if condition(obj, "CleanupPending").get("status") == "True" else None

        pending = await wait_until(cleanup_pending, within=60, what="CleanupPending")
        assert "alias" in pending["status"]["message"]
        assert (await spoke.batch.list_namespaced_job(aw_namespace)).items  # still there
        assert await mcad_cli(*register, str(good)) == 0  # it answers again

        async def cleaned() -> bool:
            listed = await hub.custom.list_namespaced_custom_object(*AW[:2], aw_namespace, AW[2])
            return not listed["items"] and not \
                (await spoke.batch.list_namespaced_job(aw_namespace)).items

        await wait_until(cleaned, within=60, what="the AppWrapper and its Job to be gone")
    finally:
        await mcad_cli("cluster", "unregister", "alias", "--hub-kubeconfig", paths["hub"])
