"""Run times learned from history: the family of a name, the order of what an expected
run time rests on (declared, family, namespace, default), the median, the bounds, and
the plain form a ConfigMap keeps (round trip; malformed input refused with a sentence)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcad.core.life.runhistory import (
    FAMILY_LABEL,
    MalformedHistory,
    RuntimeBasis,
    RuntimeHistory,
    RuntimePolicy,
    family_of,
    quantile,
)
from tests.builders.snapshots import at


@pytest.mark.parametrize(("name", "labels", "want"), [
    ("train-x7k2p", {}, "train"),           # generateName's five characters
    ("train-bcdfg", {}, "train"),           # no digit in it, still generated
    ("run-17", {}, "run"),                  # a counter
    ("run-00042", {}, "run"),               # a zero-padded counter
    ("run-1714557600", {}, "run"),          # a timestamp
    ("sweep-lr-3-x7k2p", {}, "sweep-lr-3"),  # one suffix only
    ("llama-7", {}, "llama"),
    ("llama-7b", {}, "llama-7b"),           # not all digits, not five characters
    ("train-bert", {}, "train-bert"),       # four letters: a word
    ("train-house", {}, "train-house"),     # five letters, with vowels: a word
    ("train-x7k3p", {}, "train-x7k3p"),     # a 3: not generateName's alphabet
    ("train", {}, "train"),
    ("17", {}, "17"),                       # never the whole name
    ("-17", {}, "-17"),
    ("train-", {}, "train-"),
    ("train-x7k2p", {FAMILY_LABEL: "bert-base"}, "bert-base"),  # the label wins
    ("train-x7k2p", {FAMILY_LABEL: "  "}, "train"),              # a blank label does not
    ("train-x7k2p", {"app.kubernetes.io/name": "pytorch"}, "train"),
])
def test_family_of(name: str, labels: dict[str, str], want: str) -> None:
    assert family_of(name, labels) == want


def history(*runs: tuple[str, str, float], runs_per_family: int = 10,
            families_per_namespace: int = 50, namespaces: int = 40) -> RuntimeHistory:
    """Runs ``(namespace, family, seconds)``, finishing a minute apart in this order."""
    out = RuntimeHistory(runs_per_family=runs_per_family,
                         families_per_namespace=families_per_namespace, namespaces=namespaces)
    for i, (ns, fam, seconds) in enumerate(runs):
        out = out.record(ns, fam, seconds, at(60 * i))
    return out


RUNS = history(("a", "bert", 100), ("a", "bert", 300), ("a", "bert", 200),
               ("a", "llama", 1000), ("b", "gpt", 50))


@pytest.mark.parametrize(("namespace", "family", "declared", "want_seconds", "want_basis",
                          "want_runs"), [
    ("a", "bert", timedelta(seconds=7), 7, RuntimeBasis.DECLARED, 0),
    ("a", "bert", None, 200, RuntimeBasis.FAMILY, 3),       # median of 100, 300, 200
    ("a", "gpt", None, 250, RuntimeBasis.NAMESPACE, 4),     # median of 100, 200, 300, 1000
    ("b", "bert", None, 50, RuntimeBasis.NAMESPACE, 1),     # another namespace's bert: not it
    ("c", "bert", None, 3600, RuntimeBasis.DEFAULT, 0),
])
def test_expected_runtime_follows_the_order_of_trust(
        namespace: str, family: str, declared: timedelta | None, want_seconds: float,
        want_basis: RuntimeBasis, want_runs: int) -> None:
    got = RUNS.expected_runtime(namespace=namespace, family=family, declared=declared)
    assert (got.seconds, got.basis, got.runs) == (want_seconds, want_basis, want_runs)


def test_a_high_quantile_may_be_asked_for() -> None:
    got = RUNS.expected_runtime(namespace="a", family="bert",
                                policy=RuntimePolicy(quantile=1.0))
    assert got.seconds == 300
    assert got.describe() == "from 3 past runs of its family, 100s to 5m"


def test_one_run_that_hung_does_not_move_the_median() -> None:
    runs = history(*[("a", "bert", 100.0)] * 4, ("a", "bert", 86_400.0))
    assert runs.expected_runtime(namespace="a", family="bert").seconds == 100


@pytest.mark.parametrize(("values", "q", "want"), [
    ([5.0], 0.5, 5.0),
    ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),
    ([4.0, 1.0, 3.0], 0.5, 3.0),
    ([0.0, 10.0], 0.9, 9.0),
    ([1.0, 2.0, 3.0], 0.0, 1.0),
])
def test_quantile(values: list[float], q: float, want: float) -> None:
    assert quantile(values, q) == pytest.approx(want)


def test_a_family_keeps_its_newest_runs() -> None:
    runs = history(*[("a", "bert", float(s)) for s in range(1, 6)], runs_per_family=3)
    assert [r.seconds for r in runs.runs["a"]["bert"]] == [3.0, 4.0, 5.0]


def test_a_namespace_keeps_its_most_recently_run_families() -> None:
    runs = history(("a", "old", 1), ("a", "mid", 2), ("a", "new", 3), ("a", "old", 4),
                   families_per_namespace=2)
    assert set(runs.runs["a"]) == {"new", "old"}


def test_the_history_keeps_its_most_recently_run_namespaces() -> None:
    runs = history(("a", "x", 1), ("b", "x", 2), ("c", "x", 3), namespaces=2)
    assert set(runs.runs) == {"b", "c"}


def test_a_late_report_of_an_old_run_does_not_push_out_newer_ones() -> None:
    runs = history(("a", "bert", 1), ("a", "bert", 2), runs_per_family=2)
    runs = runs.record("a", "bert", 99, at(-3600))
    assert [r.seconds for r in runs.runs["a"]["bert"]] == [1.0, 2.0]


def test_recording_returns_a_new_history_and_leaves_the_old_one() -> None:
    before = history(("a", "bert", 1))
    after = before.record("a", "bert", 2, at(600))
    assert len(before.runs["a"]["bert"]) == 1
    assert len(after.runs["a"]["bert"]) == 2


@pytest.mark.parametrize("seconds", [-1.0, float("nan"), float("inf")])
def test_a_run_time_that_is_not_a_duration_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="finite number of seconds"):
        RuntimeHistory().record("a", "bert", seconds, at(0))


RECORDS = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]),
                             st.sampled_from(["x", "y", "z", "w"]),
                             st.floats(0, 1e7, allow_nan=False),
                             st.integers(-10**6, 10**6)), max_size=40)


@given(RECORDS, st.integers(1, 4), st.integers(1, 3), st.integers(1, 2))
def test_the_plain_form_round_trips_through_json(
        records: list[tuple[str, str, float, int]], k: int, f: int, n: int) -> None:
    runs = RuntimeHistory(runs_per_family=k, families_per_namespace=f, namespaces=n)
    for ns, fam, seconds, when in records:
        runs = runs.record(ns, fam, seconds, at(when))
    assert RuntimeHistory.from_dict(json.loads(json.dumps(runs.to_dict()))) == runs
    assert len(runs.runs) <= n
    assert all(len(fams) <= f and all(len(r) <= k for r in fams.values())
               for fams in runs.runs.values())


def _good() -> dict[str, Any]:
    return history(("a", "bert", 100)).to_dict()


def _with(**changes: Any) -> dict[str, Any]:
    return {**_good(), **changes}


@pytest.mark.parametrize(("data", "want_message"), [
    ([], "must be a mapping, got list"),
    (_with(version=2), "has version 2; this mcad reads version 1"),
    (_with(runsPerFamily=0), "runs_per_family must be a whole number of at least 1"),
    (_with(runs=[]), "runs must be a mapping"),
    (_with(runs={"a": [1]}), "runs.a: must be a mapping of family to runs"),
    (_with(runs={"a": {"bert": "100"}}), "runs.a.bert: must be a list"),
    (_with(runs={"a": {"bert": [[100]]}}), r"runs.a.bert\[0\]: a run must be a"),
    (_with(runs={"a": {"bert": [[-1, "2024-05-01T10:00:00+00:00"]]}}),
     r"runs.a.bert\[0\]: seconds must be a finite number"),
    (_with(runs={"a": {"bert": [["100", "2024-05-01T10:00:00+00:00"]]}}),
     "seconds must be a finite number"),
    (_with(runs={"a": {"bert": [[100, "yesterday"]]}}),
     r"runs.a.bert\[0\]: finishedAt must be an ISO 8601 time, got 'yesterday'"),
])
def test_malformed_input_is_refused_with_a_sentence(data: object, want_message: str) -> None:
    with pytest.raises(MalformedHistory, match=want_message):
        RuntimeHistory.from_dict(data)
