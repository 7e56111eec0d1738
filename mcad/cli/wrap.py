"""``mcad wrap``: turn a plain Job, PyTorchJob, JobSet, RayCluster or Deployment into an
AppWrapper.

Why: people have the manifest of their workload already; writing the AppWrapper around
it by hand (the nesting, the namespace twice, the quota label) is where typos come
from. ``mcad wrap -f job.yaml --priority 5 --quota quota_context=team-a`` writes it in
the shape of the examples: one GenericItem holding the object verbatim (less what the
API server wrote: uid, resourceVersion, status...), and its ``custompodresources``, one
entry per pod template (its pods, and one pod's requests and limits), read from the pod
templates by the dispatcher's own rule (``mcad.core.workload.demand``), so what it will be charged
is there to read before it is submitted. Completion is left to the kind's own condition
(a Job's Complete, a JobSet's Completed, a PyTorchJob's Succeeded).

With ``--api v1beta2`` it writes AppWrapper v1beta2 instead (project-codeflare/
appwrapper's): one component holding the object, its ``podSets`` (path and replicas of
each pod template, as the AppWrapper project infers them); a priority is then named by a
class (``--priority-class``: the label ``kueue.x-k8s.io/priority-class``), and
``--queue`` sets ``kueue.x-k8s.io/queue-name``, as that project's users write them.

The result is checked as ``mcad validate`` checks it before it is printed or applied
(``--apply`` creates it on the hub, found like kubectl finds a cluster: ``--kubeconfig``,
``--context``). Exit status: 0 done, 1 the input cannot be wrapped or the hub refused (one
sentence on stderr), 2 the command line is wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import yaml

from mcad.api.wrap import CannotWrap, wrap
from mcad.cli import manifests
from mcad.cli.cluster import label
from mcad.config import RunConfig
from mcad.core.quota.queues import PRIORITY_CLASS_LABEL, QUEUE_LABEL
from mcad.gateway import verbs
from mcad.gateway.connection import connect, default_kubeconfig_path
from mcad.gateway.errors import AlreadyExists, ApiError, BadKubeconfig, NotFound, Unreachable
from mcad.gateway.refs import APPWRAPPERS, APPWRAPPERS_V1BETA2
from mcad.validation import check_appwrapper


def add_parser(subparsers: Any) -> None:
    """Register ``mcad wrap``."""
    parser = subparsers.add_parser(
        "wrap", help="wrap a Job, PyTorchJob, JobSet, RayCluster or Deployment in an "
                     "AppWrapper",
        description="Wrap a Job, PyTorchJob, JobSet, RayCluster or Deployment manifest in an "
                    "AppWrapper whose pods are declared from its pod templates; print it as "
                    "YAML, or create it on the hub with --apply.")
    parser.add_argument("-f", "--filename", required=True, metavar="FILE",
                        help="the manifest (one object), or - for stdin")
    parser.add_argument("--name", help="the AppWrapper's name (default: the object's)")
    parser.add_argument("-n", "--namespace",
                        help="the namespace (default: the object's, else default)")
    parser.add_argument("--priority", type=int, default=None, metavar="N",
                        help="spec.priority: higher is dispatched first and may preempt")
    parser.add_argument("--quota", type=quota_label, action="append", default=[],
                        metavar="TREE=NODE",
                        help="charge the quota tree TREE's node NODE (the label TREE: NODE; "
                             "repeatable, one per tree)")
    parser.add_argument("--api", choices=("v1beta1", "v1beta2"), default="v1beta1",
                        help="the AppWrapper version to write: v1beta1 (MCAD's, the "
                             "default) or v1beta2 (project-codeflare/appwrapper's)")
    parser.add_argument("--queue", default=None, metavar="NAME",
                        help="the label kueue.x-k8s.io/queue-name (charged to the quota "
                             "node mcad's queueNames maps it to)")
    parser.add_argument("--priority-class", default=None, metavar="NAME",
                        help="the label kueue.x-k8s.io/priority-class: the priority of "
                             "that WorkloadPriorityClass or PriorityClass")
    parser.add_argument("--apply", action="store_true",
                        help="create the AppWrapper on the hub instead of printing it")
    parser.add_argument("--kubeconfig", "--hub-kubeconfig", dest="hub_kubeconfig", type=Path,
                        default=None, metavar="FILE",
                        help="with --apply: kubeconfig of the hub (default: $KUBECONFIG, "
                             "else ~/.kube/config)")
    parser.add_argument("--context", default=None,
                        help="with --apply: the kubeconfig context (default: its current one)")
    parser.set_defaults(command=run)


def quota_label(text: str) -> tuple[str, str]:
    """``TREE=NODE`` as a label (key, value), by the rule ``mcad cluster --label`` uses,
    with a node that must be named; argparse prints the error as usage."""
    key, value = label(text)
    if not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not TREE=NODE (e.g. quota_context=team-a)")
    return key, value


def run(args: argparse.Namespace, *, stdin: IO[str] | None = None,
        out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Read the manifest, wrap it, check it; print it or apply it."""
    try:
        obj = read_one(args.filename, stdin=stdin)
        labels = {**({QUEUE_LABEL: args.queue} if args.queue else {}),
                  **({PRIORITY_CLASS_LABEL: args.priority_class}
                     if args.priority_class else {})}
        appwrapper = wrap(obj, name=args.name, namespace=args.namespace,
                          priority=args.priority, quota={**dict(args.quota), **labels},
                          api=args.api)
        problems = check_appwrapper(appwrapper, config=RunConfig()).problems
        if problems:
            raise CannotWrap(f"the AppWrapper would not be valid: {'; '.join(problems)}")
        if args.apply:
            message = asyncio.run(apply(appwrapper, kubeconfig=args.hub_kubeconfig,
                                        context=args.context))
        else:
            message = yaml.safe_dump(appwrapper, sort_keys=False).rstrip("\n")
    except CannotWrap as problem:
        print(f"mcad wrap: {str(problem).rstrip('.')}.", file=err or sys.stderr)
        return 1
    print(message, file=out or sys.stdout)
    return 0


def read_one(path: str, *, stdin: IO[str] | None = None) -> Mapping[str, Any]:
    """The single object of ``path`` (``-``: stdin)."""
    objects: list[object] = []
    for entry in manifests.read([path], stdin=stdin):
        if isinstance(entry, manifests.ReadProblem):
            raise CannotWrap(entry.sentence)
        objects.append(entry.data)
    if len(objects) != 1:
        raise CannotWrap(f"{path} holds {len(objects)} objects; give one workload per "
                         "mcad wrap")
    obj = objects[0]
    if not isinstance(obj, Mapping):
        raise CannotWrap(f"{path} holds no Kubernetes object")
    return obj


async def apply(appwrapper: dict[str, Any], *, kubeconfig: Path | None,
                context: str | None) -> str:
    """Create ``appwrapper`` on the hub; what kubectl would say."""
    path = kubeconfig or default_kubeconfig_path()
    try:
        hub = await connect(path, name="hub", context=context)
    except BadKubeconfig as error:
        raise CannotWrap(f"the hub kubeconfig {path} cannot be used: {error}") from None
    meta = appwrapper["metadata"]
    where = f"{meta['namespace']}/{meta['name']}"
    try:
        ref = APPWRAPPERS_V1BETA2 if appwrapper["apiVersion"] == APPWRAPPERS_V1BETA2.api_version \
            else APPWRAPPERS
        await verbs.create(hub, ref, appwrapper, namespace=meta["namespace"])
    except AlreadyExists:
        raise CannotWrap(f"an AppWrapper {where} exists already; delete it, or choose "
                         "another --name") from None
    except Unreachable as error:
        raise CannotWrap(f"cannot reach the hub ({error.message.rstrip('.')}); check the hub "
                         f"kubeconfig {path} (--kubeconfig, or $KUBECONFIG)") from None
    except NotFound as error:
        if error.reason == "NotFound":  # the namespace does not exist
            raise CannotWrap(f"the hub refused: {error.message.rstrip('.')}") from None
        raise CannotWrap(f"the hub does not serve AppWrappers ({ref.api_version}); install "
                         "mcad's CRDs first: kubectl apply -k crds/") from None
    except ApiError as error:
        raise CannotWrap(f"the hub refused: {error.message.rstrip('.')} "
                         f"(HTTP {error.status})") from None
    finally:
        await hub.close()
    return f"appwrapper.workload.codeflare.dev/{meta['name']} created in {meta['namespace']}"
