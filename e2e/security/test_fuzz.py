"""Fuzzed AppWrappers through the real hub, with mcad and its webhook running: each is
admitted or refused with a sentence that says where; nothing times out or crashes; mcad
stays up without a restart of any task."""

from __future__ import annotations

from pathlib import Path

from e2e.clusters import Cluster
from e2e.controller import ControllerProcess
from e2e.fuzzing import draw, send
from e2e.security.test_security import webhook_controller
from mcad.gateway.connection import connect


async def test_fuzzed_appwrappers_are_admitted_or_refused_with_a_sentence(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path, tmp_path: Path) -> None:
    docs = draw(200, seed=9)
    hub = await connect(Path(clusters["hub"].kubeconfig), name="hub")
    try:
        with webhook_controller(mcad, kubectl_path, clusters["hub"], tmp_path) as own:
            report = await send(hub, aw_namespace, docs)
            assert own.healthz() == "ok"
            metrics = own.metrics()
    finally:
        await hub.close()
    print(f"hub fuzz: {report}")
    assert report.sent == 200
    assert report.failures == []
    assert report.unexplained == []
    assert report.outcomes["refused by mcad's webhook"] > 0
    assert report.outcomes["admitted"] > 0
    # Every task's restart counter is served from its start, at 0: none may have moved.
    restarted = [line for line in metrics.splitlines()
                 if line.startswith("mcad_task_restarts_total{") and float(line.split()[-1])]
    assert "mcad_task_restarts_total{" in metrics
    assert restarted == []
