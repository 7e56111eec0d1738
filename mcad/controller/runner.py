"""The controller process: hub informers, spoke links, dispatcher, reconcilers, reports.

The concurrency, stated once:

- every long-lived loop is a named task under one ``Supervisor`` (restarted with capped
  backoff when it fails, counted in ``mcad_task_restarts_total``): the four hub
  informers, the dispatcher, the reconcilers' workers, the reports, and one task per
  spoke link (which supervises its own watches and probe);
- informers only update caches and add keys: AppWrapper keys to the work queue,
  "something changed" to the dispatcher;
- the dispatcher is the only task that decides; it writes orders on the records and
  adds keys;
- the work queue's workers are the only ones that write about an AppWrapper, one key
  at a time (``Reconciler``); a second queue, keyed by cluster, collects what a lost
  cluster was left with once it answers again (``Leftovers``);
- one task posts Events (``EventSender``: bounded, aggregating repeats);
- one task keeps the history of run times on the hub (``RuntimeBook``), and one plans
  estimated starts from the last cycle (``Estimator``, in a worker thread, on frozen
  values);
- reports read the caches and write observations (metrics, SpokeCluster status).

Each part of an AppWrapper's record has one writer (``controller/records.py``). Nothing
else runs: no callbacks that write, no shared flags, no ad hoc timers (every timer is a
work queue timer of a key).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.admission import Admission
from mcad.controller.creation import Creation
from mcad.controller.dispatcher import Dispatcher
from mcad.controller.estimator import Estimator
from mcad.controller.events import EventSender
from mcad.controller.hub import HubCache
from mcad.controller.inflight import InflightLimit
from mcad.controller.leftovers import Leftovers
from mcad.controller.lifecycle import Lifecycle
from mcad.controller.objects import ObjectManager
from mcad.controller.reconciler import Reconciler
from mcad.controller.reports import Reports
from mcad.controller.runtimes import RuntimeBook
from mcad.controller.spoke_registry import SpokeRegistry
from mcad.controller.state import ControllerState
from mcad.controller.supervisor import Supervisor, TaskFactory
from mcad.controller.workqueue import WorkQueue, run_workers
from mcad.controller.writer import HubWriter
from mcad.core.life.runhistory import RuntimePolicy
from mcad.core.placement.capacity import AppWrapperKey
from mcad.gateway.connection import Connection, WriteFence

log = logging.getLogger(__name__)
WORKERS = 32
"""The default of ``RunConfig.workers``: the most reconciled at once (``InflightLimit``
sets how many, up to it)."""
LOCAL = "local"


class Controller:
    def __init__(self, *, hub: Connection, connect_hub: Callable[[str], Awaitable[Connection]],
                 config: RunConfig, fence: WriteFence | None = None, local: bool = False,
                 workers: int = WORKERS,
                 extra_tasks: Sequence[tuple[str, TaskFactory]] = (),
                 on_listed: Callable[[], None] = lambda: None) -> None:
        hub.write_fence = fence
        self.hub = hub
        metrics.register_api_client(hub.name)
        self.config = config
        self.workers = workers
        self.extra_tasks = list(extra_tasks)
        """More long-lived work of the leader (the webhook's certificates), supervised."""
        self.state = ControllerState()
        self.queue: WorkQueue[AppWrapperKey] = WorkQueue(
            "appwrappers", following=self._runs, following_workers=max(1, workers // 2),
            capacity=workers)
        self.limit = InflightLimit(most=workers)
        """How many of ``workers`` may reconcile at once: follows the hub's writes."""
        hub.answered = self._answered
        metrics.report_reconcile_limit(workers)
        self.supervisor = Supervisor()
        self.events = EventSender(hub)
        self.writer = HubWriter(hub, self.events)
        self.reports = Reports(hub=hub, state=self.state)
        self.objects = ObjectManager(state=self.state, config=config, writer=self.writer,
                                     released=self.changed)
        self.leftovers = Leftovers(hub=hub, state=self.state)
        self.spoke_queue: WorkQueue[str] = WorkQueue("spokes")
        self.runtimes = RuntimeBook(hub=hub, namespace=config.namespace, policy=RuntimePolicy(
            default=timedelta(seconds=config.estimates.default_runtime_seconds)))
        self.dispatcher = Dispatcher(state=self.state, config=config, queue=self.queue,
                                     runtimes=self.runtimes)
        self.estimator = Estimator(state=self.state, config=config, book=self.runtimes,
                                   last_cycle=lambda: self.dispatcher.last)
        lifecycle = Lifecycle(config=config, writer=self.writer, objects=self.objects,
                              leftovers=self.leftovers, changed=self.changed,
                              completed=self.runtimes.completed)
        self.reconciler = Reconciler(
            state=self.state, config=config, queue=self.queue, changed=self.changed,
            admission=Admission(config=config, writer=self.writer, objects=self.objects,
                                changed=self.changed),
            creation=Creation(objects=self.objects, writer=self.writer, lifecycle=lifecycle),
            lifecycle=lifecycle)
        self.links = SpokeRegistry(state=self.state, config=config, supervisor=self.supervisor,
                           connect_hub=connect_hub, fence=fence,
                           on_change=self._on_spoke_change, on_health=self._on_link_health,
                           kinds_in_use=self._kinds_in_use)
        self.hub_cache = HubCache(hub=hub, state=self.state, config=config, queue=self.queue,
                                  dispatcher=self.dispatcher, spokes_changed=self._spokes_changed,
                                  on_listed=on_listed)
        if local:  # the hub itself as cluster "local", with no SpokeCluster object
            self.state.spoke_objects[LOCAL] = {"metadata": {"name": LOCAL},
                                               "spec": {"local": True}}

    def _runs(self, key: AppWrapperKey) -> bool:
        """The AppWrapper runs on a cluster: its key waits in the work queue's following
        line (``controller/pacing.py`` states the hub's budget)."""
        rec = self.state.appwrappers.get(key)
        return rec is not None and rec.admitted

    def _answered(self, rtt: float) -> None:
        """A hub write came back after ``rtt`` seconds: the reconcile limit reads it."""
        now = asyncio.get_running_loop().time()  # (the loop's clock: monotonic)
        if self.limit.observe(rtt, in_flight=self.queue.busy(), now=now):
            self.queue.set_capacity(self.limit.limit)
            metrics.report_reconcile_limit(self.limit.limit)
            log.debug("reconcile limit %d (%.1f of ours queued at the hub, base %.1f ms)",
                      self.limit.limit, self.limit.queued, 1000 * (self.limit.base or 0.0))

    def ready(self) -> bool:
        return not self.hub_cache.not_synced()

    def not_ready_reason(self) -> str:
        behind = self.hub_cache.not_synced()
        return f"the hub's {', '.join(behind)} are not listed yet (or their watch broke)" \
            if behind else ""

    def changed(self) -> None:
        """Quota or capacity may have been given back: decide again, report again."""
        self.dispatcher.trigger()
        self.reports.dirty()

    async def run(self) -> None:
        tasks: list[tuple[str, TaskFactory]] = [
            (f"watch {name}", informer.run) for name, informer in self.hub_cache.informers.items()]
        tasks += [("dispatcher", lambda: self.dispatcher.run(self.ready)),
                  ("reconcilers", lambda: run_workers(self.queue, self.reconciler.reconcile,
                                                     workers=self.workers)),
                  ("spoke reconcilers", lambda: run_workers(self.spoke_queue,
                                                           self.leftovers.collect, workers=2)),
                  ("reports", self.reports.run), ("summary", self.reports.summarize),
                  ("events", self.events.run),
                  ("runtime history", self.runtimes.run), ("estimates", self.estimator.run),
                  *self.extra_tasks]
        async with asyncio.TaskGroup() as group:
            group.create_task(self.supervisor.run(*tasks), name="supervisor")
            await self.supervisor.started()
            self.links.sync()  # the links known before any SpokeCluster is listed (--local)

    # -- what spoke links tell us and ask --------------------------------------------------
    def _kinds_in_use(self, cluster: str) -> set[tuple[str, str]]:
        """(apiVersion, kind) of what the AppWrappers dispatched to ``cluster`` wrap: a
        link (re)built for it watches them again before it is ready."""
        return {kind for rec in self.state.appwrappers.values()
                if rec.admitted and rec.cluster == cluster for kind in rec.kinds()}

    def _spokes_changed(self) -> None:
        self.links.sync()
        for name, link in self.state.links.items():
            if link.leftovers:
                self.spoke_queue.add(name)

    def _on_spoke_change(self, cluster: str, uids: Iterable[str], capacity: bool) -> None:
        for uid in uids:
            key = self.state.by_uid.get(uid)
            if key is not None:
                self.queue.add(key)
        if capacity:
            self.reports.dirty()
            if self.dispatcher.room_matters:
                self.dispatcher.trigger()

    def _on_link_health(self, cluster: str) -> None:
        self.changed()
        if cluster:
            self.spoke_queue.add(cluster)
        for rec in self.state.appwrappers.values():
            if cluster and rec.cluster == cluster:
                self.queue.add(rec.key)
