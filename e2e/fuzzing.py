"""Fuzzed AppWrappers sent to the real hub, with mcad and its webhook running.

Shared by ``e2e/security/test_fuzz.py`` (a couple of hundred, inside ``make test``) and
``benchmarks/fuzz.py`` (more, figures into docs/security.md). Each AppWrapper drawn by
``tests.builders.fuzz`` is created on the hub, and the outcome sorted: admitted; refused by
the API server's own schema (the CRD); refused by mcad's webhook; anything else (a 5xx, a
timeout) is a failure of the run. A refusal must say where the problem is.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError
from tests.builders.fuzz import appwrapper, names_a_field


def draw(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` AppWrappers from the fuzz strategy, reproducibly for ``seed``."""
    drawn: list[dict[str, Any]] = []

    @settings(max_examples=count, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(appwrapper())
    def collect(doc: dict[str, Any]) -> None:
        drawn.append(doc)

    hypothesis_seed(seed)(collect)()
    return drawn[:count]


@dataclass
class HubFuzz:
    sent: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    unexplained: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


async def send(hub: Connection, namespace: str, docs: list[dict[str, Any]]) -> HubFuzz:
    report = HubFuzz()
    for i, doc in enumerate(docs):
        body = json.loads(json.dumps(doc))
        if isinstance(body.get("metadata"), dict):
            body["metadata"]["name"] = f"fuzz-{i}"
            body["metadata"].pop("namespace", None)
        report.sent += 1
        try:
            await verbs.create(hub, refs.APPWRAPPERS, body, namespace=namespace)
        except ApiError as err:
            if err.status >= 500 or err.status == 0:  # a crash, a time-out: never right
                report.failures.append(f"fuzz-{i}: HTTP {err.status} {err.message[:300]}")
                continue
            by_webhook = "admission webhook" in err.message
            report.outcomes["refused by mcad's webhook" if by_webhook
                            else "refused by the API server (the CRD's schema)"] += 1
            if not names_a_field(err.message):
                report.unexplained.append(f"fuzz-{i}: {err.message[:300]}")
            continue
        report.outcomes["admitted"] += 1
    return report
