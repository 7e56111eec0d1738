"""``mcad validate``: check AppWrappers, QuotaSubtrees and SpokeClusters before applying them.

Why offline: a typo in a quantity or a gang larger than its pods should be found at the
desk, not after the AppWrapper sat Pending for an hour. Each object is checked against
the same models the CRDs are generated from, then its resource demand is read exactly
as the dispatcher will read it (``mcad.core.workload.demand``), and QuotaSubtrees given together
are assembled into trees (``mcad.core.quota.forest``) to find nodes declared twice, cycles and
parents that do not exist.

Output: one line per valid object on stdout (kind, name, pods, total requests); one
sentence per problem on stderr, naming the file (and document), the object and the
field. Exit status 0 when everything is valid, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mcad.api import appwrapper_v1beta2, quotasubtree
from mcad.api.appwrapper import AppWrapper
from mcad.api.components import in_v1beta2_words
from mcad.api.documents import Parsed, parse_object
from mcad.api.quotasubtree import QuotaSubtree
from mcad.api.spokecluster import SpokeCluster
from mcad.cli import manifests
from mcad.config import ConfigError, RunConfig, load_run_config
from mcad.core.quota.forest import QuotaForest, QuotaNodeSpec, nodes_from_subtree
from mcad.core.workload.resources import ResourceList
from mcad.validation import check_appwrapper


def add_parser(subparsers: Any) -> None:
    """Register ``mcad validate``."""
    parser = subparsers.add_parser(
        "validate",
        help="check AppWrapper, QuotaSubtree and SpokeCluster manifests offline",
        description=(
            "Check AppWrapper, QuotaSubtree and SpokeCluster manifests without a cluster. "
            "Give every QuotaSubtree of a tree together: they are checked as one tree."
        ),
    )
    parser.add_argument(
        "-f", "--filename", dest="files", action="append", required=True, metavar="FILE",
        help="a manifest file, a directory of them, or - for stdin (repeatable)",
    )
    parser.add_argument(
        "--config", type=Path, default=None, metavar="FILE",
        help="mcad run's configuration, for its policy on wrapped kinds (default: the "
             "defaults)")
    parser.set_defaults(command=run)


def run(args: argparse.Namespace, *, stdin: IO[str] | None = None,
        out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Validate ``args.files``; print summaries and problems; 0 when all is valid."""
    try:
        config = load_run_config(args.config)
    except ConfigError as problem:
        print(f"mcad validate: {problem}", file=err or sys.stderr)
        return 1
    report = validate(args.files, stdin=stdin, config=config)
    stdout, stderr = out or sys.stdout, err or sys.stderr
    for line in report.summaries:
        print(line, file=stdout)
    for line in report.notes:
        print(f"note: {line}", file=stderr)
    for line in report.problems:
        print(line, file=stderr)
    if report.problems:
        count, objects = len(report.problems), report.objects
        print(f"mcad validate: {count} problem{'s' if count != 1 else ''} found in "
              f"{objects} object{'s' if objects != 1 else ''}.", file=stderr)
        return 1
    return 0


@dataclass
class Report:
    """What validation found, as lines ready to print."""

    summaries: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    objects: int = 0
    """Documents read (valid or not)."""


def validate(paths: Sequence[str], *, stdin: IO[str] | None = None,
             config: RunConfig | None = None) -> Report:
    """Check every object in ``paths`` (AppWrappers against ``config``'s policy: which
    kinds may be wrapped; the default policy when None)."""
    config = config or RunConfig()
    report = Report()
    quota_nodes: dict[str, list[QuotaNodeSpec]] = {}  # tree -> nodes
    quota_sources: dict[str, list[str]] = {}  # tree -> files declaring it
    quota_trees_complete = True  # False once a QuotaSubtree is invalid: its nodes are missing
    for entry in manifests.read(paths, stdin=stdin):
        if isinstance(entry, manifests.ReadProblem):
            report.problems.append(entry.sentence)
            continue
        parsed = parse_object(entry.data)
        report.objects += 1
        prefix = f"{entry.where}: {parsed.label}" if parsed.label else entry.where
        report.notes.extend(f"{prefix}: {note}." for note in parsed.notes)
        if parsed.problems:
            quota_trees_complete &= parsed.kind != quotasubtree.KIND
            report.problems.extend(f"{prefix}: {problem}." for problem in parsed.problems)
            continue
        summary, problem, more = _summarize(parsed, entry.data, quota_nodes, config)
        report.notes.extend(f"{prefix}: {note}." for note in more if note not in parsed.notes)
        if isinstance(parsed.model, QuotaSubtree):
            sources = quota_sources.setdefault(parsed.model.tree, [])
            if entry.source not in sources:
                sources.append(entry.source)
        if problem:
            report.problems.append(f"{prefix}: {problem}.")
        else:
            report.summaries.append(f"{prefix}: {summary}")
    if quota_trees_complete:
        for tree, nodes in sorted(quota_nodes.items()):
            _, tree_problems = QuotaForest.build(nodes)
            where = ", ".join(quota_sources.get(tree, []))
            report.problems.extend(f"{where}: {p.rstrip('.')}." for p in tree_problems)
    return report


def _summarize(parsed: Parsed, raw: object, quota_nodes: dict[str, list[QuotaNodeSpec]],
               config: RunConfig) -> tuple[str, str, list[str]]:
    """(summary, "", notes) for a valid object, ("", problem, notes) when a deeper check
    fails."""
    model = parsed.model
    if not isinstance(raw, Mapping):  # pragma: no cover - parse_object rejected it already
        return "", "is not a Kubernetes object", []
    if isinstance(model, AppWrapper | appwrapper_v1beta2.AppWrapper):
        checked = check_appwrapper(raw, config=config)
        if checked.problems:
            return "", "; ".join(checked.problems), checked.notes
        demand = checked.demand
        assert demand is not None
        gang = (f"gang of {demand.min_available}" if demand.min_available < demand.pods
                else "all in one gang")
        declared = "custompodresources" if isinstance(model, AppWrapper) else "podSets"
        raised = "".join(f"; {in_v1beta2_words(where) if declared == 'podSets' else where} "
                         f"declares less in {declared} than its pods request, so its pods "
                         "count" for where in demand.raised)
        priority = f"priority {model.spec.priority}, " if isinstance(model, AppWrapper) \
            else ""
        return (f"{demand.pods} pod{'s' if demand.pods != 1 else ''} ({gang}), "
                f"{priority}requests {demand.total.describe()}{raised}"), "", checked.notes
    if isinstance(model, QuotaSubtree):
        try:
            quota_nodes.setdefault(model.tree, []).extend(nodes_from_subtree(raw))
        except ValueError as err:
            return "", str(err).rstrip("."), []
        return _describe_subtree(model), "", []
    if isinstance(model, SpokeCluster):
        return _describe_spoke(model), "", []
    return f"valid {parsed.kind}", "", []  # pragma: no cover - every kind is handled above


def _describe_subtree(qst: QuotaSubtree) -> str:
    where = f"under {qst.spec.parent}" if qst.spec.parent else "the root"
    children = "; ".join(
        f"{c.name} ({ResourceList.parse(c.quotas.requests).describe()}, "
        f"{'hard' if c.quotas.hard_limit else 'may borrow'})"
        for c in qst.spec.children
    ) or "no children"
    return f"tree {qst.tree}, {where}: {children}"


def _describe_spoke(spoke: SpokeCluster) -> str:
    spec = spoke.spec
    if spec.kubeconfig_secret is not None:
        how = (f"remote, kubeconfig in Secret {spec.kubeconfig_secret.name} "
               f"key {spec.kubeconfig_secret.key}")
    else:
        how = "the hub itself (local)"
    labels = ", ".join(f"{k}={v}" for k, v in sorted(spec.labels.items()))
    parts = [how, f"labels {labels}" if labels else "no labels"]
    if spec.unschedulable:
        parts.append("unschedulable")
    return ", ".join(parts)
