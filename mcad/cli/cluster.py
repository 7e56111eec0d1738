"""``mcad cluster register|unregister|list``: SpokeClusters without hand-written YAML.

Why a command: registering a spoke takes two objects that must agree (a Secret in the
controller's namespace holding the kubeconfig, and the SpokeCluster pointing at it)
and a base64 step that is easy to get wrong. ``register`` writes the Secret first and
the SpokeCluster second, so the controller never sees a SpokeCluster whose Secret is
missing; ``unregister`` removes them in the opposite order. Both are declarative:
running ``register`` again makes the objects say exactly what the command line says
(labels included), so it is safe to repeat.

The hub is found like kubectl finds a cluster: ``--hub-kubeconfig``, else the first
entry of $KUBECONFIG, else ~/.kube/config. Exit status: 0 done, 1 the kubeconfig, the
hub or an object is not as needed (one sentence on stderr; nothing is written when a
kubeconfig is bad), 2 the command line is wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import re
import ssl
import sys
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from mcad.api.documents import UnreadableFile, read_yaml
from mcad.api.spokecluster import API_VERSION, DEFAULT_KUBECONFIG_KEY, KIND
from mcad.core.workload.durations import format_duration
from mcad.core.workload.quantity import format_quantity, parse_quantity
from mcad.core.workload.resources import GPU
from mcad.gateway import verbs
from mcad.gateway.connection import Connection, connect, default_kubeconfig_path
from mcad.gateway.errors import (
    AlreadyExists,
    ApiError,
    BadKubeconfig,
    GatewayError,
    NotFound,
    Unreachable,
)
from mcad.gateway.refs import NAMESPACES, SECRETS, SPOKECLUSTERS

SPOKE_LABEL = "cluster.codeflare.dev/spoke"
"""Label on the Secrets ``register`` writes: the SpokeCluster they belong to."""
DEFAULT_NAMESPACE = "mcad-system"
SECRET_SUFFIX = "-kubeconfig"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_FILE_FIELDS = (("clusters", "cluster", "certificate-authority"),
                ("users", "user", "client-certificate"),
                ("users", "user", "client-key"),
                ("users", "user", "tokenFile"))


class CommandFailed(Exception):
    """What went wrong, as the sentence to print (without the command's name)."""


# -- the command line ------------------------------------------------------------------------

def add_parser(subparsers: Any) -> None:
    """Register ``mcad cluster`` and its subcommands."""
    parser = subparsers.add_parser(
        "cluster", help="register, unregister and list the clusters AppWrappers run on",
        description="Register spoke clusters with the hub (a Secret holding the kubeconfig "
                    "and a SpokeCluster pointing at it), remove them, and list them.")
    verbs = parser.add_subparsers(title="cluster commands", required=True)

    hub = argparse.ArgumentParser(add_help=False)
    hub.add_argument("--hub-kubeconfig", type=Path, metavar="FILE",
                     help="kubeconfig of the hub (default: $KUBECONFIG, else ~/.kube/config)")

    register_parser = verbs.add_parser(
        "register", parents=[hub], help="register a spoke cluster, or update its registration",
        description="Create or update the SpokeCluster NAME and the Secret "
                    "NAME-kubeconfig holding its kubeconfig. Running it again sets the "
                    "registration to what this command line says (labels included).")
    register_parser.add_argument("name", type=_spoke_name, metavar="NAME",
                                 help="name of the SpokeCluster")
    source = register_parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kubeconfig", type=Path, metavar="FILE",
                        help="kubeconfig of the spoke, as the controller should use it "
                             "(certificates embedded: kubectl config view --flatten --minify)")
    source.add_argument("--local", action="store_true",
                        help="the spoke is the hub itself (single-cluster mode; no Secret)")
    register_parser.add_argument("--label", dest="labels", action="append", default=[],
                                 type=label, metavar="KEY=VALUE",
                                 help="a label AppWrappers' clusterSelector can match "
                                      "(repeatable)")
    register_parser.add_argument("--key", default=DEFAULT_KUBECONFIG_KEY, type=_secret_key,
                                 help="key of the Secret that holds the kubeconfig "
                                      "(default: %(default)s)")
    register_parser.add_argument("--namespace", default=DEFAULT_NAMESPACE, type=_namespace,
                                 help="the controller's namespace, where the Secret goes "
                                      "(default: %(default)s)")
    register_parser.add_argument("--unschedulable", action="store_true",
                                 help="dispatch nothing new there (running AppWrappers stay)")
    register_parser.set_defaults(command=register)

    unregister_parser = verbs.add_parser(
        "unregister", parents=[hub], help="remove a spoke cluster's registration",
        description="Delete the SpokeCluster NAME, then the Secret that register wrote "
                    "for it. AppWrappers running there are not touched by this command.")
    unregister_parser.add_argument("name", type=_spoke_name, metavar="NAME")
    unregister_parser.add_argument("--namespace", default=DEFAULT_NAMESPACE, type=_namespace,
                                   help="the controller's namespace (default: %(default)s)")
    unregister_parser.set_defaults(command=unregister)

    list_parser = verbs.add_parser(
        "list", parents=[hub], help="list spoke clusters with readiness and free GPUs",
        description="List the SpokeClusters with what the controller last saw of them.")
    list_parser.set_defaults(command=list_clusters)


def _spoke_name(text: str) -> str:
    limit = 253 - len(SECRET_SUFFIX)
    if len(text) > limit or not _DNS_SUBDOMAIN.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a cluster name: use lower-case letters, digits, '-' and '.', "
            f"starting and ending with a letter or digit, at most {limit} characters")
    return text


def _namespace(text: str) -> str:
    if len(text) > 63 or not _DNS_LABEL.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a namespace name: use lower-case letters, digits and '-', "
            "at most 63 characters")
    return text


def _secret_key(text: str) -> str:
    if len(text) > 253 or not re.match(r"^[-._a-zA-Z0-9]+$", text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Secret key: use letters, digits, '-', '_' and '.'")
    return text


def label(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as a Kubernetes label (key, value), for argparse: a key with an optional
    DNS-subdomain prefix, a value of at most 63 characters (may be empty)."""
    key, sep, value = text.partition("=")
    prefix, slash, name = key.rpartition("/")
    good_key = (bool(sep) and bool(name) and len(name) <= 63 and bool(_LABEL_NAME.match(name))
                and (not slash or (len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.match(prefix)))))
    if not good_key:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KEY=VALUE with a label key such as zone or "
            "example.com/zone")
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        raise argparse.ArgumentTypeError(
            f"{text!r} has a value that is not a label value: at most 63 letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit")
    return key, value


# -- register ------------------------------------------------------------------------------

def register(args: argparse.Namespace, *, out: IO[str] | None = None,
             err: IO[str] | None = None) -> int:
    """``mcad cluster register``: write the Secret, then the SpokeCluster."""
    labels = dict(args.labels)
    if args.local:
        secret: dict[str, Any] | None = None
    else:
        try:
            kubeconfig = read_spoke_kubeconfig(args.kubeconfig)
        except CommandFailed as problem:
            return _fail("register", problem, err)
        secret = secret_object(args.name, namespace=args.namespace, key=args.key,
                               kubeconfig=kubeconfig)
    spec = spoke_spec(secret_name=None if secret is None else secret["metadata"]["name"],
                      key=args.key, labels=labels, unschedulable=args.unschedulable)
    return _run("register", args,
                lambda hub: _register(hub, args.name, spec=spec, secret=secret), out, err)


def read_spoke_kubeconfig(path: Path) -> bytes:
    """The kubeconfig file's bytes, once it is known the controller can use it.

    Raises ``CommandFailed`` when it cannot be read, is not YAML, names no cluster or
    server, or refers to files (the controller cannot read files on this machine).
    """
    try:
        raw, parsed = read_yaml(path, what="the kubeconfig")
    except UnreadableFile as error:
        raise CommandFailed(str(error)) from error
    clusters = parsed.get("clusters") if isinstance(parsed, dict) else None
    if not isinstance(clusters, list) or not clusters:
        raise CommandFailed(f"the kubeconfig {path} names no clusters; give the kubeconfig "
                            "of the spoke (kubectl config view --flatten --minify)")
    for entry in clusters:
        cluster = entry.get("cluster") if isinstance(entry, dict) else None
        if not isinstance(cluster, dict) or not cluster.get("server"):
            name = entry.get("name", "?") if isinstance(entry, dict) else "?"
            raise CommandFailed(f"the kubeconfig {path} has a cluster {name!r} without a "
                                "server address")
    for section, inner, field in _FILE_FIELDS:
        for entry in parsed.get(section) or []:
            body = entry.get(inner) if isinstance(entry, dict) else None
            if isinstance(body, dict) and body.get(field):
                raise CommandFailed(
                    f"the kubeconfig {path} refers to the file {body[field]} ({field}), "
                    "which the controller cannot read; embed the files with kubectl config "
                    "view --flatten --minify")
    return raw


def secret_object(name: str, *, namespace: str, key: str, kubeconfig: bytes) -> dict[str, Any]:
    """The Secret holding a spoke's kubeconfig."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": f"{name}{SECRET_SUFFIX}", "namespace": namespace,
                     "labels": {SPOKE_LABEL: name}},
        "data": {key: base64.b64encode(kubeconfig).decode()},
    }


def spoke_spec(*, secret_name: str | None, key: str, labels: Mapping[str, str],
               unschedulable: bool) -> dict[str, Any]:
    """A SpokeCluster's spec; ``secret_name`` None means the hub itself."""
    spec: dict[str, Any] = {"labels": dict(labels), "unschedulable": unschedulable}
    if secret_name is None:
        spec["local"] = True
    else:
        spec["kubeconfigSecret"] = {"name": secret_name, "key": key}
    return spec


async def _register(hub: Connection, name: str, *, spec: dict[str, Any],
                    secret: dict[str, Any] | None) -> str:
    if secret is not None:
        await _ensure_namespace(hub, secret["metadata"]["namespace"])
        await _create_or_replace_secret(hub, secret)
    created = await _create_or_update_spoke(hub, name, spec)
    verb = "registered" if created else "updated"
    labels = ", ".join(f"{k}={v}" for k, v in sorted(spec["labels"].items())) or "none"
    drain = "; unschedulable" if spec["unschedulable"] else ""
    if secret is None:
        return f"SpokeCluster {name} {verb} as the hub itself (no Secret); labels: {labels}{drain}."
    meta = secret["metadata"]
    return (f"SpokeCluster {name} {verb}: kubeconfig in Secret {meta['namespace']}/"
            f"{meta['name']} (key {spec['kubeconfigSecret']['key']}); labels: {labels}{drain}.")


async def _ensure_namespace(hub: Connection, namespace: str) -> None:
    try:
        await verbs.get(hub, NAMESPACES, namespace)
    except NotFound:
        with contextlib.suppress(AlreadyExists):
            await verbs.create(hub, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": namespace}})


async def _create_or_replace_secret(hub: Connection, secret: dict[str, Any]) -> None:
    namespace = secret["metadata"]["namespace"]
    try:
        await verbs.create(hub, SECRETS, secret, namespace=namespace)
    except AlreadyExists:
        await verbs.replace(hub, SECRETS, secret)  # no resourceVersion: unconditional


async def _create_or_update_spoke(hub: Connection, name: str, spec: dict[str, Any]) -> bool:
    """Make the SpokeCluster's spec say ``spec``; True when it was created."""
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
    try:
        await verbs.create(hub, SPOKECLUSTERS, body)
        return True
    except AlreadyExists:
        pass
    current = (await verbs.get(hub, SPOKECLUSTERS, name)).get("spec") or {}
    patch: dict[str, Any] = dict(spec)
    # A merge patch merges maps; null out what the command line no longer says.
    patch["labels"] = {**{k: None for k in current.get("labels") or {}}, **spec["labels"]}
    for field in ("local", "kubeconfigSecret"):
        if field not in spec and field in current:
            patch[field] = None
    await verbs.merge_patch(hub, SPOKECLUSTERS, name, {"spec": patch})
    return False


# -- unregister ----------------------------------------------------------------------------

def unregister(args: argparse.Namespace, *, out: IO[str] | None = None,
               err: IO[str] | None = None) -> int:
    """``mcad cluster unregister``: delete the SpokeCluster, then its Secret."""
    return _run("unregister", args,
                lambda hub: _unregister(hub, args.name, namespace=args.namespace), out, err)


async def _unregister(hub: Connection, name: str, *, namespace: str) -> str:
    secret_name = f"{name}{SECRET_SUFFIX}"
    try:
        spoke: dict[str, Any] | None = await verbs.get(hub, SPOKECLUSTERS, name)
    except NotFound as error:
        if _kind_missing(error):
            raise
        spoke = None
    if spoke is not None:
        reference = (spoke.get("spec") or {}).get("kubeconfigSecret") or {}
        secret_name = str(reference.get("name") or secret_name)
        with contextlib.suppress(NotFound):
            await verbs.delete(hub, SPOKECLUSTERS, name)
    secret_gone = await _delete_our_secret(hub, name, secret_name, namespace=namespace)
    if spoke is None and not secret_gone:
        raise CommandFailed(f"no SpokeCluster {name} is registered on the hub, and there is "
                            f"no Secret {namespace}/{secret_name} of it")
    done = [f"SpokeCluster {name} unregistered" if spoke is not None
            else f"there was no SpokeCluster {name}"]
    if secret_gone:
        done.append(f"Secret {namespace}/{secret_name} deleted")
    return "; ".join(done) + "."


async def _delete_our_secret(hub: Connection, spoke: str, secret_name: str, *,
                             namespace: str) -> bool:
    """Delete the Secret if ``register`` wrote it for ``spoke``; True when deleted."""
    try:
        secret = await verbs.get(hub, SECRETS, secret_name, namespace=namespace)
    except NotFound:
        return False
    if ((secret.get("metadata") or {}).get("labels") or {}).get(SPOKE_LABEL) != spoke:
        return False  # not ours: written by hand, perhaps shared; leave it
    try:
        await verbs.delete(hub, SECRETS, secret_name, namespace=namespace)
    except NotFound:
        return False
    return True


# -- list ------------------------------------------------------------------------------------

def list_clusters(args: argparse.Namespace, *, out: IO[str] | None = None,
                  err: IO[str] | None = None, now: datetime | None = None) -> int:
    """``mcad cluster list``: one row per SpokeCluster, sorted by name."""
    async def fetch(hub: Connection) -> str:
        items, _ = await verbs.list_all(hub, SPOKECLUSTERS)
        return table(items, now=now or datetime.now(UTC))
    return _run("list", args, fetch, out, err)


def table(spokes: list[dict[str, Any]], *, now: datetime) -> str:
    """The SpokeClusters as a kubectl-style table (or a sentence when there are none)."""
    if not spokes:
        return "No SpokeClusters are registered."
    rows = [["NAME", "READY", "REASON", "NODES", "GPUS-FREE", "AGE"]]
    for spoke in sorted(spokes, key=lambda s: str(s.get("metadata", {}).get("name", ""))):
        meta, status = spoke.get("metadata") or {}, spoke.get("status") or {}
        ready = next((c for c in status.get("conditions") or []
                      if isinstance(c, dict) and c.get("type") == "Ready"), {})
        synced = bool(status.get("lastSyncTime"))
        nodes = f"{status.get('readyNodes', 0)}/{status.get('nodes', 0)}" if synced else "-"
        rows.append([str(meta.get("name", "")), str(ready.get("status") or "-"),
                     str(ready.get("reason") or "-"), nodes,
                     _gpus_free(status) if synced else "-",
                     age(meta.get("creationTimestamp"), now=now)])
    return columns(rows)


def columns(rows: list[list[str]]) -> str:
    """Rows (the first the header) as kubectl prints them: left-aligned columns three
    spaces apart, no trailing blanks."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
                     .rstrip() for row in rows)


def _gpus_free(status: Mapping[str, Any]) -> str:
    free = status.get("free") or {}
    try:
        return format_quantity(parse_quantity(free.get(GPU, 0)), resource=GPU)
    except ValueError:
        return "-"


def age(timestamp: object, *, now: datetime) -> str:
    """How long ago ``timestamp`` (RFC 3339) was, as kubectl shows it: 45s, 12m, 5h, 3d."""
    if not isinstance(timestamp, str):
        return "-"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    return format_duration(max((now - then).total_seconds(), 0), coarse=True)


# -- talking to the hub --------------------------------------------------------------------

def _run(verb: str, args: argparse.Namespace, act: Callable[[Connection], Awaitable[str]],
         out: IO[str] | None, err: IO[str] | None) -> int:
    """Connect to the hub, ``act``, print what it says; failures become one sentence."""
    path: Path = args.hub_kubeconfig or default_kubeconfig_path()

    async def main() -> str:
        try:
            hub = await connect(path, name="hub")
        except ssl.SSLError as error:
            raise CommandFailed(f"the hub kubeconfig {path} cannot be used: its TLS "
                                f"certificates are not valid ({error.reason or error})") from None
        except BadKubeconfig as error:
            raise CommandFailed(f"the hub kubeconfig {path} cannot be used: {error}") from None
        try:
            return await act(hub)
        finally:
            await hub.close()

    try:
        message = asyncio.run(main())
    except CommandFailed as problem:
        return _fail(verb, problem, err)
    except GatewayError as error:
        return _fail(verb, CommandFailed(_hub_sentence(error, path)), err)
    print(message, file=out or sys.stdout)
    return 0


def _kind_missing(error: NotFound) -> bool:
    """A 404 for the resource type itself (CRD not installed), not for one object."""
    return error.reason != "NotFound"


def _hub_sentence(error: GatewayError, path: Path) -> str:
    if not isinstance(error, ApiError):
        return f"the hub kubeconfig {path} cannot be used: {error}"
    detail = error.message.rstrip(".")
    if isinstance(error, Unreachable):
        return (f"cannot reach the hub ({detail}); check the hub kubeconfig {path} "
                "(--hub-kubeconfig, or $KUBECONFIG)")
    if isinstance(error, NotFound) and _kind_missing(error):
        return ("the hub does not serve SpokeClusters (cluster.codeflare.dev/v1alpha1); "
                "install mcad's CRDs first: kubectl apply -k crds/")
    return f"the hub refused: {detail} (HTTP {error.status})"


def _fail(verb: str, problem: CommandFailed, err: IO[str] | None) -> int:
    print(f"mcad cluster {verb}: {str(problem).rstrip('.')}.", file=err or sys.stderr)
    return 1
