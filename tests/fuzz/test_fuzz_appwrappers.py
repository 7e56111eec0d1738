"""Fuzzing the checks an AppWrapper goes through (``mcad validate``, the webhook): 1,000
generated AppWrappers, valid and malformed (wrong types, huge numbers, deep nesting, odd
Unicode, quantities at the edges). None crashes; each one is accepted or refused with
sentences that say where the problem is. Drawn again with their items padded to around
the cap of 100: over it, refused with its one sentence; at or under it, as before."""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcad.api.documents import parse_object
from mcad.cli.validate import validate
from mcad.config import RunConfig
from mcad.validation import MAX_WRAPPED_ITEMS, check_appwrapper
from mcad.webhook import conversion
from mcad.webhook.review import decide, plan_review
from tests.builders.fuzz import appwrapper, item, names_a_field

CONFIG = RunConfig()


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(appwrapper())
def test_every_appwrapper_is_accepted_or_refused_with_sentences(doc: dict) -> None:  # type: ignore[type-arg]
    checked = check_appwrapper(doc, config=CONFIG, namespace="team-a")
    for problem in checked.problems:
        assert problem and "Traceback" not in problem
        assert names_a_field(problem), problem
    if not checked.problems:
        assert checked.demand is not None
    review = {"request": {"uid": "u", "operation": "CREATE", "namespace": "team-a",
                          "userInfo": {"username": "alice"}, "object": doc}}
    plan = plan_review(review, config=CONFIG)
    answer = decide(plan, [])["response"]
    assert answer["allowed"] is (not checked.problems)
    json.dumps(answer)  # always a valid response body


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(appwrapper())
def test_mcad_validate_never_crashes_on_a_fuzzed_file(doc: dict) -> None:  # type: ignore[type-arg]
    text = yaml.safe_dump(doc, allow_unicode=True)
    report = validate(["-"], stdin=io.StringIO(text), config=CONFIG)
    assert len(report.summaries) + len(report.problems) >= 1
    for problem in report.problems:
        assert problem.startswith("<stdin>") and problem.endswith("."), problem


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(appwrapper(), st.integers(MAX_WRAPPED_ITEMS - 2, MAX_WRAPPED_ITEMS + 2),
       st.lists(item(), min_size=1, max_size=3))
def test_appwrappers_near_the_cap_on_items(doc: dict[str, Any], count: int,
                                           padding: list[dict[str, Any]]) -> None:
    spec = doc.get("spec")
    resources = spec.get("resources") if isinstance(spec, dict) else None
    items = resources.get("GenericItems") if isinstance(resources, dict) else None
    if isinstance(items, list):
        while len(items) < count:
            items.append(padding[len(items) % len(padding)])
    checked = check_appwrapper(doc, config=CONFIG, namespace="team-a")
    for problem in checked.problems:
        assert problem and names_a_field(problem), problem
    if isinstance(items, list) and len(items) > MAX_WRAPPED_ITEMS:
        assert checked.problems == [
            f"spec.resources.GenericItems has {len(items)} items, more than the "
            f"{MAX_WRAPPED_ITEMS} one AppWrapper may wrap: split the work into several "
            "AppWrappers"]
    review = {"request": {"uid": "u", "operation": "CREATE", "namespace": "team-a",
                          "userInfo": {"username": "alice"}, "object": doc}}
    answer = decide(plan_review(review, config=CONFIG), [])["response"]
    assert answer["allowed"] is (not checked.problems)
    json.dumps(answer)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(appwrapper(), st.sampled_from(["workload.codeflare.dev/v1beta1",
                                      "workload.codeflare.dev/v1beta2"]))
def test_the_conversion_webhook_answers_any_appwrapper(doc: dict[str, Any], to: str) -> None:
    """Broken AppWrappers through the conversion webhook (both ways): always a
    ConversionReview response, Success or a Failure with a sentence; and one the API
    server could hold (it passes the v1beta1 schema: nothing else reaches the webhook)
    comes back from v1beta2 to what was sent."""
    sent = copy.deepcopy(doc)
    review = {"request": {"uid": "u", "desiredAPIVersion": to, "objects": [sent]}}
    answer = json.loads(conversion.review(json.dumps(review).encode()))["response"]
    assert answer["uid"] == "u"
    if answer["result"]["status"] == "Failure":
        assert answer["result"]["message"]
        return
    (converted,) = answer["convertedObjects"]
    if to == "workload.codeflare.dev/v1beta2" and parse_object(doc).model is not None:
        back = {"request": {"uid": "v", "desiredAPIVersion": doc["apiVersion"],
                            "objects": [converted]}}
        again = json.loads(conversion.review(json.dumps(back).encode()))["response"]
        assert again["convertedObjects"] == [json.loads(json.dumps(doc))]
