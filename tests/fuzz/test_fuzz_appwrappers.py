"""Fuzzing the checks an AppWrapper goes through (``mcad validate``, the webhook): 1,000
generated AppWrappers, valid and malformed (wrong types, huge numbers, deep nesting, odd
Unicode, quantities at the edges). None crashes; each one is accepted or refused with
sentences that say where the problem is."""

from __future__ import annotations

import io
import json

import yaml
from hypothesis import HealthCheck, given, settings

from mcad.cli.validate import validate
from mcad.config import RunConfig
from mcad.validation import check_appwrapper
from mcad.webhook.review import decide, plan_review
from tests.builders.fuzz import appwrapper, names_a_field

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
