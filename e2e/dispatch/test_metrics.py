"""The metrics endpoint reports numbers that match what happened."""

from __future__ import annotations

import json
import re
from collections import Counter

import yaml

from e2e.clusters import Cluster
from e2e.controller import REPO
from e2e.dispatch.conftest import ControllerProcess, create_aw, job_appwrapper, wait_state
from e2e.waiting import wait_until


async def test_metrics_report_states_dispatches_pending_reasons_and_capacity(
    mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str
) -> None:
    hub = clusters["hub"]
    before = {c: mcad.sample("mcad_dispatches_total", cluster=c) or 0
              for c in ("spoke-1", "spoke-2")}
    waits_before = mcad.sample("mcad_queue_wait_seconds_count") or 0
    await create_aw(hub, aw_namespace, job_appwrapper("counted", pods=1, gpus=2,
                                                      runtime="1s"))
    await create_aw(hub, aw_namespace, job_appwrapper("nowhere", pods=1, gpus=1, scheduling={
        "clusterScheduling": {"clusters": [{"name": "no-such-cluster"}]}}))
    done = await wait_state(hub, aw_namespace, "counted", "Completed")
    cluster = done["status"]["clusterName"]

    async def reported() -> bool:
        """/metrics agrees with the AppWrappers on the hub, state by state and reason."""
        listed = await hub.custom.list_cluster_custom_object(
            "workload.codeflare.dev", "v1beta1", "appwrappers")
        states = Counter(i.get("status", {}).get("state") or "Pending" for i in listed["items"])
        no_cluster = sum(1 for i in listed["items"] for c in
                         i.get("status", {}).get("conditions", [])
                         if c["type"] == "Queued" and c["status"] == "True"
                         and c["reason"] == "NoMatchingCluster")
        return (all(mcad.sample("mcad_appwrappers", state=s) == states.get(s, 0)
                    for s in ("Pending", "Running", "Completed", "Failed"))
                and no_cluster >= 1
                and mcad.sample("mcad_pending_appwrappers", reason="NoMatchingCluster")
                == no_cluster)

    await wait_until(reported, within=30, what="states and pending reasons in /metrics")
    assert mcad.sample("mcad_dispatches_total", cluster=cluster) == before[cluster] + 1
    assert mcad.sample("mcad_queue_wait_seconds_count") == waits_before + 1
    for spoke in ("spoke-1", "spoke-2"):
        assert mcad.sample("mcad_cluster_ready", cluster=spoke) == 1
        assert mcad.sample("mcad_cluster_capacity", cluster=spoke,
                           resource="nvidia.com/gpu") == 32
    assert (mcad.sample("mcad_dispatch_cycle_duration_seconds_count") or 0) > 0
    # "nowhere" waits: the oldest wait is counted from its creation, so it is above 0.
    assert (mcad.sample("mcad_oldest_pending_seconds") or 0) > 0


def served_names(text: str) -> set[str]:
    """Every series name /metrics can carry, from its TYPE lines."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            if kind == "counter" and not name.endswith("_total"):
                names.add(f"{name}_total")
    return names


def test_the_dashboard_and_the_alerts_query_only_metrics_mcad_serves(
        mcad: ControllerProcess) -> None:
    served = served_names(mcad.metrics())
    overlay = REPO / "manifests" / "overlays" / "prometheus"
    dashboard = json.loads((overlay / "dashboards" / "mcad.json").read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    rule = yaml.safe_load((overlay / "prometheusrule.yaml").read_text())
    queries += [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    assert len(queries) >= 15
    used = {name for q in queries for name in re.findall(r"\bmcad_[a-z_]+", q)}
    assert used - served == set(), f"queried but not served: {sorted(used - served)}"
    # Every panel the issue asks for is there.
    titles = {panel["title"] for panel in dashboard["panels"]}
    assert {"Queue length by reason", "Queue wait (creation to dispatch)",
            "Dispatch rate per cluster", "GPUs free per cluster",
            "Quota used vs limit (GPUs)", "Requeues and evictions"} <= titles
    alerts = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert alerts == {"MCADSpokeNotReady", "MCADAppWrapperWaitingLong", "MCADRequeueStorm",
                      "MCADNoLeader"}
