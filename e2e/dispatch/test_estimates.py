"""When will my job start, on the real test bed.

Three runs of one family (``est-1`` to ``est-3``, the whole of spoke-1 each, pods that
succeed 6 s after they run) teach mcad how long that family takes; the history reaches
ConfigMap ``mcad-runtimes`` on the hub and survives a restart of the controller. Then
``est-4`` runs and ``est-5`` waits for it: ``mcad queue`` shows an estimated start for
``est-5``, ``mcad explain`` says what it rests on (after ``est-4`` ends, from 3 past runs
of its family, give or take what their spread says), and ``est-5`` starts within that
stated error of the estimate (plus the plan's refresh and timestamps kept to the second).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from e2e.clusters import Cluster
from e2e.controller import controller_with, mcad_output
from e2e.dispatch.conftest import ControllerProcess, create_aw, get_aw, job_appwrapper, wait_state
from e2e.waiting import wait_until

RUNTIME = "6s"


def whole_spoke(name: str) -> dict[str, Any]:
    """4 pods x 8 GPUs on spoke-1: the whole of it, so one runs at a time."""
    return job_appwrapper(name, pods=4, gpus=8, runtime=RUNTIME, scheduling={
        "clusterScheduling": {"clusters": [{"name": "spoke-1"}]}})


def moment(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def family_runs(hub: Cluster, namespace: str) -> list[float]:
    """The stored run times of family ``est`` in ``namespace`` (none yet: [])."""
    try:
        stored = await hub.core.read_namespaced_config_map("mcad-runtimes", "mcad-system")
    except ApiException as err:
        if err.status == 404:  # not written yet
            return []
        raise
    text = (stored.data or {}).get("history.json") or "{}"
    runs = json.loads(text).get("runs", {}).get(namespace, {}).get("est", [])
    return [float(seconds) for seconds, _ in runs]


async def test_a_queued_appwrapper_starts_when_its_estimate_said(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        tmp_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    with controller_with(mcad, tmp_path, estimates={"everySeconds": 1}) as own:
        for name in ("est-1", "est-2", "est-3"):
            await create_aw(hub, ns, whole_spoke(name))
        for name in ("est-1", "est-2", "est-3"):
            await wait_state(hub, ns, name, "Completed", within=120)

        async def stored() -> list[float] | None:
            runs = await family_runs(hub, ns)
            return runs if len(runs) == 3 else None

        runs = await wait_until(stored, within=30, what="3 runs in ConfigMap mcad-runtimes")
        own.stop()
        own.start()  # the history is read back from the hub

        await create_aw(hub, ns, whole_spoke("est-4"))
        await wait_state(hub, ns, "est-4", "Running", within=60)
        await create_aw(hub, ns, whole_spoke("est-5"))
        as_admin = ("--kubeconfig", str(own.hub_kubeconfig))

        async def estimated() -> str | None:
            code, out, err = await mcad_output("queue", "-n", ns, "-o", "json", *as_admin)
            assert code == 0, err
            items = {i["metadata"]["name"]: i for i in json.loads(out)["items"]}
            return (items.get("est-5") or {}).get("estimatedStart")

        start = moment(await wait_until(estimated, within=30,
                                        what="an estimated start for est-5"))
        code, text, err = await mcad_output("explain", "est-5", "-n", ns, *as_admin)
        assert code == 0, err
        assert f"after {ns}/est-4 ends" in text, text
        assert "from 3 past runs of its family" in text, text
        stated = re.search(r"give or take (\d+)s", text)
        assert stated is not None, text
        code, table, _ = await mcad_output("queue", "-n", ns, *as_admin)
        assert "ESTIMATED START" in table.splitlines()[0]
        manifest = tmp_path / "est-6.yaml"
        manifest.write_text(json.dumps(whole_spoke("est-6")))
        code, text, err = await mcad_output("explain", "-f", str(manifest), "-n", ns,
                                            *as_admin)
        assert code == 0, err
        assert f"after {ns}/est-5 ends" in text, text  # not submitted: behind est-5

        await wait_state(hub, ns, "est-5", "Running", within=90)
        started = moment((await get_aw(hub, ns, "est-5"))["status"]["dispatchTimestamp"])
        error = abs((started - start).total_seconds())
        # The stated error, plus the plan's refresh (1 s) and timestamps kept to the second.
        allowed = float(stated.group(1)) + 3.0
        assert error <= allowed, (f"est-5 started at {started}, {error:.1f}s from its "
                                  f"estimate {start}, stated give or take "
                                  f"{stated.group(1)}s; past runs {runs}")
