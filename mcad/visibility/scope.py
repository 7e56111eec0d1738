"""What one caller may see, and the sentences cleaned of what they may not.

The API server has already authorized the request itself (``list pendingappwrappers``
in the namespace asked for, ``get views`` for the page). What it cannot know is which
rows of a page that shows many namespaces this caller may read: that is asked here, per
namespace, with the same right that lists that namespace's queue (RBAC's
``list pendingappwrappers`` there), so a role that grants the queue of a namespace also
grants its rows on the page. A caller allowed to list the queue of every namespace (a
cluster-wide grant) sees everything; node names on the page need ``get`` on
``spokeclusters`` (an administrator's right).

Sentences may name other AppWrappers ("the room is held for team-a/big, first in
line"): ``redact`` replaces every key of an AppWrapper the caller may not see with "an
AppWrapper of another namespace", so a tenant learns that something waits ahead, never
whose.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from mcad.access import Caller, Question, Reviews
from mcad.api.visibility import GROUP, PENDING
from mcad.core.placement.capacity import AppWrapperKey

OTHERS = "an AppWrapper of another namespace"
CONCURRENT_REVIEWS = 8
KEY = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?")
"""What an AppWrapper's key looks like in a sentence (namespace/name)."""


@dataclass(frozen=True)
class Scope:
    """The namespaces one caller may see (all, or these), and whether node names."""

    everything: bool
    namespaces: frozenset[str] = frozenset()
    node_names: bool = False

    def sees(self, key: str) -> bool:
        return self.everything or key.partition("/")[0] in self.namespaces

    def sees_namespace(self, namespace: str) -> bool:
        return self.everything or namespace in self.namespaces


EVERYTHING = Scope(True, node_names=True)


def redact(text: str, scope: Scope, known: Collection[str]) -> str:
    """``text`` with the keys of ``known`` AppWrappers outside ``scope`` replaced."""
    if scope.everything or "/" not in text:
        return text

    def hide(match: re.Match[str]) -> str:
        key = match.group(0)
        return OTHERS if key in known and not scope.sees(key) else key

    return KEY.sub(hide, text)


class Scopes:
    """Works out a caller's scope with SubjectAccessReviews (cached by ``Reviews``)."""

    def __init__(self, reviews: Reviews) -> None:
        self.reviews = reviews

    async def of(self, caller: Caller, namespaces: Iterable[str]) -> Scope:
        """What ``caller`` may see of ``namespaces`` (everything with a cluster-wide grant)."""
        if await self.reviews.allowed(caller, _list_rows("")):
            nodes = await self.reviews.allowed(caller, Question(
                verb="get", group="cluster.codeflare.dev", resource="spokeclusters"))
            return Scope(True, node_names=nodes)
        gate = asyncio.Semaphore(CONCURRENT_REVIEWS)

        async def may(namespace: str) -> tuple[str, bool]:
            async with gate:
                return namespace, await self.reviews.allowed(caller, _list_rows(namespace))

        answers = await asyncio.gather(*(may(ns) for ns in sorted(set(namespaces))))
        return Scope(False, frozenset(ns for ns, ok in answers if ok))

    async def within(self, caller: Caller, namespace: str) -> Scope:
        """The scope of a request the API server authorized in ``namespace``: that
        namespace, or everything with a cluster-wide grant."""
        if await self.reviews.allowed(caller, _list_rows("")):
            return Scope(True)
        return Scope(False, frozenset({namespace}))


def _list_rows(namespace: str) -> Question:
    return Question(verb="list", group=GROUP, resource=PENDING, namespace=namespace)


def keys_of(keys: Iterable[AppWrapperKey]) -> frozenset[str]:
    return frozenset(str(k) for k in keys)
