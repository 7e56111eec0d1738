"""``mcad run``: the controller process.

Connects to the hub (a kubeconfig, or the pod's service account inside a cluster),
serves /metrics (to callers RBAC allows ``get /metrics``), /healthz and /readyz,
campaigns for the leader Lease (unless ``--leader-elect=false``) and runs the controller
while it leads, until SIGINT or SIGTERM; then it stops every task, gives the Lease up so
a standby takes over at once, and closes every connection. With ``--webhook-address``
it also serves, over TLS, the admission webhook and the visibility API
(``mcad.visibility``: the queue, explanations, dry runs and the web view, reached
through the hub's API server).

Exit status: 0 after a signal; 1 for bad input (an unreadable kubeconfig, an invalid
config file, an address in use), with one sentence; 70 for a bug in mcad, with the real
traceback of every failure (never a bare "ExceptionGroup: unhandled errors").
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mcad.access import Reviews
from mcad.config import ConfigError, RunConfig, load_run_config
from mcad.controller import heap
from mcad.controller.estimator import Forecast
from mcad.controller.leader import LeaderElector, Timings, default_identity
from mcad.controller.records import AppWrapperRecord
from mcad.controller.runner import Controller
from mcad.core.cycle.snapshot import CycleResult, Snapshot
from mcad.core.placement.capacity import AppWrapperKey
from mcad.gateway.connection import (
    Connection,
    connect,
    connect_in_cluster,
    default_kubeconfig_path,
    in_cluster,
)
from mcad.gateway.errors import BadKubeconfig
from mcad.server import (
    ListenError,
    bound_port,
    is_loopback,
    parse_address,
    start_server,
    token_guard,
)
from mcad.visibility import api as visibility
from mcad.visibility.scope import Scopes
from mcad.webhook.apiservice import EXTERNAL_SERVICE, VisibilityRegistration
from mcad.webhook.certmanager import CertManager, Registration
from mcad.webhook.reviewer import PATH as WEBHOOK_PATH
from mcad.webhook.server import HubAccess, WebhookServer

EXIT_BUG = 70
log = logging.getLogger("mcad")


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not true or false")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="run the controller on a hub cluster",
        description="Watch AppWrappers, quota trees and SpokeClusters on the hub and "
                    "dispatch AppWrappers to the clusters where they fit.")
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="the hub's kubeconfig (default: $KUBECONFIG, ~/.kube/config, "
                             "or the pod's service account when run in a cluster)")
    parser.add_argument("--namespace", default=None,
                        help="where SpokeCluster Secrets and the leader Lease live "
                             "(default: the config's namespace, mcad-system)")
    parser.add_argument("--config", type=Path, default=None, help="policy file (YAML)")
    parser.add_argument("--metrics-address", default="127.0.0.1:8080",
                        help="host:port serving /metrics, /healthz and /readyz")
    parser.add_argument("--metrics-auth", type=_flag, default=True, metavar="true|false",
                        help="serve /metrics only to bearer tokens of users allowed `get` "
                             "on /metrics (TokenReview and SubjectAccessReview on the hub); "
                             "false is allowed on a loopback address only, for local use "
                             "(default: true)")
    parser.add_argument("--health-address", default=None,
                        help="a separate host:port for /healthz and /readyz")
    parser.add_argument("--leader-elect", type=_flag, default=True, metavar="true|false",
                        help="campaign for the Lease 'mcad' and dispatch only while holding "
                             "it (default: true)")
    parser.add_argument("--webhook-address", default=None, metavar="HOST:PORT",
                        help="serve, over TLS on this address, the AppWrapper admission "
                             "webhook and the visibility API (reached through the hub's "
                             "API server)")
    parser.add_argument("--webhook-url", default=None, metavar="URL",
                        help="the URL the API server calls the webhook at: mcad creates and "
                             "updates the ValidatingWebhookConfiguration 'mcad' with it, "
                             "and registers the visibility API at the same address")
    parser.add_argument("--webhook-service", default=None, metavar="NAMESPACE/NAME",
                        help="the Service the manifests' ValidatingWebhookConfiguration "
                             "names: mcad keeps its caBundle current")
    parser.add_argument("--visibility-url", default=None, metavar="URL",
                        help="register the visibility API (APIService "
                             "v1alpha1.visibility.codeflare.dev) at this https://HOST:PORT "
                             "alone, without the admission webhook")
    parser.add_argument("--visibility-service", default=None, metavar="NAMESPACE/NAME",
                        help="the Service the manifests' APIService names: mcad keeps its "
                             "caBundle current and, in a pod ($POD_IP), points its "
                             "EndpointSlice at the leader")
    parser.add_argument("--conversion-address", default=None, metavar="HOST:PORT",
                        help="serve the AppWrapper CRD's conversion webhook from a process "
                             "of its own on this address (with --webhook-address's "
                             "certificate), so the dispatch cycle never delays the hub's "
                             "v1beta2 reads; the CRD is pointed at it (the --webhook-url's "
                             "host at this port, or the --webhook-service's port 8443)")
    parser.add_argument("--webhook-host", action="append", default=[], metavar="NAME",
                        help="another DNS name or IP the serving certificate must carry")
    parser.add_argument("--local", action="store_true",
                        help="also dispatch to the hub itself, as cluster 'local' "
                             "(single-cluster mode without a SpokeCluster object)")
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(command=run_command)


def run_command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_run_config(args.config)
    except ConfigError as err:
        print(f"mcad run: {err}", file=sys.stderr)
        return 1
    if args.namespace:
        config = config.model_copy(update={"namespace": args.namespace})
    kubeconfig: Path | None = args.kubeconfig
    if kubeconfig is None:
        default = default_kubeconfig_path()
        kubeconfig = None if in_cluster() and not default.exists() else default
    try:
        return asyncio.run(_run(kubeconfig, config, args))
    except BadKubeconfig as err:
        where = f"the hub kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster config"
        print(f"mcad run: {where} cannot be used: {err}", file=sys.stderr)
        return 1
    except ListenError as err:
        print(f"mcad run: {err}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        for error in _leaves(group):
            log.critical("mcad stopped on a bug", exc_info=error)
        return EXIT_BUG
    except Exception:
        log.critical("mcad stopped on a bug", exc_info=True)
        return EXIT_BUG


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    for error in group.exceptions:
        out.extend(_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    return out


def _service(flag: str, value: str | None, example: str) -> tuple[str, str] | None:
    if not value:
        return None
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name:
        raise ListenError(f"{flag} {value!r} is not NAMESPACE/NAME, e.g. {example}")
    return namespace, name


def _registration(args: argparse.Namespace, config: RunConfig) -> Registration | None:
    """How the API server reaches the webhook and the visibility API, from the flags
    (None: not mcad's job)."""
    service = _service("--webhook-service", args.webhook_service, "mcad-system/mcad-webhook")
    url = webhook_url(args.webhook_url) if args.webhook_url else ""
    visibility_service = _service("--visibility-service", args.visibility_service,
                                  "mcad-system/mcad-visibility")
    found: VisibilityRegistration | None = None
    if args.visibility_url or url:
        base = https_base("--visibility-url", args.visibility_url) if args.visibility_url \
            else https_base("--webhook-url", url)
        found = VisibilityRegistration(
            visibility_service or (config.namespace, EXTERNAL_SERVICE), url=base)
    elif visibility_service is not None:
        found = VisibilityRegistration(visibility_service)
    if found is not None and not args.webhook_address:
        raise ListenError("the visibility API is served on --webhook-address: give one "
                          "(e.g. :9443, or 127.0.0.1:9443 outside a cluster)")
    conversion_port: int | None = None
    if args.conversion_address:
        if not args.webhook_address:
            raise ListenError("--conversion-address serves with the webhook's certificate: "
                              "give --webhook-address too (e.g. :9443 and :9444)")
        conversion_port = parse_address(args.conversion_address)[1]
        if not conversion_port:
            raise ListenError(f"--conversion-address {args.conversion_address!r} needs a "
                              "port other than 0: the CRD is pointed at it")
    if not url and service is None and found is None:
        return None
    return Registration(url=url, service=service, extra_hosts=tuple(args.webhook_host),
                        visibility=found, conversion_port=conversion_port)


def https_base(flag: str, given: str) -> str:
    """``https://HOST:PORT`` from a URL the API server is to call (its path aside)."""
    parsed = urlparse(given)
    if parsed.scheme != "https" or not parsed.hostname:
        raise ListenError(f"{flag} {given!r} is not an https:// URL")
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    return f"https://{host}:{parsed.port or 443}"


def webhook_url(given: str) -> str:
    """The URL the API server is told to call, from ``--webhook-url``.

    mcad serves its webhook at one path only, so a URL without a path
    (``https://HOST:PORT``) gets that path added: registered as given, the API server
    would call ``/`` and every AppWrapper create would fail. A URL whose path ends with
    it (behind a proxy that adds a prefix) is kept; any other path is refused with a
    sentence before anything is registered.
    """
    parsed = urlparse(given)
    if parsed.scheme != "https" or not parsed.hostname:
        raise ListenError(f"--webhook-url {given!r} is not an https:// URL")
    if parsed.query or parsed.fragment:
        raise ListenError(f"--webhook-url {given!r} has a query or fragment; give "
                          f"https://HOST:PORT{WEBHOOK_PATH}")
    path = parsed.path.rstrip("/")
    if not path:
        return parsed._replace(path=WEBHOOK_PATH).geturl()
    if path.endswith(WEBHOOK_PATH):
        return parsed._replace(path=path).geturl()
    raise ListenError(f"--webhook-url {given!r} ends in {parsed.path!r}, but mcad serves "
                      f"its webhook at {WEBHOOK_PATH}: give https://HOST:PORT{WEBHOOK_PATH}, "
                      "or the URL without a path")


async def _connect_hub(kubeconfig: Path | None, name: str) -> Connection:
    if kubeconfig is None:
        return connect_in_cluster(name=name)
    return await connect(kubeconfig, name=name)


class _Stopped(Exception):
    """SIGINT or SIGTERM: the root task group ends."""


async def _run(kubeconfig: Path | None, config: RunConfig, args: argparse.Namespace) -> int:
    heap.tune()
    hub = await _connect_hub(kubeconfig, "hub")
    # The Lease is renewed on a connection of its own, as client-go's leader election
    # does, so a renewal never waits for a pooled connection behind the reconcilers'
    # writes (with 10,000 dispatches queued the leader lost its Lease twice a minute).
    lease_hub = await _connect_hub(kubeconfig, "hub") if args.leader_elect else None
    elector = LeaderElector(lease_hub, namespace=config.namespace,
                            identity=default_identity(), timings=Timings(),
                            renewer=lambda: _connect_hub(kubeconfig, "hub-lease"),
                            ) if lease_hub is not None else None
    current: list[Controller] = []
    registration = _registration(args, config)
    if not args.metrics_auth and not is_loopback(args.metrics_address):
        raise ListenError(f"--metrics-auth=false serves /metrics to anyone who reaches "
                          f"{args.metrics_address}: allowed on a loopback address only "
                          "(127.0.0.1:PORT)")
    reviews = Reviews(hub)

    registering: list[CertManager] = []
    """The leader's certificate and registration task, while it leads."""

    def readiness() -> tuple[bool, str]:
        if webhook is not None and not webhook.serving.is_set():
            return False, "the admission webhook has no certificate yet (the leader issues " \
                          "it into Secret mcad-webhook-tls)"
        if webhook is not None and webhook.converter is not None and \
                not webhook.converter.listening:
            return False, "the conversion webhook's process does not listen on " \
                          f"{webhook.converter.address} yet"
        if elector is not None and not elector.leading:
            return True, f"standby: the Lease {elector.namespace}/{elector.name} is held by " \
                         f"{elector.holder or 'nobody yet'}"
        if not current:
            return False, ""
        if registering and not registering[0].registered:
            return False, ("registering the webhooks and the visibility API with the hub "
                           "(the leader's first pass)")
        if current[0].ready():
            return True, "ready"
        return False, current[0].not_ready_reason()

    async def lead() -> None:
        registering.clear()
        if registration is not None:
            registering.append(CertManager(
                hub=hub, namespace=config.namespace, registration=registration,
                issued=webhook.reload_soon if webhook else lambda: None,
                pod_ip=os.environ.get("POD_IP") or None,
                port=lambda: webhook.port if webhook else 0))
        extra = [("webhook certificates", registering[0].run)] if registering else []
        controller = Controller(hub=hub, config=config, local=args.local,
                                workers=config.workers,
                                connect_hub=lambda name: _connect_hub(kubeconfig, name),
                                fence=elector.fence if elector is not None else None,
                                extra_tasks=extra, on_listed=heap.settle)
        current.append(controller)
        try:
            await controller.run()
        finally:
            current.remove(controller)

    def last_cycle() -> tuple[Snapshot, CycleResult] | str:
        if elector is not None and not elector.leading:
            return (f"this replica is on standby; the leader is "
                    f"{elector.holder or 'not elected yet'}")
        last = current[0].dispatcher.last if current else None
        return last if last is not None else "the controller has not run a cycle yet"

    def plan() -> Forecast | None:
        return current[0].estimator.forecast if current else None

    def conditions(key: AppWrapperKey) -> list[dict[str, Any]] | None:
        rec = current[0].state.appwrappers.get(key) if current else None
        return list(rec.status.get("conditions") or []) if rec is not None else None

    async def dry_plan(snapshot: Snapshot, result: CycleResult,
                       candidate: AppWrapperRecord) -> tuple[datetime | None, str]:
        if not current:
            return None, "no estimate: the controller is not running"
        return await current[0].estimator.dry_run(snapshot, result, candidate)

    webhook: WebhookServer | None = None
    if args.webhook_address:
        api = visibility.application(
            last=last_cycle, plan=plan, config=config, conditions=conditions,
            dry_plan=dry_plan, scopes=Scopes(reviews),
            front_proxy=lambda: webhook.front_proxy if webhook is not None else None)
        webhook = WebhookServer(hub=hub, config=config, address=args.webhook_address,
                                mounted=[("/apis", api)],
                                conversion_address=args.conversion_address,
                                hub_access=HubAccess(kubeconfig))

    guard = token_guard(reviews) if args.metrics_auth else None
    runners = []
    try:
        runners.append(await start_server(args.metrics_address, ready=readiness,
                                          guard=guard))
        if args.health_address:
            runners.append(await start_server(args.health_address, ready=readiness,
                                              guard=guard))
        log.info("serving metrics on port %d", bound_port(runners[0]))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        async def work() -> None:
            await (elector.run(lead) if elector is not None else lead())
            stop.set()  # the controller ended on its own: so does the process

        async def until_stopped() -> None:
            await stop.wait()
            raise _Stopped

        # One root: the leader election (and under it the controller), the webhook and
        # the stop signal are its tasks; the first to end the process cancels the rest,
        # and an error in any of them is raised here, never lost in a stray task.
        try:
            async with asyncio.TaskGroup() as root:
                root.create_task(work(), name="leader election" if elector else "controller")
                if webhook is not None:
                    root.create_task(webhook.run(), name="webhook")
                root.create_task(until_stopped(), name="stop signal")
        except* _Stopped:
            pass
        except* Exception as failed:
            raise failed.exceptions[0] from None
        finally:
            if elector is not None:
                await elector.release()
        log.info("stopped")
        return 0
    finally:
        for runner in runners:
            await runner.cleanup()
        await hub.close()
        if lease_hub is not None:
            await lease_hub.close()
