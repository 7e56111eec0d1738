"""The conversion and admission webhooks in a process of their own
(``--conversion-address``): why, in ``mcad.webhook.conversion_server``. What must hold:
the hub is pointed at it for both (the URL's host at its port, or the Service's
conversion port), it answers exactly as the controller's own server does, with the
controller's configuration, it comes back when it dies, and it never outlives the
controller that started it."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from e2e.cluster.topology import free_ports
from e2e.waiting import wait_until
from mcad.api.conversion import CONVERSION_SERVICE_PORT, CONVERT_PATH, to_v1beta2
from mcad.cli.main import build_parser
from mcad.cli.run import _registration
from mcad.config import RunConfig
from mcad.server import ListenError
from mcad.webhook import conversion
from mcad.webhook.certmanager import CertManager, Registration, configuration
from mcad.webhook.certs import issue
from mcad.webhook.reviewer import MAX_BODY as MAX_REVIEW_BODY
from mcad.webhook.reviewer import PATH
from mcad.webhook.server import WebhookServer
from tests.webhook.test_conversion import STORED, Hub, manifests_crd, review
from tests.webhook.test_webhook import JOB, admission, appwrapper, post


async def test_url_mode_points_the_crd_at_the_urls_host_on_the_conversion_port() -> None:
    hub = Hub(manifests_crd())
    registration = Registration(url="https://10.0.0.5:9443/prefix/validate-appwrapper",
                                conversion_port=9444)
    bundle = await CertManager(hub=hub.transport.connection("hub"), namespace="mcad-system",
                               registration=registration).ensure()
    assert hub.crd is not None
    assert hub.crd["spec"]["conversion"]["webhook"]["clientConfig"] == {
        "url": "https://10.0.0.5:9444/prefix/convert",
        "caBundle": base64.b64encode(bundle.ca_cert).decode()}


@pytest.mark.parametrize(("conversion_port", "service_port"), [
    (9444, CONVERSION_SERVICE_PORT), (None, 443)])
async def test_service_mode_names_the_services_port_of_whoever_converts(
        conversion_port: int | None, service_port: int) -> None:
    hub = Hub(manifests_crd())
    registration = Registration(service=("mcad-system", "mcad-webhook"),
                                conversion_port=conversion_port)
    await CertManager(hub=hub.transport.connection("hub"), namespace="mcad-system",
                      registration=registration).ensure()
    assert hub.crd is not None
    service = hub.crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert service == {"namespace": "mcad-system", "name": "mcad-webhook",
                       "path": CONVERT_PATH, "port": service_port}


def registration_of(*argv: str) -> Registration | None:
    args = build_parser().parse_args(["run", *argv])
    return _registration(args, RunConfig())


def test_the_flag_reaches_the_registration_and_needs_the_webhooks_certificate() -> None:
    got = registration_of("--webhook-address", "127.0.0.1:9443", "--conversion-address",
                          "127.0.0.1:9444", "--webhook-url", "https://127.0.0.1:9443")
    assert got is not None and got.conversion_port == 9444
    with pytest.raises(ListenError, match="give --webhook-address too"):
        registration_of("--conversion-address", "127.0.0.1:9444",
                        "--webhook-service", "mcad-system/mcad-webhook")
    with pytest.raises(ListenError, match="needs a port other than 0"):
        registration_of("--webhook-address", "127.0.0.1:9443",
                        "--conversion-address", "127.0.0.1:0")


@pytest.fixture
async def converting() -> AsyncIterator[tuple[WebhookServer, str, ssl.SSLContext]]:
    """A replica's TLS server whose conversion runs in a process of its own."""
    hub = Hub(manifests_crd())
    conn = hub.transport.connection("hub")
    bundle = await CertManager(hub=conn, namespace="mcad-system",
                               registration=Registration(url="https://127.0.0.1:1")).ensure()
    port = free_ports(1)[0]
    server = WebhookServer(hub=conn, config=RunConfig(), address="127.0.0.1:0",
                           conversion_address=f"127.0.0.1:{port}")
    task = asyncio.create_task(server.run())
    await asyncio.wait_for(server.serving.wait(), 10)
    yield (server, f"https://127.0.0.1:{port}{CONVERT_PATH}",
           ssl.create_default_context(cadata=bundle.ca_cert.decode()))
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def listening(server: WebhookServer) -> None:
    """Until the replica counts its conversion process as listening (its readiness)."""
    async def probe() -> bool:
        return server.converter is not None and server.converter.listening
    await wait_until(probe, within=30, what="the conversion process to listen")


async def converted(url: str, trust: ssl.SSLContext, body: dict[str, Any]) -> dict[str, Any]:
    """The process's answer, asked once: a replica that counts it as listening (and so
    is ready) must not have it refuse the connection."""
    async with aiohttp.ClientSession() as session, \
            session.post(url, json=body, ssl=trust) as resp:
        assert resp.status == 200
        got: dict[str, Any] = await resp.json()
        return got


async def test_the_process_answers_as_the_controllers_own_server_does(
        converting: tuple[WebhookServer, str, ssl.SSLContext]) -> None:
    server, url, trust = converting
    await listening(server)
    body = review([STORED])
    got = await converted(url, trust, body)
    assert got == json.loads(conversion.review(json.dumps(body).encode()))
    assert got["response"]["convertedObjects"] == [to_v1beta2(STORED)]
    assert server.converter is not None and server.converter.started == 1


async def test_a_process_that_died_is_started_again(
        converting: tuple[WebhookServer, str, ssl.SSLContext]) -> None:
    server, url, trust = converting
    await listening(server)
    assert server.converter is not None
    proc = server.converter._proc
    assert proc is not None
    proc.kill()
    await proc.wait()
    assert not server.converter.listening  # not ready until it is back
    server.reload_soon()  # (the next round comes within RELOAD_EVERY_S anyway)
    await listening(server)
    got = await converted(url, trust, review([STORED]))
    assert got["response"]["convertedObjects"] == [to_v1beta2(STORED)]
    assert server.converter.started == 2


def test_the_process_ends_once_its_parent_is_gone(tmp_path: Path) -> None:
    """Started for a parent that is not its own (as when the controller died), it ends
    at its first check instead of serving on."""
    bundle_files = []
    bundle = issue(["127.0.0.1"], dt.datetime.now(dt.UTC))
    assert bundle is not None
    for name, data in (("tls.crt", bundle.cert), ("tls.key", bundle.key)):
        (tmp_path / name).write_bytes(data)
        bundle_files.append(str(tmp_path / name))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mcad.webhook.conversion_server", "--address",
         f"127.0.0.1:{free_ports(1)[0]}", "--cert", bundle_files[0], "--key", bundle_files[1],
         "--parent", "1"], timeout=30, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20


def test_the_manifests_route_the_crds_conversion_to_the_process() -> None:
    """The generated CRD calls the Service's conversion port, which leads to the
    container port the Deployment's ``--conversion-address`` listens on."""
    repo = Path(__file__).resolve().parents[2]

    def documents(path: str) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all((repo / path).read_text()) if d]

    (crd,) = documents("crds/workload.codeflare.dev_appwrappers.yaml")
    called = crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    (service,) = [d for d in documents("manifests/base/webhook.yaml") if d["kind"] == "Service"]
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == \
        (called["namespace"], called["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == called["port"]]
    assert called["port"] == CONVERSION_SERVICE_PORT
    (deployment,) = documents("manifests/base/deployment.yaml")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (target,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert f"--conversion-address=:{target['containerPort']}" in container["args"]


def test_the_manifests_send_admission_reviews_to_the_process_too() -> None:
    """The ValidatingWebhookConfiguration calls the same Service port as the CRD's
    conversion: the process answers both, off the controller's event loop."""
    repo = Path(__file__).resolve().parents[2]
    documents = [d for d in yaml.safe_load_all(
        (repo / "manifests/base/webhook.yaml").read_text()) if d]
    (configuration,) = [d for d in documents if d["kind"] == "ValidatingWebhookConfiguration"]
    (webhook,) = configuration["webhooks"]
    assert webhook["clientConfig"]["service"]["port"] == CONVERSION_SERVICE_PORT
    assert webhook["clientConfig"]["service"]["path"] == PATH


@pytest.mark.parametrize(("conversion_port", "expected"), [
    (9444, {"url": "https://10.0.0.5:9444/prefix/validate-appwrapper"}),
    (None, {"url": "https://10.0.0.5:9443/prefix/validate-appwrapper"})])
def test_url_mode_registers_the_admission_webhook_where_the_process_listens(
        conversion_port: int | None, expected: dict[str, Any]) -> None:
    registration = Registration(url="https://10.0.0.5:9443/prefix/validate-appwrapper",
                                conversion_port=conversion_port)
    got = configuration(registration, b"ca")["webhooks"][0]["clientConfig"]
    assert {k: v for k, v in got.items() if k != "caBundle"} == expected
    service = Registration(service=("mcad-system", "mcad-webhook"),
                           conversion_port=conversion_port).client_config(b"ca")["service"]
    assert service["port"] == (443 if conversion_port is None else CONVERSION_SERVICE_PORT)
    assert service["path"] == PATH


@pytest.fixture
def process_files(tmp_path: Path) -> tuple[list[str], ssl.SSLContext]:
    """A certificate, and a kubeconfig for a hub that does not answer (127.0.0.1:1)."""
    bundle = issue(["127.0.0.1"], dt.datetime.now(dt.UTC))
    assert bundle is not None
    for name, data in (("tls.crt", bundle.cert), ("tls.key", bundle.key)):
        (tmp_path / name).write_bytes(data)
    (tmp_path / "hub.kubeconfig").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "hub",
        "clusters": [{"name": "hub", "cluster": {"server": "https://127.0.0.1:1",
                                                 "insecure-skip-tls-verify": True}}],
        "users": [{"name": "mcad", "user": {"token": "t"}}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": "mcad"}}]}))
    (tmp_path / "config.json").write_text(RunConfig.model_validate(
        {"refusedNamespaces": ["kube-*", "team-*"]}).model_dump_json(by_alias=True))
    return ([str(tmp_path / n) for n in ("tls.crt", "tls.key", "hub.kubeconfig",
                                         "config.json")],
            ssl.create_default_context(cadata=bundle.ca_cert.decode()))


async def test_the_process_answers_admission_reviews_with_the_controllers_configuration(
        process_files: tuple[list[str], ssl.SSLContext]) -> None:
    """The configuration the process is given is the one it decides with (a refused
    namespace needs no access check), and an AppWrapper it cannot check is refused, not
    admitted: its hub does not answer."""
    (cert, key, kubeconfig, config), trust = process_files
    port = free_ports(1)[0]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mcad.webhook.conversion_server", "--address",
        f"127.0.0.1:{port}", "--cert", cert, "--key", key, "--review-config", config,
        "--kubeconfig", kubeconfig)
    try:
        async def accepts() -> bool:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return False
            writer.close()
            return True
        await wait_until(accepts, within=30, what="the process to listen")
        url = f"https://127.0.0.1:{port}{PATH}"
        refused = await post(url, trust, admission(appwrapper(JOB)))
        assert refused["allowed"] is False
        assert "team-a" in refused["status"]["message"]
        elsewhere = appwrapper(JOB)
        elsewhere["metadata"]["namespace"] = "research"
        body = admission(elsewhere)
        body["request"]["namespace"] = "research"
        unchecked = await post(url, trust, body)
        assert unchecked["allowed"] is False and unchecked["status"]["code"] == 503
        assert unchecked["status"]["message"].startswith(
            "mcad could not check whether the requester may create")
        # A review far larger than one read of the connection is read whole, then decided.
        large = admission(appwrapper(JOB))
        large["request"]["object"]["metadata"]["annotations"] = {"pad": "x" * 2_000_000}
        whole = await post(url, trust, large)
        assert whole["allowed"] is False and "team-a" in whole["status"]["message"]
        async with aiohttp.ClientSession() as session, session.post(
                url, data=b" " * (MAX_REVIEW_BODY + 1), ssl=trust) as resp:
            assert resp.status == 413  # a review is bounded here as in the controller
    finally:
        proc.terminate()
        await proc.wait()

