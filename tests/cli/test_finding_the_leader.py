"""How ``mcad queue`` / ``explain`` find the leader, and what ``mcad run`` writes on its
Lease for them: a URL when it runs outside the hub, its pod and port inside. Before,
the CLI took the holder identity (``<pod>_<random>``) for a pod name and answered
"pods ... not found" whenever the leader ran outside the hub.
"""

from __future__ import annotations

import socket

import pytest

from mcad.cli.queue import LeaderPod, LeaderUrl, leader_address
from mcad.cli.run import lease_annotations
from mcad.controller.leader import CONTROLLER_POD_ANNOTATION, CONTROLLER_URL_ANNOTATION


@pytest.mark.parametrize(("address", "port", "pod", "want"), [
    ("127.0.0.1:8080", 8080, None, {CONTROLLER_URL_ANNOTATION: "http://127.0.0.1:8080"}),
    # an ephemeral port is published as bound, not as asked
    ("127.0.0.1:0", 41234, None, {CONTROLLER_URL_ANNOTATION: "http://127.0.0.1:41234"}),
    ("[::1]:8080", 8080, None, {CONTROLLER_URL_ANNOTATION: "http://[::1]:8080"}),
    ("0.0.0.0:8080", 8080, None,
     {CONTROLLER_URL_ANNOTATION: f"http://{socket.getfqdn()}:8080"}),
    ("0.0.0.0:8080", 8080, "mcad-7d9f-abcde", {CONTROLLER_POD_ANNOTATION: "mcad-7d9f-abcde:8080"}),
])
def test_the_leader_publishes_where_it_answers(address: str, port: int, pod: str | None,
                                               want: dict[str, str]) -> None:
    assert lease_annotations(address, port, pod) == want


@pytest.mark.parametrize(("holder", "annotations", "want"), [
    ("laptop_1a2b3c4d", {CONTROLLER_URL_ANNOTATION: "http://10.0.0.5:8080"},
     LeaderUrl("http://10.0.0.5:8080")),
    ("mcad-7d9f-abcde_1a2b3c4d", {CONTROLLER_POD_ANNOTATION: "mcad-7d9f-abcde:9090"},
     LeaderPod("mcad-7d9f-abcde", 9090)),
    # a Lease written by an mcad that published nothing: the pod is the identity's base
    ("mcad-7d9f-abcde_1a2b3c4d", {}, LeaderPod("mcad-7d9f-abcde", 8080, guessed=True)),
    ("plainname", {}, LeaderPod("plainname", 8080, guessed=True)),
    ("mcad_1a2b3c4d", {CONTROLLER_POD_ANNOTATION: "broken"}, LeaderPod("mcad", 8080, guessed=True)),
])
def test_the_cli_goes_where_the_lease_says(holder: str, annotations: dict[str, str],
                                           want: LeaderUrl | LeaderPod) -> None:
    assert leader_address(holder, annotations) == want
