"""A short chaos soak (the long one is ``benchmarks/soak.py``): AppWrappers arrive while a
seeded schedule freezes spokes, kills the controller and restarts the hub; afterwards
every AppWrapper completed, no gang ever ran twice at once, nothing is orphaned or left
behind, and quota used matched what ran."""

from __future__ import annotations

from pathlib import Path

import yaml

from e2e.clusters import Cluster
from e2e.controller import ControllerProcess
from e2e.soak import Soak, SoakPlan
from mcad.gateway.connection import connect


async def test_a_short_chaos_soak_breaks_no_invariant(
        mcad: ControllerProcess, clusters: dict[str, Cluster], testbed_dir: Path,
        tmp_path: Path) -> None:
    plan = SoakPlan(appwrappers=30, seed=7, arrival_s=1.5, fault_every_s=(6.0, 9.0),
                    pause_s=(12.0, 18.0), spoke_lost_seconds=10.0, settle_timeout_s=300,
                    kinds=("pause-spoke", "kill-controller", "restart-hub", "pause-spoke"))
    config = tmp_path / "mcad-config.yaml"
    config.write_text(yaml.safe_dump({"spokeLostSeconds": plan.spoke_lost_seconds}))
    controller = ControllerProcess(mcad.hub_kubeconfig, tmp_path, name="mcad-soak",
                                   extra_args=("--config", str(config)))
    mcad.stop()
    hub = await connect(Path(clusters["hub"].kubeconfig), name="hub")
    spokes = {n: await connect(Path(clusters[n].kubeconfig), name=n)
              for n in ("spoke-1", "spoke-2")}
    try:
        controller.start()
        report = await Soak(plan=plan, testbed_dir=testbed_dir, hub=hub, spokes=spokes,
                            controller=controller).run()
    finally:
        controller.stop()
        mcad.start()
        await hub.close()
        for conn in spokes.values():
            await conn.close()
    print(f"short soak: {report}")
    assert report.faults["pause-spoke"] >= 1 and report.faults["kill-controller"] >= 1
    assert report.completed == plan.appwrappers, report.not_completed
    assert report.double_runs == []
    assert report.orphans == [] and report.left_after_delete == []
    assert report.quota_mismatches == []
    assert report.violations == 0
