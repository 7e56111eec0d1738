"""The scale benchmark's reading of the hub's conversion histogram: the drain's
conversions are the histogram's growth between two readings, failed calls left out
(the stand-in that answers while mcad is stopped is mcad's own conversion process,
tested in tests/webhook/test_conversion_process.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(monkeypatch: pytest.MonkeyPatch, stem: str) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"benchmark_{stem}", BENCHMARKS / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def metrics(buckets: dict[str, float], failed: float = 0.0) -> str:
    name = "apiserver_crd_conversion_webhook_duration_seconds_bucket"
    labels = 'crd_name="appwrappers.workload.codeflare.dev",from_version="v1beta1"'
    lines = [f'{name}{{{labels},succeeded="true",to_version="v1beta2",le="{le}"}} {n}'
             for le, n in buckets.items()]
    lines += [f'{name}{{{labels},succeeded="false",to_version="v1beta2",le="{le}"}} {failed}'
              for le in buckets]
    return "\n".join(["# HELP something", *lines, 'apiserver_request_total{verb="GET"} 7'])


def test_the_drains_conversions_are_the_growth_of_the_successful_calls_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scale = load(monkeypatch, "scale")
    before = metrics({"0.005": 10, "0.5": 12, "+Inf": 12}, failed=40)
    after = metrics({"0.005": 60, "0.5": 110, "+Inf": 112}, failed=900)
    grown = scale.conversions_between(before, after)
    assert grown == [(0.005, 50.0), (0.5, 98.0), (float("inf"), 100.0)]
    assert scale.quantile(grown, 0.5) == pytest.approx(0.005)
    assert scale.quantile(grown, 0.99) > 0.5 - 1e-9
