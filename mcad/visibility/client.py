"""Asking the visibility API through the hub, as the user: for ``mcad queue``, ``mcad
explain`` and ``mcad.client``.

The request goes to the hub's API server with the user's own kubeconfig, never to the
leader directly: the API server authenticates the user and RBAC decides (``list
pendingappwrappers`` in the namespace asked for; a cluster-wide grant for every
namespace), then the leader answers. So this module needs no address of the leader and
no right of its own; what a user sees is what their role grants.

Names are checked before any path is built (a namespace is a DNS label, a name a DNS
subdomain), so no argument can turn the request into another one (``../``), and every
answer that is not the visibility API's (an HTML error page of a proxy, a hub without
the API) becomes a sentence, never a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from mcad.api.visibility import API_SERVICE, EXPLANATIONS, GROUP_VERSION, PENDING
from mcad.gateway.connection import Connection, connect, default_kubeconfig_path
from mcad.gateway.errors import ApiError, GatewayError

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                           r"(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
NOT_SERVED = "the server could not find the requested resource"
BASE = f"/apis/{GROUP_VERSION}"


class NoAnswer(Exception):
    """The hub or the leader could not answer; the message says why, in a sentence."""


def check_namespace(namespace: str) -> str:
    if not DNS_LABEL.match(namespace):
        raise NoAnswer(f"{namespace!r} is not a namespace name (a DNS label: lower-case "
                       "letters, digits and '-', at most 63)")
    return namespace


def check_name(name: str) -> str:
    if not DNS_SUBDOMAIN.match(name):
        raise NoAnswer(f"{name!r} is not an AppWrapper name (a DNS subdomain: lower-case "
                       "letters, digits, '-' and '.')")
    return name


def pending_path(namespace: str | None) -> str:
    """The queue's rows: of one namespace, or (None) of every namespace."""
    if namespace is None:
        return f"{BASE}/{PENDING}"
    return f"{BASE}/namespaces/{quote(check_namespace(namespace))}/{PENDING}"


def explanation_path(namespace: str, name: str | None = None) -> str:
    """One AppWrapper's explanation, or (no name) where dry runs are sent."""
    path = f"{BASE}/namespaces/{quote(check_namespace(namespace))}/{EXPLANATIONS}"
    return path if name is None else f"{path}/{quote(check_name(name))}"


async def open_hub(kubeconfig: Path | None, context: str | None) -> Connection:
    """A connection to the hub as the user of ``kubeconfig`` (default: $KUBECONFIG, else
    ~/.kube/config)."""
    path = kubeconfig or default_kubeconfig_path()
    try:
        return await connect(path, name="hub", context=context)
    except GatewayError as error:
        raise NoAnswer(f"the hub kubeconfig {path} cannot be used: {error}") from None


async def ask(hub: Connection, method: str, path: str, *, kind: str, what: str,
              body: Any = None) -> dict[str, Any]:
    """The visibility API's answer of ``kind``; ``NoAnswer`` with a sentence otherwise.
    ``what`` says what was asked, for the sentence ("list the queue of team-a")."""
    try:
        answer = await hub.request(method, path, body=body, attempts=1 if body else None,
                                   timeout=60)
    except ApiError as error:
        raise NoAnswer(refusal(error.status, error.message, what=what)) from None
    if answer.get("kind") != kind:
        text = str(answer.get("message") or answer)[:200]
        raise NoAnswer(f"the hub's answer to {what} is not the visibility API's ({text!r}); "
                       f"is APIService {API_SERVICE} pointing at mcad?")
    return answer


def refusal(status: int, message: str, *, what: str) -> str:
    """A sentence for a refusal of the hub or the leader."""
    message = message.rstrip(".") or "no reason given"
    if status == 401:
        return f"the hub does not accept your credentials ({message})"
    if status == 403:
        return f"you may not {what}: {message}"
    if status == 404 and NOT_SERVED in message:
        return (f"the hub serves no visibility API (APIService {API_SERVICE}): install mcad "
                "with its manifests (kubectl apply -k manifests/), or run it with "
                "--webhook-url or --visibility-url")
    if status == 503:
        return (f"the visibility API cannot answer now ({message}); the leader may be "
                "starting or changing: try again shortly")
    if status == 429:
        return f"the leader is busy ({message})"
    return f"the hub answered {status}: {message}"
