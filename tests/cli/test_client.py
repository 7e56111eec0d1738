"""The Python client's pure parts: what it accepts as a manifest, and when a wait is
over. Its conversations with the hub and the controller are tested end to end
(``e2e/dispatch/test_client.py``)."""

from __future__ import annotations

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
