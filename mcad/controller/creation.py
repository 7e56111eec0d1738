"""Creating a run's wrapped objects on its cluster: its own step of the reconcile.

Why a step of its own: creation comes only after the dispatch is persisted (the hub
records the run first, so a restart or a new leader finishes the creation rather than
deciding again), and only once per run (``Progress.created`` names the run whose
objects are all there). ``ObjectManager.ensure`` does the work (idempotent: an object
that carries this AppWrapper's uid is ours). While creation is being retried the
Dispatched condition says so (reason ``Creating`` with what is retried), and goes back
to ``Dispatched`` once everything is there. A kind the cluster does not serve sends the
AppWrapper back to the queue to go elsewhere (``KindNotServed``, not counted).
"""

from __future__ import annotations

from mcad.controller.clock import utcnow
from mcad.controller.lifecycle import RECHECK_S, Lifecycle, Next
from mcad.controller.objects import KindNotServed, ObjectManager
from mcad.controller.records import AppWrapperRecord
from mcad.controller.writer import HubWriter
from mcad.core.life.requeue import KIND_NOT_SERVED
from mcad.gateway.errors import ApiError

CREATING = "Creating"
"""Dispatched condition reason while creating the wrapped objects is being retried."""


class Creation:
    def __init__(self, *, objects: ObjectManager, writer: HubWriter,
                 lifecycle: Lifecycle) -> None:
        self.objects = objects
        self.writer = writer
        self.lifecycle = lifecycle

    async def create(self, rec: AppWrapperRecord) -> Next | None:
        """Create what of this run is missing; None once everything is there (the
        reconcile goes on), else when to look again. An API error is raised: the work
        queue retries the AppWrapper after its growing, capped backoff."""
        run = rec.run
        link = self.objects.usable_link(rec.cluster)
        try:
            if not await self.objects.ensure(rec):
                return Next(RECHECK_S if rec.admitted else None)
        except KindNotServed as err:
            if link is not None and link.discovery is not None:
                await link.discovery.refresh()  # it was behind: the next cycle knows better
            return Next(await self.lifecycle.start_requeue(rec, KIND_NOT_SERVED, str(err)))
        except ApiError as err:
            await self._say(rec, f"creating the wrapped objects on cluster {rec.cluster} "
                                 f"failed ({err}); retrying with backoff")
            raise
        await self._say(rec, None)
        rec.progress.created = run
        self.lifecycle.pace.earn(utcnow().timestamp())  # the write its pods will need
        return None

    async def _say(self, rec: AppWrapperRecord, retrying: str | None) -> None:
        """Say on the Dispatched condition what creation is retrying (reason Creating),
        and put it back to Dispatched once everything is there."""
        cond = rec.condition("Dispatched") or {}
        if retrying is not None and cond.get("message") != retrying:
            await self.writer.patch_status(rec, {"message": retrying}, conditions=(
                ("Dispatched", "True", CREATING, retrying),))
        elif retrying is None and cond.get("reason") == CREATING:
            message = f"dispatched to cluster {rec.cluster}"
            await self.writer.patch_status(rec, {"message": message}, conditions=(
                ("Dispatched", "True", "Dispatched", message),))
