"""A Python client for submitting work to mcad, from a script or a notebook.

CodeFlare's users submitted AppWrappers from notebooks through an SDK rather than by
writing YAML; this is mcad's::

    from mcad.client import Client

    mcad = Client()                                   # $KUBECONFIG, or ~/.kube/config
    name = mcad.submit("job.yaml", namespace="team-a", priority=5)
    print(mcad.position(name, namespace="team-a"))    # where it waits, why, and until when
    mcad.wait(name, "Completed", namespace="team-a")  # a progress line while it waits
    mcad.delete(name, namespace="team-a")

``submit`` takes an AppWrapper as it is, or wraps a Job, PyTorchJob, JobSet, RayCluster
or Deployment exactly as ``mcad wrap`` does (its demand read from its pod templates).
Every method is synchronous: the client runs its own event loop in a thread of its own,
so it works the same in a script and in a notebook (whose cell already runs a loop).
It cleans up after itself: ``close()`` (or ``with Client() as mcad:``) ends its
connection and its thread at once; a client dropped without either (a notebook cell run
again, the kernel ended) is closed when it is collected, or at exit, so no "Unclosed
client session" is ever printed. ``submit`` takes v1beta1 and v1beta2 AppWrappers alike
(``api="v1beta2"`` wraps a plain object as v1beta2).
Position, reason and estimated start come from the visibility API, asked through the
hub as ``mcad queue`` asks it (``mcad.visibility.client``): with your credentials, so
you see what your role lets you see. Errors are ``McadError`` with a sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml

from mcad.api.visibility import parse_moment
from mcad.api.wrap import CannotWrap, wrap
from mcad.core.life.wrapping import APPWRAPPER_API_VERSION
from mcad.gateway import verbs
from mcad.gateway.connection import Connection, connect, default_kubeconfig_path
from mcad.gateway.errors import AlreadyExists, ApiError, GatewayError, NotFound
from mcad.gateway.refs import APPWRAPPERS, APPWRAPPERS_V1BETA2
from mcad.visibility import client as visibility
from mcad.visibility.client import NoAnswer

__all__ = ["AppWrapperStatus", "Client", "McadError", "QueuePosition"]
T = TypeVar("T")
TERMINAL = ("Completed", "Failed")


class McadError(Exception):
    """Something the client could not do, in one sentence."""


@dataclass(frozen=True)
class AppWrapperStatus:
    """An AppWrapper's state as the hub records it."""

    namespace: str
    name: str
    state: str
    """Pending, Running, Completed, Failed (or "" before mcad has seen it)."""
    cluster: str
    """The cluster it was dispatched to ("" while queued)."""
    message: str
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Its conditions by type (Dispatched, PodsReady, Requeuing, Completed, ...)."""

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> AppWrapperStatus:
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        return cls(str(meta.get("namespace", "")), str(meta.get("name", "")),
                   str(status.get("state", "")), str(status.get("clusterName", "")),
                   str(status.get("message", "")),
                   {str(c.get("type")): dict(c) for c in status.get("conditions") or []
                    if isinstance(c, Mapping)})


@dataclass(frozen=True)
class QueuePosition:
    """Where a queued AppWrapper stands in the leader's last dispatch cycle."""

    position: int
    reason: str
    message: str
    estimated_start: str | None
    """RFC 3339, or None when the plan has none for it."""


class _Session:
    """The client's loop, its thread and its hub connection: what must be ended whether
    or not ``close()`` is called (held apart from the client, so a finalizer can end it
    without keeping the client alive)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcad-client",
                                       daemon=True)
        self.thread.start()
        self.hub: Connection | None = None

    def close(self) -> None:
        if not self.thread.is_alive():
            return
        if self.hub is not None:
            hub, self.hub = self.hub, None
            # (a loop already going away has nothing left to close on it)
            with contextlib.suppress(RuntimeError, TimeoutError, OSError):
                asyncio.run_coroutine_threadsafe(hub.close(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


V1BETA2 = APPWRAPPERS_V1BETA2


class Client:
    """Submit, follow and delete AppWrappers on the hub (see the module docstring)."""

    def __init__(self, kubeconfig: str | Path | None = None, *, context: str | None = None,
                 namespace: str = "default", progress: IO[str] | None = None) -> None:
        self.kubeconfig = Path(kubeconfig) if kubeconfig else default_kubeconfig_path()
        self.context = context
        self.namespace = namespace
        self.progress = progress if progress is not None else sys.stderr
        self._session = _Session()
        self._finalizer = weakref.finalize(self, self._session.close)

    # -- the verbs ---------------------------------------------------------------------------
    def submit(self, manifest: Mapping[str, Any] | str | Path, *, name: str | None = None,
               namespace: str | None = None, priority: int | None = None,
               quota: Mapping[str, str] | None = None, api: str = "v1beta1") -> str:
        """Create an AppWrapper from ``manifest`` (an AppWrapper of either version, or a
        kind ``mcad wrap`` wraps, as ``api``; a dict, YAML text, or a file path); its
        name."""
        obj = _load(manifest)
        ns = namespace or (obj.get("metadata") or {}).get("namespace") or self.namespace
        if obj.get("kind") == "AppWrapper":
            appwrapper = dict(obj)
            meta = dict(appwrapper.get("metadata") or {})
            meta["namespace"] = ns
            if name:
                meta["name"] = name
            if quota:
                meta["labels"] = {**(meta.get("labels") or {}), **quota}
            appwrapper["metadata"] = meta
            appwrapper.setdefault("apiVersion", APPWRAPPER_API_VERSION)
            if priority is not None and appwrapper["apiVersion"] == V1BETA2.api_version:
                raise McadError("a v1beta2 AppWrapper has no spec.priority; name a priority "
                                "class with the label kueue.x-k8s.io/priority-class instead")
            if priority is not None:
                appwrapper["spec"] = {**(appwrapper.get("spec") or {}), "priority": priority}
        else:
            try:
                appwrapper = wrap(obj, name=name, namespace=ns, priority=priority,
                                  quota=quota, api=api)
            except CannotWrap as error:
                raise McadError(str(error)) from None
        meta = appwrapper["metadata"]
        if not meta.get("name"):
            raise McadError("the AppWrapper has no metadata.name; pass name=")
        try:
            self._run(self._create(appwrapper))
        except AlreadyExists:
            raise McadError(f"an AppWrapper {ns}/{meta['name']} exists already") from None
        return str(meta["name"])

    def status(self, name: str, *, namespace: str | None = None) -> AppWrapperStatus:
        """The AppWrapper's state on the hub."""
        ns = namespace or self.namespace
        try:
            return AppWrapperStatus.of(self._run(self._get(name, ns)))
        except NotFound:
            raise McadError(f"there is no AppWrapper {ns}/{name} on the hub") from None

    def position(self, name: str, *, namespace: str | None = None) -> QueuePosition | None:
        """Where it waits in the leader's queue; None when it is not queued (dispatched,
        finished, or not seen yet)."""
        ns = namespace or self.namespace
        answer = self._ask(lambda: visibility.pending_path(ns), kind="PendingAppWrapperList",
                           what=f"list the queue of namespace {ns}")
        for item in answer.get("items") or []:
            if (item.get("metadata") or {}).get("name") == name:
                return QueuePosition(int(item["position"]), str(item.get("reason", "")),
                                     str(item.get("message", "")),
                                     item.get("estimatedStart"))
        return None

    def wait(self, name: str, state: str = "Running", *, namespace: str | None = None,
             timeout: float = 3600.0, every: float = 2.0) -> AppWrapperStatus:
        """Wait until the AppWrapper is in ``state`` (or past it: Running is reached by a
        Completed one), saying on ``progress`` what it is doing whenever that changes
        (and every 30 s). ``McadError`` if it fails or ``timeout`` passes."""
        ns = namespace or self.namespace
        started, said, said_at = time.monotonic(), "", 0.0
        while True:
            current = self.status(name, namespace=ns)
            if _reached(current.state, state):
                self._say(f"{ns}/{name}: {current.state}"
                          f"{f' on {current.cluster}' if current.cluster else ''} "
                          f"after {time.monotonic() - started:.0f}s")
                return current
            if current.state == "Failed" and state != "Failed":
                raise McadError(f"{ns}/{name} failed: {current.message}")
            line = self._line(current)
            now = time.monotonic()
            if line != said or now - said_at >= 30:
                self._say(f"{line} [{now - started:.0f}s]")
                said, said_at = line, now
            if now - started > timeout:
                raise McadError(f"{ns}/{name} is still {current.state or 'not seen'} after "
                                f"{timeout:.0f}s (waiting for {state})")
            time.sleep(every)

    def delete(self, name: str, *, namespace: str | None = None, wait: bool = True,
               timeout: float = 300.0) -> None:
        """Delete the AppWrapper (mcad deletes what it created on the spokes first);
        with ``wait``, return once it is gone from the hub."""
        ns = namespace or self.namespace
        try:
            self._run(self._delete(name, ns))
        except NotFound:
            return
        deadline = time.monotonic() + timeout
        while wait:
            try:
                self._run(self._get(name, ns))
            except NotFound:
                return
            if time.monotonic() > deadline:
                raise McadError(f"{ns}/{name} is still there {timeout:.0f}s after its "
                                "deletion (its objects on the spoke are not gone yet)")
            time.sleep(1.0)

    def close(self) -> None:
        """End the connection and the client's thread (also done when it is collected)."""
        self._finalizer()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- underneath ---------------------------------------------------------------------------
    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        if not self._finalizer.alive:
            work.close()
            raise McadError("this client is closed; make a new Client")
        return asyncio.run_coroutine_threadsafe(work, self._session.loop).result()

    async def _connection(self) -> Connection:
        session = self._session
        if session.hub is None:
            try:
                session.hub = await connect(self.kubeconfig, name="hub", context=self.context)
            except GatewayError as error:
                raise McadError(f"the hub kubeconfig {self.kubeconfig} cannot be used: "
                                f"{error}") from None
        return session.hub

    async def _create(self, appwrapper: dict[str, Any]) -> None:
        hub = await self._connection()
        ref = V1BETA2 if appwrapper.get("apiVersion") == V1BETA2.api_version else APPWRAPPERS
        try:
            await verbs.create(hub, ref, appwrapper,
                               namespace=appwrapper["metadata"]["namespace"])
        except AlreadyExists:
            raise
        except ApiError as error:
            raise McadError(f"the hub refused the AppWrapper: {error.message.rstrip('.')} "
                            f"(HTTP {error.status})") from None

    async def _get(self, name: str, namespace: str) -> dict[str, Any]:
        hub = await self._connection()
        return await verbs.get(hub, APPWRAPPERS, name, namespace=namespace)

    async def _delete(self, name: str, namespace: str) -> None:
        hub = await self._connection()
        await verbs.delete(hub, APPWRAPPERS, name, namespace=namespace)

    def _ask(self, path: Callable[[], str], *, kind: str, what: str) -> dict[str, Any]:
        async def ask() -> dict[str, Any]:
            where = path()
            return await visibility.ask(await self._connection(), "GET", where, kind=kind,
                                        what=what)
        try:
            return self._run(ask())
        except NoAnswer as error:
            raise McadError(str(error)) from None

    def _line(self, current: AppWrapperStatus) -> str:
        where = f"{current.namespace}/{current.name}"
        if current.state in ("", "Pending") and not current.cluster:
            try:
                queued = self.position(current.name, namespace=current.namespace)
            except McadError:
                queued = None
            if queued is not None:
                start = parse_moment(queued.estimated_start)
                when = f", estimated start {start:%H:%M:%S} UTC" if start else ""
                return f"{where}: waiting, position {queued.position} ({queued.reason}){when}"
            return f"{where}: {current.state or 'not seen by mcad yet'}"
        ready = current.conditions.get("PodsReady", {}).get("status") == "True"
        return (f"{where}: {current.state} on {current.cluster}"
                f"{', pods ready' if ready else ', pods starting'}")

    def _say(self, line: str) -> None:
        print(line, file=self.progress, flush=True)


def _reached(state: str, wanted: str) -> bool:
    if state == wanted:
        return True
    return wanted == "Running" and state == "Completed"


def _load(manifest: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    if isinstance(manifest, Mapping):
        return dict(manifest)
    text = manifest
    if isinstance(manifest, Path) or (isinstance(manifest, str) and "\n" not in manifest
                                      and Path(manifest).is_file()):
        try:
            text = Path(manifest).read_text()
        except OSError as error:
            raise McadError(f"cannot read {manifest}: {error}") from None
    try:
        obj = yaml.safe_load(str(text))
    except yaml.YAMLError as error:
        raise McadError(f"the manifest is not YAML or JSON: {error}") from None
    if not isinstance(obj, dict):
        raise McadError("the manifest must be one object (a mapping), not "
                        f"{type(obj).__name__}")
    return obj
