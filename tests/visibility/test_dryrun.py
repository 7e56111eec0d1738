"""A dry run cannot hurt the leader (``mcad.visibility.dryrun``): a body of nested YAML
aliases (a "billion laughs" of 1.5 kB held the event loop for seconds) is refused before
anything is expanded, a body of no declared type or of the wrong namespace is refused
with a sentence, and only one dry run is worked out at a time: the next waits briefly,
then gets 429."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from mcad.config import RunConfig
from mcad.core.cycle.decide import dispatch_cycle
from mcad.visibility import dryrun
from tests.builders.appwrappers import make_appwrapper
from tests.builders.clusters import make_cluster
from tests.builders.snapshots import at, make_snapshot

LAUGHS = "\n".join(
    ["a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]"
       for i in range(8)])


def test_nested_aliases_are_refused_before_they_expand() -> None:
    assert len(LAUGHS) < 1600  # the 1.5 kB
    started = time.perf_counter()
    with pytest.raises(dryrun.Refused) as refused:
        dryrun.parse(LAUGHS.encode(), "application/yaml")
    assert time.perf_counter() - started < 0.5  # expanded, this is 9^9 strings
    assert refused.value.status == 400
    assert "anchors or aliases" in refused.value.message


@pytest.mark.parametrize(("body", "kind", "status", "says"), [
    (b'{"kind": "AppWrapper"}', "text/plain", 415, "application/json or application/yaml"),
    (b'{"kind": "AppWrapper"}', "", 415, "a body of no type"),
    (b"[1, 2]", "application/json", 400, "one AppWrapper"),
    (b"{not json", "application/json", 400, "not valid JSON or YAML"),
    (b"[" * 100_000 + b"]" * 100_000, "application/json", 400, "nested too deeply"),
])
def test_a_body_that_is_no_appwrapper_is_a_sentence(body: bytes, kind: str, status: int,
                                                     says: str) -> None:
    with pytest.raises(dryrun.Refused) as refused:
        dryrun.parse(body, kind)
    assert refused.value.status == status
    assert says in refused.value.message


def test_yaml_without_aliases_and_json_are_taken() -> None:
    assert dryrun.parse(b"kind: AppWrapper\nmetadata: {name: x}\n",
                        "application/yaml; charset=utf-8") == {
        "kind": "AppWrapper", "metadata": {"name": "x"}}
    assert dryrun.parse(b'{"kind": "AppWrapper"}', "application/json") == {
        "kind": "AppWrapper"}


def test_the_trial_decides_the_candidate_in_its_namespace() -> None:
    snapshot = make_snapshot(now=at(0)).clusters(make_cluster("spoke-1").nodes(1, gpu=8)).obj()
    body = json.dumps(make_appwrapper("try", "team-b").job(gpu=4).obj()).encode()
    trial = dryrun.trial(body, "application/json", namespace="team-b", snapshot=snapshot,
                         config=RunConfig(), now=at(0))
    assert str(trial.found.key) == "team-b/try"
    assert trial.found.outcome == "Dispatched"
    assert dispatch_cycle(snapshot).dispatches == ()  # the snapshot itself is untouched


def test_a_v1beta2_candidate_is_tried_as_it_would_be_stored() -> None:
    """``mcad explain -f`` of an AppWrapper v1beta2: its pods counted by its podSets."""
    snapshot = make_snapshot(now=at(0)).clusters(make_cluster("spoke-1").nodes(1, gpu=8)).obj()
    job = make_appwrapper("try", "team-b").job(pods=2, gpu=4).obj()["spec"]["resources"][
        "GenericItems"][0]["generictemplate"]
    body = json.dumps({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                       "metadata": {"name": "try"},
                       "spec": {"components": [{"template": job}]}}).encode()
    trial = dryrun.trial(body, "application/json", namespace="team-b", snapshot=snapshot,
                         config=RunConfig(), now=at(0))
    assert trial.found.outcome == "Dispatched"
    assert trial.record.demand is not None and trial.record.demand.pods == 2


def test_a_candidate_of_another_namespace_is_refused() -> None:
    snapshot = make_snapshot(now=at(0)).obj()
    wire = make_appwrapper("try").job(gpu=4).obj()
    wire["metadata"]["namespace"] = "team-a"
    with pytest.raises(dryrun.Refused) as refused:
        dryrun.trial(json.dumps(wire).encode(), "application/json", namespace="team-b",
                     snapshot=snapshot, config=RunConfig(), now=at(0))
    assert refused.value.status == 400
    assert "names namespace 'team-a'" in refused.value.message


async def test_one_dry_run_at_a_time_the_next_waits_then_is_refused() -> None:
    gate = dryrun.Gate(wait_s=0.2)
    release = asyncio.Event()
    order: list[str] = []

    async def first() -> None:
        async with gate.turn():
            order.append("first in")
            await release.wait()
        order.append("first out")

    async def second() -> None:
        async with gate.turn():
            order.append("second in")

    holder = asyncio.create_task(first())
    await asyncio.sleep(0)
    with pytest.raises(dryrun.Refused) as refused:
        await second()
    assert (refused.value.status, refused.value.retry_after) == (429, dryrun.RETRY_AFTER_S)
    waiter = asyncio.create_task(second())  # waits for its turn ...
    await asyncio.sleep(0.05)
    release.set()  # ... which comes within the wait
    await asyncio.gather(holder, waiter)
    assert order == ["first in", "first out", "second in"]
