"""The scale benchmark's other readings: the hub's mean latency per call over the drain
(where a probe's creation waits), and the probes' steps (where a probe's wait goes)."""

from __future__ import annotations

import math

import pytest

from tests.benchmarks.test_scale_conversions import load


def page(post_sum: float, post_count: float, hook_sum: float, hook_count: float) -> str:
    return "\n".join([
        "# HELP apiserver_request_duration_seconds ...",
        'apiserver_request_duration_seconds_bucket{verb="POST",resource="appwrappers",le="1"} 3',
        f'apiserver_request_duration_seconds_sum{{component="apiserver",group="workload.'
        f'codeflare.dev",resource="appwrappers",scope="resource",subresource="",verb="POST",'
        f'version="v1beta1"}} {post_sum}',
        f'apiserver_request_duration_seconds_count{{component="apiserver",group="workload.'
        f'codeflare.dev",resource="appwrappers",scope="resource",subresource="",verb="POST",'
        f'version="v1beta1"}} {post_count}',
        'apiserver_request_duration_seconds_sum{resource="pods",verb="WATCH"} 900',
        'apiserver_request_duration_seconds_count{resource="pods",verb="WATCH"} 3',
        f'apiserver_admission_webhook_admission_duration_seconds_sum{{name="aw.mcad.dev",'
        f'operation="CREATE",rejected="false",type="validating"}} {hook_sum}',
        f'apiserver_admission_webhook_admission_duration_seconds_count{{name="aw.mcad.dev",'
        f'operation="CREATE",rejected="false",type="validating"}} {hook_count}',
    ])


def test_the_hubs_latencies_are_the_means_of_the_calls_made_between_two_readings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scale = load(monkeypatch, "scale")
    before, after = page(10.0, 100, 2.0, 10), page(13.0, 104, 3.2, 13)
    assert scale.hub_latencies(before, after) == {
        "POST appwrappers": 750.0,  # 3 s over 4 creates
        "admission webhook aw.mcad.dev": 400.0,  # 1.2 s over 3 reviews
    }
    # Nothing called in between: nothing to say (and never a division by zero).
    assert scale.hub_latencies(after, after) == {}


def test_a_probes_steps_are_medians_over_the_probes_that_reached_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scale = load(monkeypatch, "scale")
    seen = scale.Seen(jobs={"p-0": 12.0, "p-1": 23.0},
                      steps={"p-0": {"returned": 10.5, "created": 10.6, "dispatched": 11.0},
                             "p-1": {"returned": 20.7, "created": 20.8},
                             "p-2": {"returned": 30.1}})
    probes = {"p-0": 10.0, "p-1": 20.0, "p-2": 30.0}
    steps = scale.probe_steps(probes, seen)
    assert steps == pytest.approx({"returned": 0.5, "created": 0.7, "dispatched": 1.0,
                                   "job": 2.5})
    assert "finalizer" not in steps  # no probe reached it: not a median of nothing


def test_cpu_between_two_moments_is_interpolated_between_the_samples_around_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The after-drain window is read from cumulative CPU samples: a moment between two
    samples takes the straight line between them, a moment on a sample takes it, and
    moments outside the series take its ends (the bisecting lookup, against the scan it
    replaced)."""
    scale = load(monkeypatch, "scale")
    series = [(0.0, 0.0), (0.1, 0.06), (0.2, 0.12), (0.3, 0.12), (1.3, 0.13)]
    assert scale.used_between(series, 0.05, 0.25) == pytest.approx(0.09)
    assert scale.used_between(series, 0.1, 0.3) == pytest.approx(0.06)
    assert scale.used_between(series, 0.3, 0.8) == pytest.approx(0.005)
    assert scale.used_between(series, -1.0, 9.0) == pytest.approx(0.13)
    assert scale.used_between([], 0.0, 1.0) == 0.0


def test_the_cpu_table_gives_the_reporting_ceiling_its_own_column_when_it_ran(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scale = load(monkeypatch, "scale")
    ceiling = {"kube-apiserver (hub)": 8.0, "etcd": 4.0}
    drain = {"kube-apiserver (hub)": 25.0, "mcad": 9.0}
    reporting = {"kube-apiserver (hub)": 14.0, "etcd": 5.0, "benchmark": 2.0}
    both = scale.cpu_table(ceiling, drain, 23.0, 40.0, reporting_cpu=reporting,
                           reporting_roof=33.0)
    assert "| process | ceiling (the burst before the drain) | reporting ceiling | " \
        "mcad's drain |" in both
    # Rows by the most any column spent; a process absent from a column counts 0 there.
    assert both.index("| kube-apiserver (hub) | 8.0 | 14.0 | 25.0 |") \
        < both.index("| mcad | 0.0 | 0.0 | 9.0 |") < both.index("| etcd | 4.0 | 5.0 | 0.0 |")
    assert "| **all** | **12.0** | **21.0** | **34.0** |" in both
    assert "| AppWrappers/s | 40 | 33 | 23 |" in both
    # Without it (the smoke), the table keeps its two columns.
    two = scale.cpu_table(ceiling, drain, 23.0, 40.0)
    assert "| **all** | **12.0** | **34.0** |" in two
    assert not any("reporting" in line for line in two)


def gc_page(cycles: int, last_end: float, heap: int) -> str:
    return "\n".join([
        'go_gc_duration_seconds{quantile="0.5"} 0.0001',
        "go_gc_duration_seconds_sum 0.5",
        f"go_gc_duration_seconds_count {cycles}",
        f"go_memstats_last_gc_time_seconds {last_end}",
        f"go_memstats_heap_inuse_bytes {heap}",
    ])


def test_the_hubs_collector_cycles_after_the_drain_count_one_that_ended_before_the_reading(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scale = load(monkeypatch, "scale")
    drained = scale.GcReading.of(gc_page(40, 1001.5, 800 * 2**20))
    end = scale.GcReading.of(gc_page(41, 1020.0, 820 * 2**20))
    assert drained == scale.GcReading(40, 1001.5, 800 * 2**20)
    # The last dispatch at 1000: the cycle that ended at 1001.5 (seen at the first
    # reading) and the one between the readings.
    assert scale.gc_after(drained, end, 1000.0) == (2, 20.0)
    # The last dispatch at 1002: only the cycle between the readings.
    assert scale.gc_after(drained, end, 1002.0) == (1, 18.0)
    # A page without the collector's series says nothing, rather than zero.
    absent = scale.GcReading.of("apiserver_request_total 3")
    assert all(math.isnan(v) for v in (absent.cycles, absent.last_end, absent.heap))


def aw(name: str, *conditions: tuple[str, str, str]) -> dict[str, object]:
    """An AppWrapper with (type, status, lastTransitionTime) conditions."""
    return {"metadata": {"name": name},
            "status": {"conditions": [{"type": t, "status": s, "lastTransitionTime": at}
                                      for t, s, at in conditions]}}


def test_the_writes_after_the_last_dispatch_count_each_write_and_each_first_podsready(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scale = load(monkeypatch, "scale")
    tail = scale.TailWrites(since=1000.4)  # the watch started at epoch 1000.4
    before = "1970-01-01T00:16:39Z"  # epoch 999: turned true before the watch started
    start = "1970-01-01T00:16:40Z"  # epoch 1000: the watch's own second
    later = "1970-01-01T00:16:41Z"
    tail.see(aw("a", ("PodsReady", "True", start)), 9.0)  # before the last dispatch
    tail.see(aw("b", ("Dispatched", "True", start)), 10.2)  # no PodsReady yet
    tail.see(aw("b", ("Dispatched", "True", start), ("PodsReady", "False", start)), 10.4)
    tail.see(aw("b", ("Dispatched", "True", start), ("PodsReady", "True", later)), 10.9)
    tail.see(aw("a", ("PodsReady", "True", start)), 11.5)  # a's PodsReady was made at 9.0
    # c turned ready before the watch began: its later write did not make it ready.
    tail.see(aw("c", ("PodsReady", "True", before)), 11.7)
    assert tail.after(10.0) == {"writes": 5, "ready": 1, "last_write_s": pytest.approx(1.7),
                                "last_ready_s": pytest.approx(0.9)}
    assert tail.after(12.0) == {"writes": 0, "ready": 0, "last_write_s": 0.0,
                                "last_ready_s": 0.0}
