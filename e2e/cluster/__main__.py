"""python -m e2e.cluster up | down | status | build | pause | resume | restart: the test
bed's command line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from e2e.cluster import faults
from e2e.cluster.build import BuildError, build
from e2e.cluster.launcher import TestbedError, down, status, up
from e2e.cluster.supervisor import supervise
from e2e.cluster.topology import TestbedSpec


def _spec_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, required=True,
                        help="where state, kubeconfigs and logs go")
    parser.add_argument("--spokes", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=4, help="fake nodes per spoke")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--cpu-per-node", default="32")
    parser.add_argument("--memory-per-node", default="256Gi")
    parser.add_argument("--pods-per-node", type=int, default=110)
    parser.add_argument("--hub-nodes", type=int, default=0, help="fake nodes on the hub too")
    parser.add_argument("--taint", action="store_true",
                        help="taint fake nodes kwok.x-k8s.io/node=fake:NoSchedule")
    parser.add_argument("--topology", default="",
                        help="label each spoke's nodes in blocks and racks, e.g. "
                             "block=2,rack=2 (labels mcad.test/block, mcad.test/rack)")


def _spec(args: argparse.Namespace) -> TestbedSpec:
    return TestbedSpec(spokes=args.spokes, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                       cpu_per_node=args.cpu_per_node, memory_per_node=args.memory_per_node,
                       pods_per_node=args.pods_per_node, hub_nodes=args.hub_nodes,
                       taint=args.taint, topology=args.topology)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _spec_parser(sub.add_parser("up", help="start a hub and N spokes with fake GPU nodes"))
    for name in ("down", "status"):
        sub.add_parser(name).add_argument("--dir", type=Path, required=True)
    sub.add_parser("build", help="build or reuse the binaries; print their folder")
    for name, what in (("pause", "freeze a cluster's API server (clients hang, as in a "
                                 "partition)"),
                       ("resume", "thaw a paused API server"),
                       ("restart", "kill a cluster's API server and start it again on the "
                                   "same etcd data")):
        fault = sub.add_parser(name, help=what)
        fault.add_argument("--dir", type=Path, required=True)
        fault.add_argument("--cluster", required=True, help="hub, spoke-1, ...")
    sup = sub.add_parser("_supervise")  # internal: the process that owns the components
    _spec_parser(sup)
    sup.add_argument("--owner-pid", type=int, default=0)
    sup.add_argument("--owner-for-life", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            state = up(args.dir, _spec(args), log=lambda m: print(m, file=sys.stderr))
            print(f"test bed up in {state.up_seconds}s: "
                  + ", ".join(f"{c.name} ({c.kubeconfig})" for c in state.clusters))
        elif args.command == "down":
            killed = down(args.dir)
            print("test bed down" + (f"; killed {', '.join(killed)}" if killed else ""))
        elif args.command == "status":
            print(status(args.dir))
        elif args.command == "build":
            print(build(log=lambda m: print(m, file=sys.stderr)).bin)
        elif args.command == "pause":
            faults.pause(args.dir, args.cluster)
            print(f"{args.cluster}: API server paused")
        elif args.command == "resume":
            faults.resume(args.dir, args.cluster)
            print(f"{args.cluster}: API server resumed")
        elif args.command == "restart":
            took = faults.restart(args.dir, args.cluster)
            print(f"{args.cluster}: API server restarted, answering again after {took:.1f}s")
        else:
            return supervise(args.dir.resolve(), _spec(args), owner_pid=args.owner_pid,
                             owner_for_life=args.owner_for_life)
    except (TestbedError, BuildError, faults.FaultError) as err:
        print(f"e2e.cluster: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: everything started was stopped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GOTOOLCHAIN", "local")
    sys.exit(main())
