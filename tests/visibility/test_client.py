"""Asking the visibility API through the hub (``mcad.visibility.client``), as ``mcad
queue``, ``mcad explain`` and ``mcad.client`` do: names are checked before a path is
built (a name with ``../`` once turned ``explain -f`` into a POST to the AppWrapper
collection, when the leader's pod name came unchecked from its Lease), and whatever the
hub answers (a refusal, an HTML page, a hub without the API) is a sentence, never a
traceback."""

from __future__ import annotations

import argparse
import io
from typing import Any

import pytest

from mcad.cli.queue import run_explain, run_queue
from mcad.gateway.transport import Reply
from mcad.visibility import client
from mcad.visibility.client import NoAnswer
from tests.gateway.scripted import ScriptedTransport, reply, status

LIST = "/apis/visibility.codeflare.dev/v1alpha1/namespaces/team-b/pendingappwrappers"


@pytest.mark.parametrize("namespace", ["../../api/v1", "Team-B", "a/b", "", "x" * 64])
def test_a_namespace_that_is_no_dns_label_is_refused_before_asking(namespace: str) -> None:
    with pytest.raises(NoAnswer, match="is not a namespace name"):
        client.pending_path(namespace)


@pytest.mark.parametrize("name", ["../../appwrappers", "a/b", "A", "-a", "a" * 254])
def test_a_name_that_is_no_dns_subdomain_is_refused_before_asking(name: str) -> None:
    with pytest.raises(NoAnswer, match="is not an AppWrapper name"):
        client.explanation_path("team-b", name)


def test_the_paths() -> None:
    assert client.pending_path(None) == \
        "/apis/visibility.codeflare.dev/v1alpha1/pendingappwrappers"
    assert client.pending_path("team-b") == LIST
    assert client.explanation_path("team-b", "train.v2") == \
        "/apis/visibility.codeflare.dev/v1alpha1/namespaces/team-b/explanations/train.v2"


async def asked(answer: Reply) -> str:
    hub = ScriptedTransport()
    hub.on("GET", LIST, answer)
    with pytest.raises(NoAnswer) as caught:
        await client.ask(hub.connection("hub"), "GET", LIST, kind="PendingAppWrapperList",
                         what="list the queue of namespace team-b")
    return str(caught.value)


@pytest.mark.parametrize(("answer", "says"), [
    (Reply(200, b"<html>proxy error</html>", None),
     "the hub's answer to list the queue of namespace team-b is not the visibility API's"),
    (reply(200, {"kind": "PodList"}), "is not the visibility API's"),
    (status(403, "Forbidden", 'pendingappwrappers.visibility.codeflare.dev is forbidden: '
                              'User "team-b" cannot list resource'),
     "you may not list the queue of namespace team-b: pendingappwrappers"),
    (status(404, "NotFound", "the server could not find the requested resource"),
     "the hub serves no visibility API (APIService v1alpha1.visibility.codeflare.dev)"),
    (status(503, "ServiceUnavailable", "this replica is on standby"),
     "cannot answer now (this replica is on standby)"),
    (Reply(502, b"<html>bad gateway</html>", None), "the hub answered 502: <html>"),
])
async def test_every_answer_that_is_not_one_is_a_sentence(answer: Reply, says: str) -> None:
    assert says in await asked(answer)


def args(**given: Any) -> argparse.Namespace:
    base: dict[str, Any] = {"namespace": "team-b", "all_namespaces": False, "output": None,
                            "hub_kubeconfig": None, "context": None, "controller": None,
                            "name": None, "filename": None}
    return argparse.Namespace(**(base | given))


def test_the_gone_controller_flag_is_refused_with_a_sentence() -> None:
    err = io.StringIO()
    assert run_queue(args(controller="http://127.0.0.1:8080"), err=err) == 2
    assert "--controller is gone" in err.getvalue()
    err = io.StringIO()
    assert run_explain(args(name="x", controller="http://127.0.0.1:8080"), err=err) == 2
    assert "--controller is gone" in err.getvalue()


def test_explain_refuses_a_bad_name_without_a_traceback(tmp_path: Any) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    err = io.StringIO()
    assert run_explain(args(name="../../appwrappers", hub_kubeconfig=kubeconfig), err=err) == 1
    assert err.getvalue().startswith("mcad explain: '../../appwrappers' is not an "
                                     "AppWrapper name")
