"""Every answer of the visibility API (``mcad.visibility.answers``), built from one cycle
and one plan, as one caller may see it: a tenant gets their namespaces' rows (at the
queue's own positions), the quota nodes their AppWrappers charge and nothing of
anyone else's, not even a name in a sentence; the queue, the page and an explanation
agree on the estimated start (the plan's); the cluster picture names nodes only for
whoever may read the clusters."""

from __future__ import annotations

from typing import Any

from mcad.controller.estimator import Forecast
from mcad.core.cycle.decide import dispatch_cycle
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.views.estimates import Estimate, Estimates
from mcad.core.views.explain import explain
from mcad.visibility import answers
from mcad.visibility.scope import EVERYTHING, OTHERS, Scope
from tests.builders.clusters import make_cluster
from tests.builders.quota import make_tree
from tests.builders.snapshots import at, make_entry, make_snapshot
from tests.visibility.teams import two_teams

TEAM_B = Scope(False, frozenset({"team-b"}))


def plan_for(key: str, seconds: float) -> Forecast:
    return Forecast(at(3600), Estimates({AppWrapperKey(key): Estimate(
        at(seconds), (AppWrapperKey("team-x/run"),), "after team-x/run ends")}, 2, at(seconds)),
        {}, 0.01)


def rows(listed: dict[str, Any]) -> list[tuple[int, str]]:
    return [(i["position"], f"{i['metadata']['namespace']}/{i['metadata']['name']}")
            for i in listed["items"]]


def test_a_tenant_sees_only_their_rows_at_the_queues_own_positions() -> None:
    snapshot, result = two_teams()
    assert rows(answers.pending_list(snapshot, result, None, EVERYTHING)) == [
        (1, "team-a/big"), (2, "team-b/small")]
    assert rows(answers.pending_list(snapshot, result, None, TEAM_B)) == [(2, "team-b/small")]
    assert rows(answers.pending_list(snapshot, result, None, EVERYTHING,
                                     namespace="team-a")) == [(1, "team-a/big")]


def test_another_namespaces_appwrapper_is_never_named_to_a_tenant() -> None:
    snapshot, result = two_teams()
    (mine,) = answers.pending_list(snapshot, result, None, TEAM_B)["items"]
    assert "team-a/big" not in mine["message"]
    assert f"held for {OTHERS}, first in line" in mine["message"]
    (_, theirs) = answers.pending_list(snapshot, result, None, EVERYTHING)["items"]
    assert "held for team-a/big" in theirs["message"]  # an administrator sees whose

    found = explain(snapshot, result, AppWrapperKey("team-b/small"))
    assert found is not None
    told = answers.explanation(found, snapshot, None, TEAM_B)
    assert "team-a/big" not in str(told)
    assert (told["ahead"], told["aheadOthers"]) == ([], 1)
    page = answers.overview(snapshot, result, None, TEAM_B)
    assert "team-a" not in str(page["queue"]) + str(page["running"])


def test_a_tenant_sees_the_quota_nodes_their_work_charges_and_their_ancestors() -> None:
    snapshot, result = two_teams()
    paths = [q["path"] for q in answers.overview(snapshot, result, None, TEAM_B)["quota"]]
    assert paths == ["/root", "/root/team-b"]
    everything = answers.overview(snapshot, result, None, EVERYTHING)["quota"]
    assert len(everything) == 5


def test_node_names_only_for_who_may_read_the_clusters() -> None:
    snapshot, result = two_teams()
    named = answers.overview(snapshot, result, None, EVERYTHING)["clusters"][0]["nodes"]
    anonymous = answers.overview(snapshot, result, None, TEAM_B)["clusters"][0]["nodes"]
    assert [n["name"] for n in named] == ["spoke-1-node-1", "spoke-1-node-2"]
    assert [n["name"] for n in anonymous] == ["node 1", "node 2"]
    assert [n["used"] for n in anonymous] == [8, 0]  # the picture itself is the same


def test_the_queue_the_page_and_the_explanation_agree_on_the_estimate() -> None:
    snapshot, result = two_teams()
    plan = plan_for("team-b/small", 4200)
    (row,) = answers.pending_list(snapshot, result, plan, TEAM_B)["items"]
    (on_page,) = answers.overview(snapshot, result, plan, TEAM_B)["queue"]
    found = explain(snapshot, result, AppWrapperKey("team-b/small"))
    assert found is not None
    told = answers.explanation(found, snapshot, plan, TEAM_B)
    assert row["estimatedStart"] == on_page["estimatedStart"] == told["estimatedStart"] \
        == "2024-05-01T11:10:00Z"
    assert "planned at 2024-05-01T11:00:00Z" in told["estimateBasis"]
    # No plan yet: none anywhere (the core's own guess is not a second opinion).
    (row,) = answers.pending_list(snapshot, result, None, TEAM_B)["items"]
    told = answers.explanation(found, snapshot, None, TEAM_B)
    assert row["estimatedStart"] is None and told["estimatedStart"] is None
    assert told["estimateBasis"].startswith("no estimate yet")


def test_the_page_shows_queue_clusters_running_and_quota() -> None:
    cluster = (make_cluster("spoke-1").nodes(2, gpu=8).used(0, gpu=8)
               .held("default/run", 0, gpu=8))
    snapshot = make_snapshot(now=at(0)).clusters(cluster).quota(
        make_tree("quota_context").node("root", gpu=16).build()).add(
        make_entry("run").job(gpu=8).labels(quota_context="root").admitted("spoke-1")
        .dispatched(at(-60)),
        make_entry("big").job(pods=2, gpu=8).labels(quota_context="root").priority(5)
        .created(at(-30)),
        make_entry("small").job(gpu=4).labels(quota_context="root").created(at(-20))).obj()
    result = dispatch_cycle(snapshot)
    plan = Forecast(at(0), Estimates({AppWrapperKey("default/big"): Estimate(
        at(600), (AppWrapperKey("default/run"),), "after default/run ends")}, 2, at(600)),
        {}, 0.01)
    page = answers.overview(snapshot, result, plan, EVERYTHING)
    assert [(q["metadata"]["name"], q["estimatedStart"]) for q in page["queue"]] == [
        ("big", "2024-05-01T10:10:00Z")]
    assert page["clusters"][0]["nodes"][0] == {"name": "spoke-1-node-1", "gpus": 8,
                                               "used": 8, "ready": True}
    assert (page["clusters"][0]["used"], page["clusters"][0]["gpus"]) == (8, 16)
    assert page["clusters"][0]["starting"] == ["default/small"]  # dispatched this cycle
    assert [r["key"] for r in page["running"]] == ["default/run"]
    (root,) = page["quota"]
    assert root["limit"]["nvidia.com/gpu"] == 16 and root["used"]["nvidia.com/gpu"] == 8
    assert page["planned"] == "2024-05-01T10:00:00Z"
    assert page["scope"] == {"everything": True, "namespaces": []}


def test_explain_says_what_gang_health_says_of_a_running_appwrapper() -> None:
    snapshot, result = two_teams()
    found = explain(snapshot, result, AppWrapperKey("team-x/run"))
    assert found is not None and found.outcome == "Running"
    told = answers.explanation(found, snapshot, None, EVERYTHING, conditions=[
        {"type": "Unhealthy", "status": "True", "reason": "FoundFailedPods",
         "message": "pod run-3 failed with exit code 137 (OOMKilled); the gang is reset at "
                    "10:01:00 unless it recovers (reset 1 of 3)"}])
    assert told["outcome"] == "Unhealthy"
    assert told["message"] == ("dispatched to cluster spoke-1; pod run-3 failed with exit "
                               "code 137 (OOMKilled); the gang is reset at 10:01:00 unless "
                               "it recovers (reset 1 of 3)")
