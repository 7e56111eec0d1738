"""Session fixtures: one test bed per test run, kubeconfigs and ready API clients.

The test bed (hub + 2 spokes x 4 nodes x 8 GPUs, 2 fake nodes on the hub) comes up
once per run and goes down at the end; its supervisor watches this pytest process,
so even a killed test run leaves no component behind. Set MCAD_TESTBED_DIR to a
folder where ``python -m e2e.cluster up`` already runs a test bed to reuse it (it is
then left running).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from e2e.cluster.build import artifacts
from e2e.cluster.launcher import down, up
from e2e.cluster.topology import TestbedSpec, TestbedState, pid_alive, read_state
from e2e.clusters import Cluster, kubectl
from e2e.controller import AW, ControllerProcess
from e2e.waiting import wait_until
from mcad.cli.main import main as mcad_main

REPO = Path(__file__).resolve().parents[1]
SPEC = TestbedSpec(spokes=2, nodes=4, gpus_per_node=8, cpu_per_node="32",
                   memory_per_node="256Gi", hub_nodes=2)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def testbed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's test bed lives (for faults: ``e2e.cluster.faults``)."""
    reuse = os.environ.get("MCAD_TESTBED_DIR")
    return Path(reuse).resolve() if reuse else tmp_path_factory.mktemp("testbed")


@pytest.fixture(scope="session")
def testbed(testbed_dir: Path, pytestconfig: pytest.Config) -> Iterator[TestbedState]:
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def say(message: str) -> None:
        """Past pytest's capture: the first run builds Kubernetes for many minutes, and
        a person watching `make test` must see that it is alive."""
        with capture.global_and_fixture_disabled():
            print(f"[test bed] {message}", file=sys.stderr, flush=True)

    reuse = os.environ.get("MCAD_TESTBED_DIR")
    if reuse:
        state = read_state(testbed_dir)
        if state and state.phase == "ready" and pid_alive(state.supervisor_pid):
            yield state
            return
    directory = testbed_dir
    say(f"bringing up the test bed in {directory} (hub and 2 spokes)")
    state = up(directory, SPEC, owner_for_life=not reuse, log=say)
    say("test bed ready")
    try:
        yield state
    finally:
        if not reuse:
            down(directory)


@pytest.fixture(scope="session")
async def clusters(testbed: TestbedState) -> AsyncIterator[dict[str, Cluster]]:
    out: dict[str, Cluster] = {}
    for c in testbed.clusters:
        cfg = client.Configuration()
        await config.load_kube_config(config_file=c.kubeconfig, client_configuration=cfg)
        out[c.name] = Cluster(c.name, Path(c.kubeconfig), client.ApiClient(cfg))
    yield out
    for c in out.values():
        await c.api.close()


@pytest.fixture(scope="session")
def kubectl_path(testbed: TestbedState) -> Path:
    return artifacts().path("kubectl")


@pytest.fixture
async def namespace(clusters: dict[str, Cluster]) -> AsyncIterator[str]:
    """A fresh namespace, present on every cluster, deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    body = client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
    for c in clusters.values():
        await c.core.create_namespace(body)
    yield name
    for c in clusters.values():
        await c.core.delete_namespace(name)


@pytest.fixture(scope="session")
def hub_crds(clusters: dict[str, Cluster], kubectl_path: Path) -> Cluster:
    hub = clusters["hub"]
    kubectl(kubectl_path, hub, "apply", "-k", str(REPO / "crds"))
    kubectl(kubectl_path, hub, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/appwrappers.workload.codeflare.dev", "crd/quotasubtrees.quota.codeflare.dev",
            "crd/spokeclusters.cluster.codeflare.dev")
    return hub


# -- the controller ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def mcad(hub_crds: Cluster, clusters: dict[str, Cluster], testbed: TestbedState,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    """``mcad run`` on the hub, with spoke-1 (zone=east) and spoke-2 (zone=west)."""
    by_name = {c.name: c for c in testbed.clusters}
    for spoke, zone in (("spoke-1", "east"), ("spoke-2", "west")):
        code = mcad_main(["cluster", "register", spoke, "--kubeconfig",
                          by_name[spoke].kubeconfig, "--label", f"zone={zone}",
                          "--hub-kubeconfig", by_name["hub"].kubeconfig])
        assert code == 0
    controller = ControllerProcess(Path(by_name["hub"].kubeconfig),
                                   tmp_path_factory.mktemp("mcad-run"))
    controller.start()
    yield controller
    controller.stop()


@pytest.fixture
async def aw_namespace(mcad: ControllerProcess, clusters: dict[str, Cluster]
                       ) -> AsyncIterator[str]:
    """A namespace for AppWrappers; afterwards they are deleted and the controller must
    have cleaned them up (finalizers gone) before the next test runs."""
    hub = clusters["hub"]
    name = f"aw-{uuid.uuid4().hex[:8]}"
    await hub.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    await hub.custom.delete_collection_namespaced_custom_object(*AW[:2], name, AW[2])

    async def gone() -> bool:
        listed = await hub.custom.list_namespaced_custom_object(*AW[:2], name, AW[2])
        return not listed["items"]

    await wait_until(gone, within=120, what=f"the AppWrappers of {name} to be cleaned up")
    await hub.core.delete_namespace(name)
