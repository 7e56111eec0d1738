"""``mcad run``: the controller process.

Connects to the hub, serves /metrics, /healthz and /readyz, and runs the controller
until SIGINT or SIGTERM, then stops every task and closes every connection. Bad
input (an unreadable kubeconfig, an invalid config file, an address in use) ends
with one sentence and exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from mcad.config import ConfigError, RunConfig, load_run_config
from mcad.controller.runner import Controller
from mcad.gateway.connection import connect, default_kubeconfig_path
from mcad.gateway.errors import BadKubeconfig
from mcad.server import bound_port, start_server


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="run the controller on a hub cluster",
        description="Watch AppWrappers, quota trees and SpokeClusters on the hub and "
                    "dispatch AppWrappers to the clusters where they fit.")
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="the hub's kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--namespace", default=None,
                        help="where SpokeCluster Secrets live (default: mcad-system)")
    parser.add_argument("--config", type=Path, default=None, help="policy file (YAML)")
    parser.add_argument("--metrics-address", default="127.0.0.1:8080",
                        help="host:port serving /metrics, /healthz and /readyz")
    parser.add_argument("--health-address", default=None,
                        help="a separate host:port for /healthz and /readyz")
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
    kubeconfig = args.kubeconfig or default_kubeconfig_path()
    try:
        return asyncio.run(_run(kubeconfig, config, args.metrics_address, args.health_address))
    except BadKubeconfig as err:
        print(f"mcad run: the hub kubeconfig {kubeconfig} cannot be used: {err}",
              file=sys.stderr)
        return 1
    except OSError as err:
        print(f"mcad run: cannot serve on {args.metrics_address}: {err.strerror}",
              file=sys.stderr)
        return 1


async def _run(kubeconfig: Path, config: RunConfig, metrics_address: str,
               health_address: str | None) -> int:
    hub = await connect(kubeconfig, name="hub")
    controller = Controller(hub=hub, hub_kubeconfig=kubeconfig, config=config)
    runners = [await start_server(metrics_address, ready=controller.ready)]
    if health_address:
        runners.append(await start_server(health_address, ready=controller.ready))
    logging.getLogger("mcad").info("serving metrics on port %d", bound_port(runners[0]))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(controller.run(), name="controller")
    stopper = asyncio.create_task(stop.wait(), name="stop signal")
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, stopper):
            pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for runner in runners:
            await runner.cleanup()
        await hub.close()
    return 0
