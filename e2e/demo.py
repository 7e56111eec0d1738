"""``make demo``: the whole of mcad on the built-in test bed, start to finish.

Brings up a hub and 2 spokes x 4 nodes x 8 GPUs, installs the CRDs, registers the
spokes (spoke-1 as zone=east), applies the example quota tree, starts ``mcad run``,
submits the AppWrappers in examples/ plus a few more 8-GPU jobs so some must wait,
prints a live table of their states until every one has finished, prints a
summary, and tears everything down (also on Ctrl-C or error). It exits 1 unless every
AppWrapper Completed; ``make test`` runs it with ``--quick`` (3 s pods) so the README's
first command can never break unnoticed.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.build import artifacts
from e2e.cluster.launcher import down, up
from e2e.cluster.topology import TestbedSpec, TestbedState, free_ports
from mcad.gateway import refs, verbs
from mcad.gateway.connection import connect

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
JOBS = ("train-1gpu", "train-2gpu-east", "train-8gpu", "train-32gpu-gang", "gang-podgroup")
EXTRA = 6  # more 8-GPU jobs at assorted priorities: with the rest they exceed the quota
TIMEOUT_S = 600


def say(message: str) -> None:
    print(f"\033[1m==> {message}\033[0m" if sys.stdout.isatty() else f"==> {message}",
          flush=True)


def kubectl(state: TestbedState, cluster: str, *args: str, stdin: str | None = None) -> str:
    kubeconfig = next(c.kubeconfig for c in state.clusters if c.name == cluster)
    proc = subprocess.run([str(artifacts().path("kubectl")), "--kubeconfig", kubeconfig, *args],
                          input=stdin, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def mcad(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "mcad.cli", *args], cwd=REPO,
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"mcad {' '.join(args)} failed: {proc.stderr.strip()}")
    print("   " + proc.stdout.strip().replace("\n", "\n   "))


def appwrappers(*, runtime: str | None = None) -> list[dict[str, Any]]:
    """The examples' AppWrappers plus ``EXTRA`` 8-GPU ones; ``runtime`` replaces the
    examples' pod runtime on the test bed (``--quick``: the same run, shorter pods)."""
    docs = []
    for name in JOBS:
        text = (EXAMPLES / f"{name}.yaml").read_text()
        if runtime is not None:
            text = text.replace('mcad.test/runtime: "20s"', f'mcad.test/runtime: "{runtime}"')
        docs += [d for d in yaml.safe_load_all(text) if d]
    base = next(d for d in docs if d["metadata"]["name"] == "train-8gpu")
    for i in range(EXTRA):
        extra = copy.deepcopy(base)
        extra["metadata"]["name"] = f"train-8gpu-{i + 1}"
        extra["spec"]["priority"] = i % 3
        for item in extra["spec"]["resources"]["GenericItems"]:
            item["generictemplate"]["metadata"]["name"] = f"train-8gpu-{i + 1}"
        docs.append(extra)
    return docs


def row(aw: dict[str, Any]) -> tuple[str, ...]:
    status = aw.get("status") or {}
    queued = [c for c in status.get("conditions") or [] if c.get("type") == "Queued"
              and c.get("status") == "True"]
    why = queued[0].get("reason", "") if queued and status.get("state") == "Pending" else ""
    pods = f"{status.get('running', 0)}/{status.get('Succeeded', 0)}"
    return (aw["metadata"]["name"], str(aw["spec"].get("priority", 0)),
            status.get("state") or "-", status.get("clusterName") or "-",
            str(status.get("numberOfRequeueings", 0)), pods, why)


def table(rows: list[tuple[str, ...]]) -> str:
    head = ("APPWRAPPER", "PRIO", "STATE", "CLUSTER", "REQUEUES", "RUN/DONE", "WAITING FOR")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
                     for r in [head, *rows])


async def follow(state: TestbedState, names: list[str]) -> list[dict[str, Any]]:
    hub = await connect(Path(next(c.kubeconfig for c in state.clusters if c.name == "hub")),
                        name="hub")
    try:
        started, printed = time.monotonic(), 0
        while True:
            items, _ = await verbs.list_all(hub, refs.APPWRAPPERS, namespace="default")
            mine = sorted((i for i in items if i["metadata"]["name"] in names),
                          key=lambda i: i["metadata"]["name"])
            text = table([row(i) for i in mine])
            if sys.stdout.isatty() and printed:
                print(f"\033[{printed}A\033[J", end="")
            elif printed:
                print()
            print(text, flush=True)
            printed = text.count("\n") + 1
            states = [(i.get("status") or {}).get("state") for i in mine]
            if len(mine) == len(names) and all(s in ("Completed", "Failed") for s in states):
                return mine
            if time.monotonic() - started > TIMEOUT_S:
                raise SystemExit(f"not finished after {TIMEOUT_S}s")
            await asyncio.sleep(2 if sys.stdout.isatty() else 5)
    finally:
        await hub.close()


def summary(finished: list[dict[str, Any]], wall: float) -> str:
    def at(value: str) -> datetime:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))

    lines, waits = [], []
    for aw in finished:
        status = aw.get("status") or {}
        created = at(aw["metadata"]["creationTimestamp"])
        first = status.get("controllerfirstdispatchtimestamp")
        wait = (at(first) - created).total_seconds() if first else float("nan")
        waits.append(wait)
        lines.append(f"  {aw['metadata']['name']:18} {status.get('state'):10} on "
                     f"{status.get('clusterName') or '-':8} waited {wait:5.0f}s in the queue, "
                     f"requeued {status.get('numberOfRequeueings', 0)} times")
    states = Counter((a.get("status") or {}).get("state") for a in finished)
    # Where the Completed ones ran: a Failed AppWrapper is never counted as dispatched
    # (one refused after its dispatch was written names no cluster any more).
    clusters = Counter((a.get("status") or {}).get("clusterName") or "-" for a in finished
                       if (a.get("status") or {}).get("state") == "Completed")
    failed = [f"  {a['metadata']['name']} failed: {failure(a)}" for a in finished
              if (a.get("status") or {}).get("state") != "Completed"]
    known = [w for w in waits if not math.isnan(w)]  # (NaN: never dispatched)
    return "\n".join([
        f"{len(finished)} AppWrappers in {wall:.0f}s: "
        + ", ".join(f"{n} {s}" for s, n in sorted(states.items())),
        "completed on: " + (", ".join(f"{c} {n}" for c, n in sorted(clusters.items()))
                            or "none"),
        f"longest queue wait {max(known, default=0):.0f}s (the ones that had to wait for "
        "GPUs or quota)",
        *lines, *failed])


def failure(aw: dict[str, Any]) -> str:
    """The reason and sentence of a Failed AppWrapper's Failed condition."""
    for cond in (aw.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return f"{cond.get('reason')}: {cond.get('message')}"
    return str((aw.get("status") or {}).get("message") or "no reason given")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="the same demo with 3 s pods instead of 20 s (make test runs it)")
    args = parser.parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="mcad-demo-"))
    controller: subprocess.Popen[bytes] | None = None
    try:
        say("bringing up the test bed: hub + 2 spokes x 4 nodes x 8 GPUs (first run builds "
            "Kubernetes from the Go module proxy)")
        state = up(directory, TestbedSpec(spokes=2, nodes=4, gpus_per_node=8),
                   owner_for_life=True, log=lambda m: print("   " + m, flush=True))
        print(f"   up in {state.up_seconds}s; kubeconfigs in {directory}")
        hub_kubeconfig = next(c.kubeconfig for c in state.clusters if c.name == "hub")
        say("installing the CRDs on the hub")
        kubectl(state, "hub", "apply", "-k", str(REPO / "crds"))
        kubectl(state, "hub", "wait", "--for=condition=Established", "--timeout=60s",
                "crd/appwrappers.workload.codeflare.dev")
        say("registering the spokes")
        for spoke, zone in (("spoke-1", "east"), ("spoke-2", "west")):
            kubeconfig = next(c.kubeconfig for c in state.clusters if c.name == spoke)
            mcad("cluster", "register", spoke, "--kubeconfig", kubeconfig, "--label",
                 f"zone={zone}", "--hub-kubeconfig", hub_kubeconfig)
        say("applying the quota tree examples/quota-tree.yaml (root 48 GPUs)")
        kubectl(state, "hub", "apply", "-f", str(EXAMPLES / "quota-tree.yaml"))
        say("starting mcad run")
        port, tls = free_ports(2)
        log = (directory / "mcad-run.log").open("wb")
        controller = subprocess.Popen(
            [sys.executable, "-m", "mcad.cli", "run", "--kubeconfig", hub_kubeconfig,
             "--metrics-address", f"127.0.0.1:{port}", "--metrics-auth=false",
             "--webhook-address", f"127.0.0.1:{tls}",
             "--visibility-url", f"https://127.0.0.1:{tls}"], cwd=REPO, stdout=log,
            stderr=subprocess.STDOUT)
        print(f"   metrics on http://127.0.0.1:{port}/metrics; log {log.name}")
        print(f"   the queue: mcad queue -A --kubeconfig {hub_kubeconfig}; the web view: "
              f"kubectl --kubeconfig {hub_kubeconfig} proxy, then http://127.0.0.1:8001"
              "/apis/visibility.codeflare.dev/v1alpha1/views/page")
        docs = appwrappers(runtime="3s" if args.quick else None)
        say(f"submitting {len(docs)} AppWrappers of 1 to 32 GPUs (64 GPUs and a 48-GPU "
            "quota: some must wait)")
        started = time.monotonic()
        kubectl(state, "hub", "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        finished = asyncio.run(follow(state, [d["metadata"]["name"] for d in docs]))
        say("summary")
        print(summary(finished, time.monotonic() - started))
        failed = [a for a in finished if (a.get("status") or {}).get("state") != "Completed"]
        return 1 if failed else 0
    except KeyboardInterrupt:
        print("interrupted")
        return 130
    finally:
        say("tearing down")
        if controller is not None:
            controller.terminate()
            try:
                controller.wait(timeout=20)
            except subprocess.TimeoutExpired:
                controller.kill()
        down(directory)
        print("   done: nothing left running")


if __name__ == "__main__":
    sys.exit(main())
