"""``mcad queue`` and ``mcad explain``: where an AppWrapper stands and why it waits.

Both ask the visibility API (``mcad.visibility``) through the hub's API server, with the
user's own kubeconfig: the API server authenticates the user, RBAC decides what they
may see (their role's ``list pendingappwrappers`` in a namespace, which the manifests
add to ``view``, ``edit`` and ``admin``), and the leading controller answers from its
last dispatch cycle, so what they print is what the dispatcher decided, never a second
opinion. Nothing here needs the leader's address.

Exit status: 0 answered, 1 the hub or the controller could not answer or refused (the
sentence says why), 2 the command line is wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import yaml

from mcad.api.visibility import parse_moment
from mcad.cli.cluster import age, columns
from mcad.core.workload.durations import format_duration
from mcad.visibility import client as visibility
from mcad.visibility.client import NoAnswer

GONE_FLAG = ("--controller is gone: mcad queue and mcad explain ask the hub's API server "
             "(the visibility API) with your kubeconfig; drop the flag")


def add_parser(subparsers: Any) -> None:
    queue = subparsers.add_parser(
        "queue", help="list waiting AppWrappers in the order the dispatcher considers them",
        description="The queued AppWrappers in the order the last dispatch cycle considered "
                    "them, with why each waits.")
    scope = queue.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", default="default", help="namespace (default: "
                       "default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true",
                       help="every namespace (needs the right to list them all)")
    queue.add_argument("-o", "--output", choices=("wide", "json"), default=None)
    _hub_flags(queue)
    queue.set_defaults(command=run_queue)

    explain = subparsers.add_parser(
        "explain", help="why an AppWrapper waits: each check, each cluster, what is ahead",
        description="Take one AppWrapper through the dispatcher's checks, in the order it "
                    "applies them, and say why each cluster does not take it now. With -f, "
                    "a dry run for an AppWrapper not yet submitted.")
    explain.add_argument("name", nargs="?", help="the AppWrapper (omit with -f)")
    explain.add_argument("-n", "--namespace", default=None,
                         help="namespace (default: the manifest's with -f, else default)")
    explain.add_argument("-f", "--filename", type=Path,
                         help="an AppWrapper manifest to try without submitting it")
    explain.add_argument("-o", "--output", choices=("json",), default=None)
    _hub_flags(explain)
    explain.set_defaults(command=run_explain)


def _hub_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hub-kubeconfig", "--kubeconfig", type=Path, default=None,
                        dest="hub_kubeconfig", metavar="FILE",
                        help="kubeconfig of the hub, as you (default: $KUBECONFIG, else "
                             "~/.kube/config); --kubeconfig as kubectl spells it, so "
                             "`kubectl mcad queue --kubeconfig F` means what it says")
    parser.add_argument("--context", default=None,
                        help="the kubeconfig context of the hub (default: its current one)")
    parser.add_argument("--controller", default=None, help=argparse.SUPPRESS)


# -- mcad queue ---------------------------------------------------------------------------

def run_queue(args: argparse.Namespace, *, out: IO[str] | None = None,
              err: IO[str] | None = None, now: datetime | None = None) -> int:
    if args.controller:
        print(f"mcad queue: {GONE_FLAG}", file=err or sys.stderr)
        return 2
    namespace = None if args.all_namespaces else args.namespace
    what = "list the queue of every namespace" if namespace is None \
        else f"list the queue of namespace {namespace}"
    try:
        answer = asyncio.run(_ask(args, "GET", lambda: visibility.pending_path(namespace),
                                  kind="PendingAppWrapperList", what=what))
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
        meta = item.get("metadata") or {}
        rows.append([str(item["position"]), meta.get("namespace", ""), meta.get("name", ""),
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
    return f"in {format_duration(seconds, coarse=True)} ({moment.strftime('%H:%M')})"


# -- mcad explain ---------------------------------------------------------------------------

def run_explain(args: argparse.Namespace, *, out: IO[str] | None = None,
                err: IO[str] | None = None) -> int:
    if bool(args.name) == bool(args.filename):
        print("mcad explain: give an AppWrapper's name, or -f FILE for a dry run, not both",
              file=err or sys.stderr)
        return 2
    if args.controller:
        print(f"mcad explain: {GONE_FLAG}", file=err or sys.stderr)
        return 2
    namespace = args.namespace or "default"
    try:
        if args.filename:
            try:
                body = yaml.safe_load(args.filename.read_text())
            except (OSError, yaml.YAMLError) as problem:
                raise NoAnswer(f"cannot read {args.filename}: {problem}") from None
            given = (body.get("metadata") or {}).get("namespace") \
                if isinstance(body, dict) and isinstance(body.get("metadata"), dict) else None
            namespace = args.namespace or given or "default"
            answer = asyncio.run(_ask(args, "POST",
                                      lambda: visibility.explanation_path(namespace),
                                      kind="Explanation", body=body,
                                      what=f"try an AppWrapper in namespace {namespace}"))
        else:
            answer = asyncio.run(_ask(
                args, "GET", lambda: visibility.explanation_path(namespace, args.name),
                kind="Explanation",
                what=f"see AppWrapper {args.name} of namespace {namespace}"))
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
    ahead, others = answer.get("ahead") or [], int(answer.get("aheadOthers") or 0)
    if ahead or others:
        shown = ", ".join(ahead[:10]) + (f" and {len(ahead) - 10} more" if len(ahead) > 10
                                         else "")
        if others:
            shown += (", and " if shown else "") + \
                f"{others} of other namespaces"
        lines.append(f"Ahead of it ({len(ahead) + others}): {shown}")
    if answer.get("outcome") not in ("Running", "Dispatched"):
        start = answer.get("estimatedStart")
        lines.append(f"Estimated start: {start} ({answer['estimateBasis']})" if start
                     else f"Estimated start: {answer.get('estimateBasis') or 'unknown'}")
    lines.append(f"(as of the dispatch cycle at {answer.get('cycle', '?')})")
    return "\n".join(lines)


# -- asking the hub -------------------------------------------------------------------------

async def _ask(args: argparse.Namespace, method: str, path: Callable[[], str], *, kind: str,
               what: str, body: Any = None) -> dict[str, Any]:
    """The visibility API's answer, as the user of ``--kubeconfig``; ``path`` is made
    first (it checks the names), so a bad name is refused before anything is sent."""
    where = path()
    hub = await visibility.open_hub(args.hub_kubeconfig, args.context)
    try:
        return await visibility.ask(hub, method, where, kind=kind, what=what, body=body)
    finally:
        await hub.close()
