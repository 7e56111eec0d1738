"""Answering one AdmissionReview: ``mcad.webhook.review``'s pure plan, and the hub's
SubjectAccessReviews it asks for.

Why apart from the server: two servers answer the same reviews. The replica's own TLS
server (``mcad.webhook.server``) does, and so does the webhooks' own process
(``mcad.webhook.conversion_server``, with ``--conversion-address``), where no dispatch
cycle and no watch event of the controller's stands in front of a review: on the
controller's event loop a review waited 757 ms on average through a 1,000 AppWrapper
drain (the hub's own histogram), while the hub answered its SubjectAccessReview in
1.5 ms (docs/benchmarks.md, "Scale").

Each wrapped kind costs one SubjectAccessReview (a query, not a write, so a standby may
make it), at most ``REVIEWS_AT_ONCE`` in flight; when the hub cannot answer one, the
AppWrapper is refused with a sentence saying so (the reviews still in flight are
cancelled): an unchecked AppWrapper is never admitted.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcad.config import RunConfig
from mcad.gateway import refs, verbs
from mcad.gateway.connection import Connection
from mcad.gateway.errors import ApiError, UnknownKind
from mcad.gateway.refs import Discovery
from mcad.webhook.review import (
    REVIEWS_AT_ONCE,
    AccessCheck,
    KindKey,
    ReviewPlan,
    access_review,
    decide,
    denials,
    kinds_to_review,
    plan_review,
    plural_of,
    response,
)

PATH = "/validate-appwrapper"
"""Where both servers answer AdmissionReviews."""
MUTATE_PATH = "/mutate-appwrapper"
"""Where both servers put mcad's finalizer on a new AppWrapper
(``mcad.webhook.review.with_finalizer``: pure, no access check, no configuration)."""
REVIEW_TIMEOUT_S = 5.0
MAX_BODY = 8 * 1024 * 1024
"""The largest AdmissionReview either server reads (an object the API server stores is at
most a few MiB, and a review carries it twice, old and new)."""


class Reviewer:
    """The answer to an AdmissionReview, with ``hub`` asked about access."""

    def __init__(self, *, hub: Connection, config: RunConfig) -> None:
        self.hub = hub
        self.config = config
        self.discovery = Discovery(hub)

    async def answer(self, review: Any) -> dict[str, Any]:
        """The AdmissionReview response for ``review`` (a parsed body)."""
        plan = plan_review(review, config=self.config)
        try:
            answers = await self._review_kinds(plan)
        except _Unchecked as failed:
            return response(
                plan.uid, allowed=False, code=503,
                message=f"mcad could not check whether the requester may create "
                        f"{failed.check.describe} ({failed.error.message}); try again")
        return decide(plan, denials(plan, answers))

    async def _review_kinds(self, plan: ReviewPlan) -> dict[KindKey, tuple[str, bool]]:
        """Ask the hub about each wrapped kind, ``REVIEWS_AT_ONCE`` at a time: kind ->
        (its resource name, allowed). The first review that fails cancels the others and
        raises ``_Unchecked`` (of the failures, the one of the earliest object)."""
        room = asyncio.Semaphore(REVIEWS_AT_ONCE)
        answers: dict[KindKey, tuple[str, bool]] = {}

        async def review(check: AccessCheck) -> None:
            async with room:
                plural = await self._plural(check)
                try:
                    answer = await verbs.create(
                        self.hub, refs.SUBJECTACCESSREVIEWS, access_review(check, plural, plan),
                        fenced=False, timeout=REVIEW_TIMEOUT_S, attempts=2)
                except ApiError as err:
                    raise _Unchecked(check, err) from err
            answers[check.kind_key] = (plural, bool((answer.get("status") or {}).get("allowed")))

        kinds = kinds_to_review(plan.checks)
        try:
            async with asyncio.TaskGroup() as group:
                for check in kinds:
                    group.create_task(review(check))
        except* _Unchecked as failed:
            unchecked = [e for e in failed.exceptions if isinstance(e, _Unchecked)]
            raise min(unchecked, key=lambda e: kinds.index(e.check)) from None
        return answers

    async def _plural(self, check: AccessCheck) -> str:
        try:
            return (await self.discovery.resource_for(check.api_version, check.kind)).plural
        except (UnknownKind, ApiError):
            return plural_of(check.kind)


class _Unchecked(Exception):
    """The hub could not answer the SubjectAccessReview for ``check``'s kind."""

    def __init__(self, check: AccessCheck, error: ApiError) -> None:
        super().__init__(check.describe)
        self.check = check
        self.error = error
