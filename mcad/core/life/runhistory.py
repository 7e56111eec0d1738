"""How long a run will take: learned from the runs that completed before it.

A start estimate is only as good as the ends it rests on, and almost nobody declares
``dispatchDuration.expected``. Jobs repeat, though: the same training script, the same
sweep, submitted again and again under nearly the same name. So every completed run's
time is kept per (namespace, *family*), and a running AppWrapper is expected to take,
in this order (issue 22):

1. its declared ``dispatchDuration.expected``: the user knows best when they say;
2. the median of its family's past runs;
3. the median of its namespace's past runs (every family there): a team's jobs look
   more alike than a stranger's;
4. the policy's default.

Why the median: the estimate is judged by its absolute error (``benchmarks/estimates.py``
reports the median and p90 absolute error), and the median minimises the expected
absolute error; it is also robust to the heavy tail of run times (one run that hung for
a day does not move it, where it would drag a mean). ``RuntimePolicy.quantile`` may ask
for a higher quantile where lateness costs more than earliness (a backfill that must
not delay the head of the line).

The history is a frozen value (``record`` returns a new one), bounded in count: at most
``runs_per_family`` runs per family (the oldest dropped: code and data change, recent
runs say more), ``families_per_namespace`` families per namespace and ``namespaces``
namespaces (the one whose last run is oldest dropped). With the defaults that is at most
10 x 50 x 40 = 20,000 runs; with long names (a family is an AppWrapper's name, up to 253
characters) their JSON reaches about 1.4 MiB, more than the one ConfigMap on the hub that
keeps it may hold (1 MiB). So the history is also bounded in bytes: ``within`` trims it
to a budget (``HISTORY_BUDGET_BYTES`` of ``encode()``) by a rule that keeps one team's
flood from pushing out another team's runs (see ``within``). ``to_dict``/``from_dict``
give the plain form; what reads and writes the ConfigMap is the controller's business,
not this module's.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from mcad.core.workload.durations import format_duration

FAMILY_LABEL = "workload.codeflare.dev/family"
"""The label that names a job's family outright. In the AppWrapper's own API group, so
it reads as part of the AppWrapper's contract, not a borrowed convention (the
``app.kubernetes.io/name`` label usually names the framework, "pytorch", which is far
too broad a family). Without it the family is the name less its generated suffix."""

GENERATED_ALPHABET = frozenset("bcdfghjklmnpqrstvwxz2456789")
"""The characters of the random suffix ``metadata.generateName`` adds (Kubernetes'
``utilrand.String``: no vowels, no 0, 1 or 3, so it never spells a word)."""

_DIGITS = re.compile(r"[0-9]+")
_T = TypeVar("_T")
FORMAT_VERSION = 1
HISTORY_BUDGET_BYTES = 900 * 1024
"""The most the encoded history may take: 921,600 bytes of ``encode()``. A ConfigMap's
data (keys and values together) may hold 1 MiB, 1,048,576 bytes, and the API server
refuses more (422); the budget keeps 124 KiB under that, for the key and for a later
format that says a little more per run, and the whole object far under etcd's 1.5 MiB
request limit. Only a history near the count bounds with long names reaches it."""


def family_of(name: str, labels: Mapping[str, str] | None = None) -> str:
    """The family of the AppWrapper ``name``: the value of ``FAMILY_LABEL`` when it is
    set (and not blank), else ``name`` less one generated suffix.

    The suffix is the text after the last ``-`` when it is either all digits (a counter
    or a timestamp: ``run-17``, ``run-00042``, ``run-1714557600``) or exactly five
    characters of the ``generateName`` alphabet (``train-x7k2p``). Only one suffix is
    taken off (``sweep-lr-3-x7k2p`` is family ``sweep-lr-3``: one sweep point, one
    family), and never the whole name (``17`` stays ``17``; ``-17`` stays ``-17``).
    """
    value = (labels or {}).get(FAMILY_LABEL, "").strip()
    if value:
        return value
    stem, dash, suffix = name.rpartition("-")
    if not dash or not stem or not suffix:
        return name
    if _DIGITS.fullmatch(suffix) or (len(suffix) == 5 and set(suffix) <= GENERATED_ALPHABET):
        return stem
    return name


class RuntimeBasis(StrEnum):
    """What an expected run time rests on, most trusted first."""

    DECLARED = "declared"
    FAMILY = "family"
    NAMESPACE = "namespace"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class RuntimeEstimate:
    """How long a run is expected to take, and why."""

    seconds: float
    basis: RuntimeBasis
    runs: int
    """The past runs the statistic was taken over (0: declared or default)."""
    spread: tuple[float, float] | None = None
    """The shortest and the longest of those runs (None: no past runs)."""

    @property
    def duration(self) -> timedelta:
        return timedelta(seconds=self.seconds)

    @property
    def error(self) -> float | None:
        """How far a run may end from this estimate, as far as the past runs tell:
        the farther of the shortest and the longest from it (None: no past runs)."""
        if self.spread is None:
            return None
        low, high = self.spread
        return max(self.seconds - low, high - self.seconds, 0.0)

    def describe(self) -> str:
        """``from 12 past runs of its family, 41m to 58m``: what ``mcad explain`` says it
        rests on."""
        plural = "s" if self.runs != 1 else ""
        spread = "" if self.spread is None or self.runs < 2 else \
            f", {format_duration(self.spread[0])} to {format_duration(self.spread[1])}"
        return {RuntimeBasis.DECLARED: "as its dispatchDuration.expected declares",
                RuntimeBasis.FAMILY: f"from {self.runs} past run{plural} of its family"
                                     f"{spread}",
                RuntimeBasis.NAMESPACE: f"from {self.runs} past run{plural} in its namespace"
                                        f"{spread}",
                RuntimeBasis.DEFAULT: "the policy's default: no past runs to go by",
                }[self.basis]


@dataclass(frozen=True, slots=True)
class RuntimePolicy:
    default: timedelta = timedelta(hours=1)
    """Expected run time when nothing is declared and nothing has run before."""
    quantile: float = 0.5
    """Of the past runs: 0.5 is the median (see the module docstring)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.quantile <= 1.0:
            raise ValueError(f"the runtime quantile must be between 0 and 1, "
                             f"got {self.quantile}")
        if self.default < timedelta(0):
            raise ValueError(f"the default run time must not be negative, got {self.default}")


@dataclass(frozen=True, slots=True)
class Run:
    """One completed run."""

    seconds: float
    finished_at: datetime


Families = Mapping[str, tuple[Run, ...]]
"""Family -> its kept runs, oldest first."""


class MalformedHistory(ValueError):
    """A stored runtime history that cannot be read; its message says where and why."""


@dataclass(frozen=True)
class RuntimeHistory:
    """Completed run times per namespace and family, bounded (see the module docstring)."""

    runs_per_family: int = 10
    families_per_namespace: int = 50
    namespaces: int = 40
    runs: Mapping[str, Families] = field(default_factory=dict)
    """Namespace -> family -> runs, oldest first."""

    def __post_init__(self) -> None:
        for name in ("runs_per_family", "families_per_namespace", "namespaces"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"the runtime history's {name} must be a whole number "
                                 f"of at least 1, got {value!r}")

    def record(self, namespace: str, family: str, seconds: float,
               finished_at: datetime) -> RuntimeHistory:
        """This history with one more completed run (the bounds kept)."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or \
                not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"a run time must be a finite number of seconds, not negative; "
                             f"got {seconds!r} for {namespace}/{family}")
        families = dict(self.runs.get(namespace, {}))
        kept = sorted((*families.get(family, ()), Run(float(seconds), _utc(finished_at))),
                      key=lambda r: r.finished_at)
        families[family] = tuple(kept[-self.runs_per_family:])
        outer = dict(self.runs)
        outer[namespace] = _newest(families, self.families_per_namespace, _last_finished)
        return replace(self, runs=_newest(outer, self.namespaces,
                                          lambda fams: max(map(_last_finished, fams.values()))))

    def expected_runtime(self, *, namespace: str, family: str,
                         declared: timedelta | None = None,
                         policy: RuntimePolicy = RuntimePolicy()) -> RuntimeEstimate:
        """How long a run of ``family`` in ``namespace`` is expected to take."""
        if declared is not None:
            return RuntimeEstimate(declared.total_seconds(), RuntimeBasis.DECLARED, 0)
        families = self.runs.get(namespace, {})
        own = families.get(family, ())
        if own:
            times = [r.seconds for r in own]
            return RuntimeEstimate(quantile(times, policy.quantile), RuntimeBasis.FAMILY,
                                   len(own), (min(times), max(times)))
        pooled = [r.seconds for runs in families.values() for r in runs]
        if pooled:
            return RuntimeEstimate(quantile(pooled, policy.quantile),
                                   RuntimeBasis.NAMESPACE, len(pooled),
                                   (min(pooled), max(pooled)))
        return RuntimeEstimate(policy.default.total_seconds(), RuntimeBasis.DEFAULT, 0)

    def to_dict(self) -> dict[str, Any]:
        """The plain, JSON-able form (what a ConfigMap keeps)."""
        return {"version": FORMAT_VERSION,
                "runsPerFamily": self.runs_per_family,
                "familiesPerNamespace": self.families_per_namespace,
                "namespaces": self.namespaces,
                "runs": {ns: {fam: [_plain(r) for r in runs]
                              for fam, runs in families.items()}
                         for ns, families in self.runs.items()}}

    def encode(self) -> str:
        """``to_dict`` as compact JSON: what the ConfigMap keeps and what the budget
        measures (ASCII, so one byte a character)."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def within(self, budget: int = HISTORY_BUDGET_BYTES) -> RuntimeHistory:
        """This history trimmed until ``encode()`` takes at most ``budget`` bytes (itself
        when it fits; empty when not even an empty one would), one run at a time:

        1. from the namespace that holds the most bytes (its entry in ``runs``: its name,
           its families and their runs; ties: the name that sorts first);
        2. of its runs, the oldest that is not its family's newest; once every family
           there is down to its newest run, the family whose newest run is oldest (and
           the namespace with its last family).

        So a namespace loses a run only while no other holds more bytes than it does: no
        namespace can evict another's runs (a family's last run or any other) while it
        itself holds more than that namespace; one that floods the history trims itself
        down to the others' size first, and a namespace holding at most an even share
        (the budget divided by the number of namespaces, less the history's few bytes of
        framing) loses nothing. Inside a namespace a family keeps its newest run, the
        estimate of its own, as long as any family there has an older run to give.
        """
        size = len(self.encode())
        if size <= budget:
            return self
        framing = len(replace(self, runs={}).encode())
        trims = {ns: _NamespaceTrim(ns, families) for ns, families in self.runs.items()}
        heap = [(-t.size, ns) for ns, t in trims.items()]
        heapq.heapify(heap)
        size = framing + sum(t.size for t in trims.values()) + max(len(trims) - 1, 0)
        while size > budget and heap:
            _, ns = heapq.heappop(heap)
            trim = trims[ns]
            size -= trim.drop_one()
            if trim.families:
                heapq.heappush(heap, (-trim.size, ns))
            else:
                size -= trim.size + (1 if heap else 0)
        return replace(self, runs={ns: t.kept() for ns, t in trims.items() if t.families})

    @classmethod
    def from_dict(cls, data: object) -> RuntimeHistory:
        """Read ``to_dict``'s form back; ``MalformedHistory`` names what is wrong.

        Runs beyond the bounds it states are dropped as ``record`` would drop them."""
        if not isinstance(data, Mapping):
            raise MalformedHistory(f"a runtime history must be a mapping, "
                                   f"got {type(data).__name__}")
        if data.get("version") != FORMAT_VERSION:
            raise MalformedHistory(f"the runtime history has version {data.get('version')!r};"
                                   f" this mcad reads version {FORMAT_VERSION}: start a new one "
                                   "(delete the stored history)")
        try:
            history = cls(runs_per_family=data.get("runsPerFamily", 10),
                          families_per_namespace=data.get("familiesPerNamespace", 50),
                          namespaces=data.get("namespaces", 40))
        except ValueError as error:
            raise MalformedHistory(str(error)) from None
        runs = data.get("runs", {})
        if not isinstance(runs, Mapping):
            raise MalformedHistory("the runtime history's runs must be a mapping of "
                                   "namespace to family to runs")
        for ns, families in runs.items():
            if not isinstance(ns, str) or not isinstance(families, Mapping):
                raise MalformedHistory(f"runs.{ns}: must be a mapping of family to runs")
            for fam, listed in families.items():
                where = f"runs.{ns}.{fam}"
                if not isinstance(fam, str) or not isinstance(listed, Sequence) or \
                        isinstance(listed, str):
                    raise MalformedHistory(f"{where}: must be a list of "
                                           "[seconds, finishedAt] pairs")
                for i, run in enumerate(listed):
                    seconds, finished = _read_run(run, f"{where}[{i}]")
                    history = history.record(ns, fam, seconds, finished)
        return history


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (not empty), linearly interpolated between the
    two nearest ranks (numpy's default), so the median of an even count is the mean of
    the middle two."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _read_run(run: object, where: str) -> tuple[float, datetime]:
    if not isinstance(run, Sequence) or isinstance(run, str) or len(run) != 2:
        raise MalformedHistory(f"{where}: a run must be a [seconds, finishedAt] pair, "
                               f"got {run!r}")
    seconds, finished = run
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or \
            not math.isfinite(seconds) or seconds < 0:
        raise MalformedHistory(f"{where}: seconds must be a finite number, not negative; "
                               f"got {seconds!r}")
    if not isinstance(finished, str):
        raise MalformedHistory(f"{where}: finishedAt must be an ISO 8601 time, "
                               f"got {finished!r}")
    try:
        moment = datetime.fromisoformat(finished)
    except ValueError:
        raise MalformedHistory(f"{where}: finishedAt must be an ISO 8601 time, "
                               f"got {finished!r}") from None
    return float(seconds), moment


def _utc(moment: datetime) -> datetime:
    """Aware, in UTC (naive: UTC, as everywhere in the core), so runs compare and
    round-trip through ``isoformat`` exactly."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _last_finished(runs: tuple[Run, ...]) -> datetime:
    return runs[-1].finished_at


def _newest(items: dict[str, _T], limit: int,
            last: Callable[[_T], datetime]) -> dict[str, _T]:
    """``items`` less the ones whose ``last`` moment is oldest, down to ``limit``
    (ties: by name, so the same history always keeps the same ones)."""
    if len(items) <= limit:
        return items
    keep = set(sorted(items, key=lambda k: (last(items[k]), k), reverse=True)[:limit])
    return {k: v for k, v in items.items() if k in keep}


class _NamespaceTrim:
    """One namespace of a history being trimmed (``RuntimeHistory.within``): its runs in
    the order the rule takes them, and the bytes of its entry as they go."""

    def __init__(self, namespace: str, families: Families) -> None:
        self.families: dict[str, int] = {f: len(runs) for f, runs in families.items()}
        """Family -> how many of its runs are kept (the newest ones)."""
        self._original = families
        self._run_bytes = {f: [len(_encoded(_plain(r))) for r in runs]
                           for f, runs in families.items()}
        self._family_bytes = {f: _entry_bytes(f, self._run_bytes[f]) for f in families}
        self.size = _entry_bytes(namespace, list(self._family_bytes.values()))
        """The bytes of ``"namespace":{...}`` in the encoded history."""
        older = sorted((runs[i].finished_at, f, i) for f, runs in families.items()
                       for i in range(len(runs) - 1))
        newest = sorted((runs[-1].finished_at, f) for f, runs in families.items() if runs)
        self._order = [f for f, runs in families.items() if not runs] + \
            [f for _, f, _ in older] + [f for _, f in newest]
        """The family that loses its oldest kept run, step by step."""
        self._step = 0

    def drop_one(self) -> int:
        """Drop the next run by the rule; the bytes that took in this namespace's entry
        (and in the history's). The caller drops the entry when no family is left."""
        if not self.families:
            return 0
        family = self._order[self._step]
        self._step += 1
        kept = self.families[family]
        first = len(self._original[family]) - kept
        if kept > 1:
            freed = self._run_bytes[family][first] + 1  # the run and its comma
            self._family_bytes[family] -= freed
            self.families[family] = kept - 1
        else:
            freed = self._family_bytes.pop(family) + (1 if len(self.families) > 1 else 0)
            del self.families[family]
        if self.families:
            self.size -= freed
            return freed
        return 0  # the whole entry goes: the caller takes its size away

    def kept(self) -> dict[str, tuple[Run, ...]]:
        return {f: runs[len(runs) - self.families[f]:]
                for f, runs in self._original.items() if f in self.families}


def _plain(run: Run) -> list[Any]:
    return [run.seconds, run.finished_at.isoformat()]


def _encoded(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _entry_bytes(name: str, parts: Sequence[int]) -> int:
    """The bytes of ``"name":{...}`` or ``"name":[...]`` around parts of these sizes."""
    return len(_encoded(name)) + 1 + 2 + sum(parts) + max(len(parts) - 1, 0)
