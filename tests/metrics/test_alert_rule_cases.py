"""Every alert the prometheus overlay installs has promtool cases (run by ``make rules``)
where it fires and where it does not: an alert added without both fails here."""

from __future__ import annotations

from pathlib import Path

import yaml

OVERLAY = Path(__file__).resolve().parents[2] / "manifests" / "overlays" / "prometheus"


def test_every_alert_has_a_case_that_fires_and_one_that_does_not() -> None:
    rule = yaml.safe_load((OVERLAY / "prometheusrule.yaml").read_text())
    alerts = {r["alert"] for group in rule["spec"]["groups"] for r in group["rules"]
              if "alert" in r}
    tests = yaml.safe_load((OVERLAY / "tests" / "rules-test.yaml").read_text())
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test") or []:
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts, "the overlay has no alerts"
    assert alerts - fires == set(), f"no case where these fire: {sorted(alerts - fires)}"
    assert alerts - quiet == set(), f"no case where these stay quiet: {sorted(alerts - quiet)}"
