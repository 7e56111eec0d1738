"""No empty panels on a fresh install: every metric the shipped Grafana dashboard and
alert rules query has a sample on ``/metrics`` of a freshly started mcad on an idle hub
(a new process, ``tests.metrics.fresh_start``), and every labelled counter starts at 0
for each of its known label values, so ``rate()`` and ``increase()`` see the first
event."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mcad import metrics
from mcad.core.cycle.snapshot import PREEMPTED, PendingReason
from mcad.core.life.completion import ItemState, PodCounts, progress
from mcad.core.life.requeue import UNCOUNTED_REASONS, Requeue, RequeuePolicy, readiness_decision

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "manifests" / "overlays" / "prometheus"
METRIC_NAME = re.compile(r"\bmcad_[a-z_]+\b")


@cache
def fresh_samples() -> dict[str, list[dict[str, str]]]:
    """Sample name -> the label sets served right after start (one process per test run)."""
    done = subprocess.run([sys.executable, "-m", "tests.metrics.fresh_start"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    samples: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(done.stdout):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(dict(sample.labels))
    return samples


def dashboard_metrics() -> set[str]:
    names: set[str] = set()
    for path in sorted((OVERLAY / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board.get("panels", []):
            for target in panel.get("targets", []):
                names.update(METRIC_NAME.findall(target.get("expr", "")))
    return names


def alert_metrics() -> set[str]:
    rule = yaml.safe_load((OVERLAY / "prometheusrule.yaml").read_text())
    return {name for group in rule["spec"]["groups"] for r in group["rules"]
            for name in METRIC_NAME.findall(str(r["expr"]))}


def test_the_dashboard_and_the_rules_are_read() -> None:
    # Guards the two readers below: an empty set would make every check pass.
    assert {"mcad_requeues_total", "mcad_task_restarts_total"} <= dashboard_metrics()
    assert {"mcad_requeues_total", "mcad_leader"} <= alert_metrics()


@pytest.mark.parametrize("name", sorted(dashboard_metrics() | alert_metrics()))
def test_each_queried_metric_has_a_sample_right_after_start(name: str) -> None:
    assert fresh_samples().get(name), f"{name} has no sample on a fresh /metrics"


@pytest.mark.parametrize(("name", "label", "values"), [
    ("mcad_requeues_total", "reason", metrics.REQUEUE_REASONS),
    ("mcad_evictions_total", "reason", metrics.EVICTION_REASONS),
    ("mcad_elastic_resizes_total", "direction", metrics.RESIZE_DIRECTIONS),
    ("mcad_pending_appwrappers", "reason", tuple(r.value for r in PendingReason)),
])
def test_counters_with_known_reasons_start_at_zero_for_each(
        name: str, label: str, values: tuple[str, ...]) -> None:
    served = {labels[label] for labels in fresh_samples().get(name, [])}
    assert set(values) <= served


def test_the_hub_and_each_cluster_count_api_errors_and_dispatches_from_zero() -> None:
    errors = fresh_samples()["mcad_api_errors_total"]
    for cluster in ("hub", "local"):
        served = {labels["reason"] for labels in errors if labels["cluster"] == cluster}
        assert set(metrics.API_ERROR_REASONS) <= served, cluster
    assert {"cluster": "local"} in fresh_samples()["mcad_dispatches_total"]


def test_every_supervised_task_and_work_queue_starts_at_zero_restarts() -> None:
    tasks = {labels["task"] for labels in fresh_samples()["mcad_task_restarts_total"]}
    assert {"dispatcher", "reconcilers", "reports", "events", "spoke local"} <= tasks
    queues = {labels["queue"] for labels in fresh_samples()["mcad_reconcile_errors_total"]}
    assert queues == {"appwrappers", "spokes"}


def test_the_requeue_reasons_the_core_decides_are_all_started() -> None:
    # The reasons come from the core's constants; this checks they are the ones it uses.
    start = datetime(2025, 1, 1, tzinfo=UTC)
    late = start + timedelta(hours=1)
    unready = readiness_decision(now=late, policy=RequeuePolicy(), dispatched_at=start,
                                 requeue_count=0, ready_pods=0, min_available=1)
    failed = progress(now=start, policy=RequeuePolicy(), dispatched_at=start, requeue_count=0,
                      min_available=1, expected_pods=1, pods=PodCounts(running=1),
                      items=[ItemState(("Complete",), {"Failed": "True"})])
    assert isinstance(unready, Requeue)
    assert isinstance(failed, Requeue)
    assert {unready.reason, failed.reason, *UNCOUNTED_REASONS, PREEMPTED} \
        == set(metrics.REQUEUE_REASONS)
