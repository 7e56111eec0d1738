"""The scale benchmark's conversion stand-in and its reading of the hub's conversion
histogram: the stand-in must answer as mcad does (it replaces mcad's webhook while mcad
is stopped, so the hub's v1beta2 watch cache is not measured broken), and the drain's
conversions are the histogram's growth between two readings, failed calls left out."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib.util
import json
import ssl
import sys
from pathlib import Path
from types import ModuleType

import aiohttp
import pytest

from e2e.cluster.topology import free_ports
from mcad.webhook.certs import issue
from mcad.webhook.conversion import review

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(monkeypatch: pytest.MonkeyPatch, stem: str) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"benchmark_{stem}", BENCHMARKS / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


V1BETA1_AW = {
    "apiVersion": "workload.codeflare.dev/v1beta1", "kind": "AppWrapper",
    "metadata": {"name": "a", "namespace": "ns", "uid": "u-1"},
    "spec": {"priority": 3, "resources": {"GenericItems": [{"generictemplate": {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "busybox"}]}}}}}]}}}


async def test_the_stand_in_answers_a_conversion_review_as_mcad_does(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    standin = load(monkeypatch, "standin")
    bundle = issue(["127.0.0.1"], dt.datetime.now(dt.UTC))
    assert bundle is not None
    (tmp_path / "tls.crt").write_bytes(bundle.cert)
    (tmp_path / "tls.key").write_bytes(bundle.key)
    port = free_ports(1)[0]
    server = asyncio.create_task(standin.serve("127.0.0.1", port, tmp_path / "tls.crt",
                                               tmp_path / "tls.key"))
    body = json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                       "request": {"uid": "r-1",
                                   "desiredAPIVersion": "workload.codeflare.dev/v1beta2",
                                   "objects": [V1BETA1_AW]}}).encode()
    trusted = ssl.create_default_context(cadata=bundle.ca_cert.decode())
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(200):  # until it listens (it starts in this loop)
                with contextlib.suppress(aiohttp.ClientConnectorError):
                    async with session.post(f"https://127.0.0.1:{port}/convert", data=body,
                                            ssl=trusted) as answer:
                        got = await answer.read()
                    break
                await asyncio.sleep(0.01)
            else:
                pytest.fail("the stand-in never listened")
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
    assert json.loads(got) == json.loads(review(body))
    converted = json.loads(got)["response"]["convertedObjects"][0]
    assert converted["apiVersion"] == "workload.codeflare.dev/v1beta2"


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
