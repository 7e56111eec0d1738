"""``mcad queue`` and ``mcad explain``: where an AppWrapper stands and why it waits.

Both ask the leading controller (``mcad.visibility``), which answers from its last
dispatch cycle, so what they print is what the dispatcher decided, never a second
opinion. The controller is reached at ``--controller URL`` (or $MCAD_CONTROLLER), e.g.
after ``kubectl port-forward``; without it, the leader Lease on the hub says where the
leader answers: a URL when it runs outside the hub (``mcad run`` on a laptop or a
machine of its own), or its pod, reached through the API server's pod proxy
(``pods/proxy`` get in the controller's namespace is the right that needs).

Exit status: 0 answered, 1 the controller could not answer (the sentence says why),
2 the command line is wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import yaml

from mcad.cli.cluster import age, columns
from mcad.controller.leader import CONTROLLER_POD_ANNOTATION, CONTROLLER_URL_ANNOTATION
from mcad.gateway.connection import connect, default_kubeconfig_path
from mcad.gateway.errors import ApiError, GatewayError

LEASE = "mcad"
METRICS_PORT = 8080


class NoAnswer(Exception):
    """The controller could not be asked or did not answer; the message says why."""


def add_parser(subparsers: Any) -> None:
    queue = subparsers.add_parser(
        "queue", help="list waiting AppWrappers in the order the dispatcher considers them",
        description="The queued AppWrappers in the order the last dispatch cycle considered "
                    "them, with why each waits.")
    scope = queue.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", default="default", help="namespace (default: "
                       "default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true")
    queue.add_argument("-o", "--output", choices=("wide", "json"), default=None)
    _controller_flags(queue)
    queue.set_defaults(command=run_queue)

    explain = subparsers.add_parser(
        "explain", help="why an AppWrapper waits: each check, each cluster, what is ahead",
        description="Take one AppWrapper through the dispatcher's checks, in the order it "
                    "applies them, and say why each cluster does not take it now. With -f, "
                    "a dry run for an AppWrapper not yet submitted.")
    explain.add_argument("name", nargs="?", help="the AppWrapper (omit with -f)")
    explain.add_argument("-n", "--namespace", default="default")
    explain.add_argument("-f", "--filename", type=Path,
                         help="an AppWrapper manifest to try without submitting it")
    explain.add_argument("-o", "--output", choices=("json",), default=None)
    _controller_flags(explain)
    explain.set_defaults(command=run_explain)


def _controller_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--controller", default=os.environ.get("MCAD_CONTROLLER"),
                        help="URL of the controller's metrics address (default: "
                             "$MCAD_CONTROLLER, else the leader's pod through the hub)")
    parser.add_argument("--hub-kubeconfig", "--kubeconfig", type=Path, default=None,
                        dest="hub_kubeconfig", metavar="FILE",
                        help="kubeconfig of the hub (default: $KUBECONFIG, else "
                             "~/.kube/config); --kubeconfig as kubectl spells it, so "
                             "`kubectl mcad queue --kubeconfig F` means what it says")
    parser.add_argument("--context", default=None,
                        help="the kubeconfig context of the hub (default: its current one)")
    parser.add_argument("--controller-namespace", default="mcad-system",
                        help="namespace of the controller and its Lease (default: "
                             "mcad-system)")


# -- mcad queue ---------------------------------------------------------------------------

def run_queue(args: argparse.Namespace, *, out: IO[str] | None = None,
              err: IO[str] | None = None, now: datetime | None = None) -> int:
    params = {} if args.all_namespaces else {"namespace": args.namespace}
    try:
        answer = ask(args, "GET", "/queue", params)
    except NoAnswer as problem:
        print(f"mcad queue: {problem}", file=err or sys.stderr)
        return 1
    stdout = out or sys.stdout
    if args.output == "json":
        print(json.dumps(answer, indent=2), file=stdout)
        return 0
    print(queue_table(answer.get("items") or [], wide=args.output == "wide",
                      now=now or datetime.now(UTC)), file=stdout)
    return 0


def queue_table(items: list[dict[str, Any]], *, wide: bool, now: datetime) -> str:
    if not items:
        return "No AppWrappers are waiting."
    head = ["POSITION", "NAMESPACE", "NAME", "PRIORITY", "QUOTA NODE", "DEMAND", "WAITING",
            "ESTIMATED START", "REASON"] + (["MESSAGE"] if wide else [])
    rows = [head]
    for item in items:
        rows.append([str(item["position"]), item["namespace"], item["name"],
                     str(item["priority"]), ",".join(item.get("quota") or []) or "-",
                     item["demand"], age(item.get("waitingSince"), now=now),
                     estimated(item.get("estimatedStart"), now=now), item["reason"]]
                    + ([item.get("message", "")] if wide else []))
    return columns(rows)


def estimated(start: str | None, *, now: datetime) -> str:
    """``in 14m (15:02)``: how soon, and the time of day (UTC); ``-`` when there is no
    estimate, ``now`` when it is due."""
    moment = parse_moment(start)
    if moment is None:
        return "-"
    seconds = (moment - now).total_seconds()
    if seconds <= 0:
        return "now"
    if seconds < 120:
        soon = f"{int(seconds)}s"
    elif seconds < 7200:
        soon = f"{int(seconds // 60)}m"
    elif seconds < 172800:
        soon = f"{int(seconds // 3600)}h"
    else:
        soon = f"{int(seconds // 86400)}d"
    return f"in {soon} ({moment.strftime('%H:%M')})"


def parse_moment(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# -- mcad explain ---------------------------------------------------------------------------

def run_explain(args: argparse.Namespace, *, out: IO[str] | None = None,
                err: IO[str] | None = None) -> int:
    if bool(args.name) == bool(args.filename):
        print("mcad explain: give an AppWrapper's name, or -f FILE for a dry run, not both",
              file=err or sys.stderr)
        return 2
    try:
        if args.filename:
            try:
                body = yaml.safe_load(args.filename.read_text())
            except (OSError, yaml.YAMLError) as problem:
                raise NoAnswer(f"cannot read {args.filename}: {problem}") from None
            answer = ask(args, "POST", "/explain", {"namespace": args.namespace}, body=body)
        else:
            answer = ask(args, "GET", "/explain",
                         {"namespace": args.namespace, "name": args.name})
    except NoAnswer as problem:
        print(f"mcad explain: {problem}", file=err or sys.stderr)
        return 1
    print(json.dumps(answer, indent=2) if args.output == "json" else explanation_text(answer),
          file=out or sys.stdout)
    return 0


def explanation_text(answer: dict[str, Any]) -> str:
    what = "Would be" if answer.get("dryRun") else "Is"
    position = f", position {answer['position']}" if answer.get("position") else ""
    lines = [f"AppWrapper {answer['key']}{' (dry run)' if answer.get('dryRun') else ''}: "
             f"{answer['outcome']}{position}",
             f"  {what}: {answer['message']}"]
    if answer.get("checks"):
        lines.append("Checks, in the order the dispatcher applies them:")
        lines += [f"  {'ok  ' if c['ok'] else 'NO  '}{c['step']}: {c['detail']}"
                  for c in answer["checks"]]
    if answer.get("clusters"):
        lines.append("Clusters:")
        width = max(len(c["cluster"]) for c in answer["clusters"])
        for c in answer["clusters"]:
            lines.append(f"  {c['cluster'].ljust(width)}  {'fits' if c['ok'] else 'no  '}  "
                         f"{c['detail']}")
            lines += [f"  {''.ljust(width)}    {'fits' if d['ok'] else 'no  '}  "
                      f"{d['domain']}: {d['detail']}" for d in c.get("domains") or ()]
    ahead = answer.get("ahead") or []
    if ahead:
        shown = ", ".join(ahead[:10]) + (f" and {len(ahead) - 10} more" if len(ahead) > 10
                                         else "")
        lines.append(f"Ahead of it ({len(ahead)}): {shown}")
    if answer.get("outcome") not in ("Running", "Dispatched"):
        start = answer.get("estimated_start")
        lines.append(f"Estimated start: {start} ({answer['estimate_basis']})" if start
                     else f"Estimated start: {answer.get('estimate_basis') or 'unknown'}")
    lines.append(f"(as of the dispatch cycle at {answer.get('cycle', '?')})")
    return "\n".join(lines)


# -- asking the controller ----------------------------------------------------------------

def ask(args: argparse.Namespace, method: str, path: str, params: dict[str, str], *,
        body: Any = None) -> dict[str, Any]:
    """The controller's JSON answer, or ``NoAnswer`` with a sentence."""
    if args.controller:
        return _ask_url(args.controller, method, path, params, body)
    return asyncio.run(_ask_through_hub(args, method, path, params, body))


def _ask_url(base: str, method: str, path: str, params: dict[str, str],
             body: Any, *, hint: str = "is `kubectl port-forward` running, or is "
                                       "--controller right?") -> dict[str, Any]:
    url = base.rstrip("/") + path + ("?" + urllib.parse.urlencode(params) if params else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as error:
        raise NoAnswer(_refusal(error.code, error.read())) from None
    except (urllib.error.URLError, OSError) as error:
        raise NoAnswer(f"cannot reach the controller at {base} ({error}); {hint}") from None


async def _ask_through_hub(args: argparse.Namespace, method: str, path: str,
                           params: dict[str, str], body: Any) -> dict[str, Any]:
    kubeconfig = args.hub_kubeconfig or default_kubeconfig_path()
    try:
        hub = await connect(kubeconfig, name="hub", context=args.context)
    except GatewayError as error:
        raise NoAnswer(f"the hub kubeconfig {kubeconfig} cannot be used: {error}") from None
    namespace = args.controller_namespace
    try:
        try:
            lease = await hub.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/"
                                             f"{namespace}/leases/{LEASE}")
        except ApiError as error:
            raise NoAnswer(f"cannot read the leader Lease {namespace}/{LEASE} on the hub "
                           f"({error.message}); is mcad installed, or use --controller") from None
        holder = (lease.get("spec") or {}).get("holderIdentity")
        if not holder:
            raise NoAnswer(f"no controller holds the Lease {namespace}/{LEASE}: none is "
                           "running")
        where = leader_address(holder, (lease.get("metadata") or {}).get("annotations") or {})
        if isinstance(where, LeaderUrl):
            hint = (f"the leader published that address on the Lease {namespace}/{LEASE}; "
                    "if this machine cannot reach it, pass --controller with one it can")
            return await asyncio.to_thread(_ask_url, where.url, method, path, params, body,
                                           hint=hint)
        proxy = f"/api/v1/namespaces/{namespace}/pods/{where.pod}:{where.port}/proxy{path}"
        try:
            return await hub.request(method, proxy, params=params, body=body, attempts=1)
        except ApiError as error:
            if error.status == 404 and where.guessed:
                raise NoAnswer(
                    f"the leader {holder} does not run in a pod on the hub and publishes no "
                    "address on its Lease: pass --controller "
                    "http://HOST:PORT, the address of its --metrics-address, or set "
                    "$MCAD_CONTROLLER") from None
            raise NoAnswer(_refusal(error.status, json.dumps(error.body).encode())) from None
    finally:
        await hub.close()


@dataclass(frozen=True)
class LeaderUrl:
    """The leader runs outside the hub and answers at this URL."""

    url: str


@dataclass(frozen=True)
class LeaderPod:
    """The leader runs in this pod of the controller's namespace; reached by pod proxy."""

    pod: str
    port: int
    guessed: bool = False
    """True when the Lease says nothing and the pod is read from the holder's identity."""


def leader_address(holder: str, annotations: dict[str, str]) -> LeaderUrl | LeaderPod:
    """Where the leader answers, from what it wrote on its Lease (``mcad run`` writes a
    URL when it runs outside the hub, its pod and port inside). A Lease without either
    was written by an older mcad: the holder identity is ``<pod>_<random>``."""
    url = annotations.get(CONTROLLER_URL_ANNOTATION)
    if url:
        return LeaderUrl(url)
    pod, _, port = (annotations.get(CONTROLLER_POD_ANNOTATION) or "").rpartition(":")
    if pod and port.isdigit():
        return LeaderPod(pod, int(port))
    return LeaderPod(holder.rpartition("_")[0] or holder, METRICS_PORT, guessed=True)


def _refusal(status: int, raw: bytes) -> str:
    try:
        message = str(json.loads(raw).get("message") or "")
    except (ValueError, AttributeError):
        message = raw.decode(errors="replace").strip()
    return f"the controller answered {status}: {message or 'no reason given'}"
