"""The conversion webhook survives a leader change: with two replicas behind one address
(a TCP proxy standing in for the Service, as kube-proxy would: each connection to the
first replica that takes it), v1beta2 is read through the leader; with the leader killed
(``kill -9``), it is read through the standby at once, before the standby leads, and
still once it does. Every replica serves the conversion webhook with the certificate the
leader issued; only the leader writes."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from e2e.cluster.topology import free_ports
from e2e.clusters import Cluster
from e2e.controller import ControllerProcess, create_aw, job_appwrapper
from e2e.v1beta2.conftest import (
    GROUP,
    converting,
    read,
    restore,
    webhook_args,
)
from e2e.waiting import wait_until


class Proxy:
    """A loopback TCP proxy in a thread of its own: each connection goes to the first of
    ``ports`` that accepts it; bytes are copied both ways (TLS passes through)."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.port = free_ports(1)[0]
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", self.port))
        self.ready.set()
        try:
            self.loop.run_forever()
        finally:
            server.close()

    async def _client(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        for port in self.ports:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
            return
        writer.close()

    def __enter__(self) -> Proxy:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    with contextlib.suppress(OSError):
        sink.close()


@contextlib.contextmanager
def two_replicas(mcad: ControllerProcess, kubectl_bin: Path, hub: Cluster,
                 log_dir: Path) -> Iterator[tuple[ControllerProcess, ControllerProcess, int]]:
    """Replicas a (started first: it leads) and b behind one proxy port."""
    port_a, port_b = free_ports(2)
    with Proxy([port_a, port_b]) as proxy:
        a = ControllerProcess(mcad.hub_kubeconfig, log_dir, name="replica-a",
                              extra_args=webhook_args(port_a, proxy.port))
        b = ControllerProcess(mcad.hub_kubeconfig, log_dir, name="replica-b",
                              extra_args=webhook_args(port_b, proxy.port))
        mcad.stop()
        try:
            a.start()
            deadline = time.monotonic() + 60
            while not converting(kubectl_bin, hub):
                assert time.monotonic() < deadline, "the leader registered no conversion"
                time.sleep(0.2)
            b.start(wait_ready=False)
            yield a, b, proxy.port
        finally:
            a.stop()
            b.stop()
            restore(kubectl_bin, hub)
            mcad.start()


def readyz(proc: ControllerProcess) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.port}/readyz", timeout=5) as r:
            return str(r.read().decode())
    except urllib.error.HTTPError as err:  # not ready: 503 with the reason
        return str(err.read().decode())


async def test_v1beta2_is_read_through_the_standby_when_the_leader_dies(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path, tmp_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    with two_replicas(mcad, kubectl_path, hub, tmp_path) as (leader, standby, _):
        await wait_until(lambda: asyncio.to_thread(lambda: "standby" in readyz(standby)),
                         within=60, what="the standby to serve (its certificate loaded)")
        await create_aw(hub, ns, job_appwrapper("before", pods=1, gpus=1, runtime=None))

        async def listed() -> list[str] | None:
            try:
                items = (await hub.custom.list_namespaced_custom_object(
                    GROUP, "v1beta2", ns, "appwrappers"))["items"]
            except ApiException as err:
                # The CRD's storage is rebuilt after the leader points its conversion at
                # itself: "storage is (re)initializing", retry after a second.
                if err.status == 429:
                    return None
                raise
            return [i["metadata"]["name"] for i in items] or None

        assert await wait_until(listed, within=30, what="a v1beta2 list") == ["before"]
        leader.kill()
        killed = time.monotonic()
        # At once: the standby converts, though it does not lead yet.
        shown = await wait_until(lambda: _read_past_the_dead(hub, ns, "before"), within=10,
                                 what="a v1beta2 read converted by the standby")
        assert shown is not None
        assert shown["apiVersion"] == f"{GROUP}/v1beta2"
        assert "standby" in readyz(standby)  # nobody leads yet: only the standby converted
        assert time.monotonic() - killed < 10
        # A v1beta2 AppWrapper written meanwhile is stored and dispatched once b leads.
        body = {"apiVersion": f"{GROUP}/v1beta2", "kind": "AppWrapper",
                "metadata": {"name": "after"},
                "spec": {"components": [{"template": job_appwrapper(
                    "after", pods=1, gpus=1, runtime=None)["spec"]["resources"][
                        "GenericItems"][0]["generictemplate"]}]}}
        await wait_until(lambda: _create(hub, ns, body), within=30,
                         what="the v1beta2 AppWrapper admitted through the standby")

        async def runs() -> bool:
            shown = await _read_past_the_dead(hub, ns, "after")
            return ((shown or {}).get("status") or {}).get("phase") in ("Resuming", "Running")

        await wait_until(runs, within=60, what="the new leader to dispatch it")


_DEAD_REPLICA = ("connection reset by peer", "broken pipe", "EOF")


async def _read_past_the_dead(hub: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """A v1beta2 read, or None when the API server's conversion call went over the
    connection it still held open to the killed replica.

    The API server keeps its connection to the webhook's address alive between calls. A
    ``kill -9`` resets the connection the proxy (like kube-proxy behind a Service) had
    opened to that replica, and a conversion POST sent over it before the reset reached
    the API server fails once with 500 "connection reset by peer": Go does not resend a
    POST on a reused connection. The next call dials again and reaches the standby. Any
    other failure is raised."""
    try:
        return await read(hub, "v1beta2", namespace, name)
    except ApiException as err:
        if err.status == 500 and any(m in str(err.body) for m in _DEAD_REPLICA):
            return None
        raise


async def _create(hub: Cluster, namespace: str, body: dict[str, object]) -> bool:
    try:
        await hub.custom.create_namespaced_custom_object(GROUP, "v1beta2", namespace,
                                                         "appwrappers", body)
    except ApiException as err:
        if err.status == 500 and any(m in str(err.body) for m in _DEAD_REPLICA):
            return False  # over a connection to the killed replica: see _read_past_the_dead
        return bool(err.status == 409)  # (admitted by a try whose answer was lost)
    return True

