"""The Python client's pure parts: what it accepts as a manifest, and when a wait is
over. Its conversations with the hub and the controller are tested end to end
(``e2e/dispatch/test_client.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcad.client import AppWrapperStatus, Client, McadError, _load, _reached


def test_a_manifest_is_a_mapping_yaml_text_or_a_file(tmp_path: Path) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}
    assert _load(job) == job
    assert _load("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n") == job
    path = tmp_path / "job.yaml"
    path.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n")
    assert _load(path) == job and _load(str(path)) == job


@pytest.mark.parametrize(("text", "says"), [
    ("- a\n- b\n", "must be one object (a mapping), not list"),
    ("a: [\n", "is not YAML or JSON"),
])
def test_a_bad_manifest_is_refused_with_a_sentence(text: str, says: str) -> None:
    with pytest.raises(McadError, match=r".*") as caught:
        _load(text)
    assert says in str(caught.value)


@pytest.mark.parametrize(("state", "wanted", "done"), [
    ("Running", "Running", True),
    ("Completed", "Running", True),   # it ran: waiting for Running is over
    ("Pending", "Running", False),
    ("Running", "Completed", False),
    ("Failed", "Failed", True),
])
def test_when_a_wait_is_over(state: str, wanted: str, done: bool) -> None:
    assert _reached(state, wanted) is done


def test_the_status_of_an_appwrapper() -> None:
    got = AppWrapperStatus.of({
        "metadata": {"name": "train", "namespace": "team-a"},
        "status": {"state": "Running", "clusterName": "spoke-1",
                   "conditions": [{"type": "PodsReady", "status": "True"}]}})
    assert (got.namespace, got.name, got.state, got.cluster) == \
        ("team-a", "train", "Running", "spoke-1")
    assert got.conditions["PodsReady"]["status"] == "True"


def test_a_bad_kubeconfig_is_a_sentence(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with Client(broken) as client, pytest.raises(McadError, match="cannot be used"):
        client.status("anything")


LEFT_OPEN = '''
import asyncio, sys, threading
from pathlib import Path
from aiohttp import web

def serve(box, ready):
    async def main():
        app = web.Application()
        async def nothing(request):
            return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound",
                                      "message": "no"}, status=404)
        app.router.add_route("*", "/{tail:.*}", nothing)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        box.append(runner.addresses[0][1])
        ready.set()
        await asyncio.Event().wait()
    asyncio.run(main())

box, ready = [], threading.Event()
threading.Thread(target=serve, args=(box, ready), daemon=True).start()
ready.wait()
config = Path(sys.argv[1])
config.write_text(f"""apiVersion: v1
kind: Config
current-context: c
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{box[0]}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
""")
from mcad.client import Client, McadError
client = Client(config)
try:
    client.status("x", namespace="ns")
except McadError as error:
    print(error)
if sys.argv[2] == "dropped":  # a notebook cell run again: the old client is collected
    del client
    import gc
    gc.collect()
'''


@pytest.mark.parametrize("how", ["dropped", "left at exit"])
def test_a_client_never_closed_cleans_up_after_itself(tmp_path: Path, how: str) -> None:
    """As in a notebook: no close(), no with; no "Unclosed client session" at exit."""
    script = tmp_path / "notebook.py"
    script.write_text(LEFT_OPEN)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-X", "dev", str(script),
                           str(tmp_path / "kubeconfig"), how.split(maxsplit=1)[0]],
                          capture_output=True, text=True, timeout=60, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, check=False)
    assert done.returncode == 0, done.stderr
    assert "there is no AppWrapper ns/x on the hub" in done.stdout
    assert "Unclosed" not in done.stderr, done.stderr


def test_a_closed_client_says_so(tmp_path: Path) -> None:
    client = Client(tmp_path / "kubeconfig")
    client.close()
    client.close()  # twice is fine
    with pytest.raises(McadError, match="this client is closed"):
        client.status("x")


def test_a_v1beta2_appwrapper_names_its_priority_by_class() -> None:
    with Client() as client, pytest.raises(McadError, match="priority-class"):
        client.submit({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                       "metadata": {"name": "a"}, "spec": {"components": []}}, priority=5)
