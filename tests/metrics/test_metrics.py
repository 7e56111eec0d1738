"""The reporting functions of ``mcad.metrics``: each writes the series it promises, in
natural units, replaces what it should replace, and forgetting removes exactly the
series of what was forgotten. Values are read back from ``REGISTRY``; every test uses
names of its own, since the registry lives for the whole test run."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from mcad import metrics
from mcad.core.workload.resources import ResourceList
from mcad.metrics import REGISTRY


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- AppWrapper states and pending reasons -------------------------------------------------

def test_states_not_given_are_reported_as_zero() -> None:
    metrics.report_appwrapper_states({"Running": 3, "Pending": 7})
    assert value("mcad_appwrappers", state="Running") == 3
    assert value("mcad_appwrappers", state="Pending") == 7
    for state in ("RunningHoldCompletion", "Completed", "Failed"):
        assert value("mcad_appwrappers", state=state) == 0, state


def test_a_state_report_replaces_the_previous_one() -> None:
    metrics.report_appwrapper_states({"Failed": 2, "Deleted": 1})
    metrics.report_appwrapper_states({"Running": 1})
    assert value("mcad_appwrappers", state="Failed") == 0
    assert value("mcad_appwrappers", state="Running") == 1
    assert value("mcad_appwrappers", state="Deleted") is None


def test_pending_reasons_replace_all_previous_reasons() -> None:
    metrics.report_pending_reasons({"InsufficientQuota": 4, "NoClusterFits": 2})
    assert value("mcad_pending_appwrappers", reason="InsufficientQuota") == 4
    metrics.report_pending_reasons({"NoClusterFits": 5})
    assert value("mcad_pending_appwrappers", reason="NoClusterFits") == 5
    assert value("mcad_pending_appwrappers", reason="InsufficientQuota") is None


# -- durations -----------------------------------------------------------------------------

def test_dispatch_cycle_is_observed_in_buckets_from_half_a_millisecond() -> None:
    before_count = value("mcad_dispatch_cycle_duration_seconds_count") or 0
    before_fast = value("mcad_dispatch_cycle_duration_seconds_bucket", le="0.0005") or 0
    before_slow = value("mcad_dispatch_cycle_duration_seconds_bucket", le="5.0") or 0
    metrics.observe_dispatch_cycle(0.0004, appwrappers=120)
    metrics.observe_dispatch_cycle(4.0, appwrappers=80)
    assert value("mcad_dispatch_cycle_duration_seconds_count") == before_count + 2
    assert value("mcad_dispatch_cycle_duration_seconds_bucket", le="0.0005") == before_fast + 1
    assert value("mcad_dispatch_cycle_duration_seconds_bucket", le="5.0") == before_slow + 2
    assert value("mcad_dispatch_cycle_appwrappers") == 80  # the last cycle, not a sum


def test_queue_wait_buckets_span_fifty_milliseconds_to_an_hour() -> None:
    before_short = value("mcad_queue_wait_seconds_bucket", le="0.05") or 0
    before_hour = value("mcad_queue_wait_seconds_bucket", le="3600.0") or 0
    before_inf = value("mcad_queue_wait_seconds_bucket", le="+Inf") or 0
    before_sum = value("mcad_queue_wait_seconds_sum") or 0
    metrics.observe_queue_wait(0.01)
    metrics.observe_queue_wait(3000)
    metrics.observe_queue_wait(7200)
    assert value("mcad_queue_wait_seconds_bucket", le="0.05") == before_short + 1
    assert value("mcad_queue_wait_seconds_bucket", le="3600.0") == before_hour + 2
    assert value("mcad_queue_wait_seconds_bucket", le="+Inf") == before_inf + 3
    assert value("mcad_queue_wait_seconds_sum") == pytest.approx(before_sum + 10200.01)


# -- counters ------------------------------------------------------------------------------

@pytest.mark.parametrize(("count", "name", "label"), [
    (metrics.count_dispatch, "mcad_dispatches_total", "cluster"),
    (metrics.count_requeue, "mcad_requeues_total", "reason"),
    (metrics.count_eviction, "mcad_evictions_total", "reason"),
])
def test_counters_count_per_label(count: Callable[[str], None], name: str, label: str) -> None:
    first, second = unique("a"), unique("b")
    count(first)
    count(first)
    count(second)
    assert value(name, **{label: first}) == 2
    assert value(name, **{label: second}) == 1


def test_api_errors_are_counted_per_cluster_and_reason() -> None:
    cluster = unique("spoke")
    metrics.count_api_error(cluster, "Unreachable")
    metrics.count_api_error(cluster, "Unreachable")
    metrics.count_api_error(cluster, "Forbidden")
    assert value("mcad_api_errors_total", cluster=cluster, reason="Unreachable") == 2
    assert value("mcad_api_errors_total", cluster=cluster, reason="Forbidden") == 1


# -- clusters ------------------------------------------------------------------------------

def report(cluster: str, *, ready: bool = True, capacity: ResourceList | None = None,
           allocatable: ResourceList | None = None, free: ResourceList | None = None) -> None:
    capacity = capacity if capacity is not None else ResourceList.of(
        cpu=128, memory="1Ti", nvidia_com_gpu=32)
    metrics.report_cluster(cluster, ready=ready, capacity=capacity,
                           allocatable=allocatable if allocatable is not None else capacity,
                           free=free if free is not None else capacity)


def test_cluster_resources_are_in_natural_units() -> None:
    cluster = unique("spoke")
    report(cluster, allocatable=ResourceList.of(cpu="127500m", memory="1Ti", nvidia_com_gpu=32),
           free=ResourceList.of(cpu="0.25", memory="512Mi", nvidia_com_gpu=8))
    assert value("mcad_cluster_ready", cluster=cluster) == 1
    assert value("mcad_cluster_capacity", cluster=cluster, resource="cpu") == 128
    assert value("mcad_cluster_capacity", cluster=cluster, resource="memory") == 2**40
    assert value("mcad_cluster_allocatable", cluster=cluster, resource="cpu") == 127.5
    assert value("mcad_cluster_free", cluster=cluster, resource="cpu") == 0.25
    assert value("mcad_cluster_free", cluster=cluster, resource="memory") == 512 * 2**20
    assert value("mcad_cluster_free", cluster=cluster, resource="nvidia.com/gpu") == 8


def test_no_gpus_free_is_reported_as_zero_not_as_a_missing_series() -> None:
    cluster = unique("spoke")
    report(cluster, free=ResourceList.of(cpu=4))  # the ResourceList has no GPU entry at all
    assert value("mcad_cluster_free", cluster=cluster, resource="nvidia.com/gpu") == 0


def test_an_unready_cluster_reports_zero() -> None:
    cluster = unique("spoke")
    report(cluster)
    report(cluster, ready=False)
    assert value("mcad_cluster_ready", cluster=cluster) == 0


def test_a_resource_the_cluster_no_longer_has_loses_its_series() -> None:
    cluster = unique("spoke")
    report(cluster)
    report(cluster, capacity=ResourceList.of(cpu=128, memory="1Ti"))
    for gauge in ("mcad_cluster_capacity", "mcad_cluster_allocatable", "mcad_cluster_free"):
        assert value(gauge, cluster=cluster, resource="nvidia.com/gpu") is None, gauge
        assert value(gauge, cluster=cluster, resource="cpu") == 128, gauge


def test_forgetting_a_cluster_removes_its_gauges_only() -> None:
    gone, kept = unique("gone"), unique("kept")
    report(gone)
    report(kept)
    metrics.count_dispatch(gone)
    metrics.forget_cluster(gone)
    assert value("mcad_cluster_ready", cluster=gone) is None
    for gauge in ("mcad_cluster_capacity", "mcad_cluster_allocatable", "mcad_cluster_free"):
        assert value(gauge, cluster=gone, resource="cpu") is None, gauge
        assert value(gauge, cluster=kept, resource="cpu") == 128, gauge
    assert value("mcad_cluster_ready", cluster=kept) == 1
    assert value("mcad_dispatches_total", cluster=gone) == 1  # totals stay


def test_forgetting_an_unknown_cluster_is_harmless() -> None:
    metrics.forget_cluster(unique("never-reported"))


# -- quota ---------------------------------------------------------------------------------

def test_quota_limit_and_use_per_tree_node_and_resource() -> None:
    tree = unique("tree")
    metrics.report_quota(tree, "team-a", limit=ResourceList.of(cpu=10, nvidia_com_gpu=16),
                         used=ResourceList.of(cpu="2500m"))
    assert value("mcad_quota_limit", tree=tree, node="team-a", resource="cpu") == 10
    assert value("mcad_quota_limit", tree=tree, node="team-a", resource="nvidia.com/gpu") == 16
    assert value("mcad_quota_used", tree=tree, node="team-a", resource="cpu") == 2.5
    assert value("mcad_quota_used", tree=tree, node="team-a", resource="nvidia.com/gpu") == 0


def test_forgetting_a_quota_node_leaves_its_siblings() -> None:
    tree = unique("tree")
    for node in ("team-a", "team-b"):
        metrics.report_quota(tree, node, limit=ResourceList.of(cpu=10), used=ResourceList.of(cpu=1))
    metrics.forget_quota_node(tree, "team-a")
    assert value("mcad_quota_limit", tree=tree, node="team-a", resource="cpu") is None
    assert value("mcad_quota_used", tree=tree, node="team-a", resource="cpu") is None
    assert value("mcad_quota_limit", tree=tree, node="team-b", resource="cpu") == 10
    metrics.forget_quota_node(tree, "never-reported")


# -- exposition ----------------------------------------------------------------------------

def test_render_is_the_text_exposition_of_mcad_metrics_only() -> None:
    cluster = unique("spoke")
    metrics.count_dispatch(cluster)
    text = metrics.render().decode()
    assert f'mcad_dispatches_total{{cluster="{cluster}"}} 1.0' in text
    assert "# TYPE mcad_queue_wait_seconds histogram" in text
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert all(name.startswith("mcad_") for name in names), names
    assert "python_gc_objects_collected" not in text  # not the global registry


# -- topology ------------------------------------------------------------------------------

def test_free_gpus_per_domain_and_the_fragments_in_devices() -> None:
    cluster = unique("racked")
    gpu = 10**9
    metrics.report_topology(cluster, fragmented=4 * gpu, domains=[
        ("example.com/rack", "b1/r1", 12 * gpu), ("example.com/rack", "b1/r2", 16 * gpu)])
    assert value("mcad_cluster_fragmented_gpus", cluster=cluster) == 4
    assert value("mcad_topology_domain_free_gpus", cluster=cluster, level="example.com/rack",
                 domain="b1/r1") == 12
    metrics.report_topology(cluster, fragmented=0, domains=[
        ("example.com/rack", "b1/r2", 8 * gpu)])
    assert value("mcad_topology_domain_free_gpus", cluster=cluster, level="example.com/rack",
                 domain="b1/r1") is None, "a domain no longer there loses its series"
    metrics.forget_topology(cluster)
    assert value("mcad_topology_domain_free_gpus", cluster=cluster, level="example.com/rack",
                 domain="b1/r2") is None
    assert value("mcad_cluster_fragmented_gpus", cluster=cluster) is None
    metrics.forget_topology(cluster)  # twice is harmless
