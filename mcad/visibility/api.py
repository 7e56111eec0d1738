"""The routes of ``visibility.codeflare.dev/v1alpha1``, answered by the leader.

Mounted under ``/apis`` on the TLS server the API server already calls for admission
(``mcad.webhook.server``); the APIService points the hub's API server at it. Every
request must come from that API server's front proxy (``FrontProxy.verify``: its
client certificate, signed by the hub's request-header CA) and name the user it
authenticated; anything else is answered 401, so the port is no door of its own.

- ``GET .../namespaces/NS/pendingappwrappers`` (RBAC: ``list pendingappwrappers`` in
  NS): NS's queued AppWrappers, in the order of the last cycle; without
  ``namespaces/NS`` (a cluster-wide grant) every namespace's; ``.../NAME``: one row;
- ``GET .../namespaces/NS/explanations/NAME`` (``get explanations`` in NS): what
  ``mcad explain NAME`` prints;
- ``POST .../namespaces/NS/explanations`` (``create explanations`` in NS): a dry run
  (``dryrun``);
- ``GET .../views/state``, and ``page``, ``script``, ``style`` (``get views``, which
  every authenticated user has): the web view, with the rows of the namespaces the
  caller may list.

A standby answers 503 naming the leader (the leader's EndpointSlice moves the Service
to it). Errors are ``metav1.Status`` objects with a sentence, as kubectl shows them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from importlib import resources
from typing import Any

from aiohttp import web

from mcad.access import Caller, FrontProxy, ReviewUnavailable
from mcad.api.visibility import EXPLANATIONS, GROUP, GROUP_VERSION, PENDING, VERSION, VIEWS
from mcad.config import RunConfig
from mcad.controller.clock import rfc3339, utcnow
from mcad.controller.estimator import Forecast
from mcad.controller.records import AppWrapperRecord
from mcad.core.cycle.snapshot import CycleResult, Snapshot
from mcad.core.placement.capacity import AppWrapperKey
from mcad.core.views.explain import explain
from mcad.visibility import answers, dryrun
from mcad.visibility.scope import Scope, Scopes

LastCycle = Callable[[], "tuple[Snapshot, CycleResult] | str"]
"""The last cycle, or the sentence that says why there is none (standby, starting)."""
LastForecast = Callable[[], "Forecast | None"]
DryPlan = Callable[[Snapshot, CycleResult, AppWrapperRecord],
                   Awaitable[tuple[datetime | None, str]]]
"""A plan for an AppWrapper not submitted (``Estimator.dry_run``)."""
CALLER = web.RequestKey("caller", Caller)
BASE = f"/{GROUP}/{VERSION}"
ASSETS = {"page": ("index.html", "text/html"), "script": ("app.js", "text/javascript"),
          "style": ("app.css", "text/css")}
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    # No inline script or style: everything the page runs comes from this API.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
RESOURCES = [
    {"name": PENDING, "singularName": "pendingappwrapper", "namespaced": True,
     "kind": "PendingAppWrapper", "verbs": ["get", "list"]},
    {"name": EXPLANATIONS, "singularName": "explanation", "namespaced": True,
     "kind": "Explanation", "verbs": ["get", "create"]},
    {"name": VIEWS, "singularName": "view", "namespaced": False, "kind": "View",
     "verbs": ["get"]},
]


def application(*, last: LastCycle, plan: LastForecast, config: RunConfig,
                front_proxy: Callable[[], FrontProxy | None], scopes: Scopes,
                conditions: answers.Conditions = lambda _: None,
                dry_plan: DryPlan | None = None,
                clock: Callable[[], datetime] = utcnow) -> web.Application:
    """The visibility API as an aiohttp application, to mount at ``/apis``."""
    gate = dryrun.Gate()

    @web.middleware
    async def front_proxy_only(request: web.Request, handler: Any) -> web.StreamResponse:
        proxy = front_proxy()
        if proxy is None:
            return status(503, "mcad cannot yet tell the API server's requests from anyone "
                               "else's: the hub publishes no request-header CA in "
                               "kube-system/extension-apiserver-authentication (start its "
                               "API server with the aggregation layer's flags)",
                          "ServiceUnavailable")
        ssl_object = request.transport.get_extra_info("ssl_object") \
            if request.transport is not None else None
        peer = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        why = proxy.verify(peer, now=clock())
        if why is not None:
            return status(401, why, "Unauthorized")
        caller = proxy.caller(request.headers, lambda h: request.headers.getall(h, []))
        if caller is None:
            return status(401, "the front proxy named no user", "Unauthorized")
        request[CALLER] = caller
        try:
            response: web.StreamResponse = await handler(request)
        except ReviewUnavailable as err:
            return status(503, f"{err}; try again", "ServiceUnavailable")
        return response

    def cycle() -> tuple[Snapshot, CycleResult] | web.Response:
        got = last()
        if isinstance(got, str):
            return status(503, got, "ServiceUnavailable")
        return got

    async def group(_: web.Request) -> web.Response:
        version = {"groupVersion": GROUP_VERSION, "version": VERSION}
        return _json({"kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
                      "versions": [version], "preferredVersion": version})

    async def resource_list(_: web.Request) -> web.Response:
        return _json({"kind": "APIResourceList", "apiVersion": "v1",
                      "groupVersion": GROUP_VERSION, "resources": RESOURCES})

    async def pending_everywhere(_: web.Request) -> web.Response:
        got = cycle()
        if isinstance(got, web.Response):
            return got
        return _json(answers.pending_list(*got, plan(), Scope(True)))

    async def pending_in(request: web.Request) -> web.Response:
        got = cycle()
        if isinstance(got, web.Response):
            return got
        namespace = request.match_info["namespace"]
        scope = await scopes.within(request[CALLER], namespace)
        listed = answers.pending_list(*got, plan(), scope, namespace=namespace)
        name = request.match_info.get("name")
        if name is None:
            return _json(listed)
        for item in listed["items"]:
            if item["metadata"]["name"] == name:
                return _json(item)
        return status(404, f"AppWrapper {namespace}/{name} is not waiting in the queue "
                           "(dispatched, finished, deleted, or not seen yet)", "NotFound")

    async def explanation(request: web.Request) -> web.Response:
        got = cycle()
        if isinstance(got, web.Response):
            return got
        snapshot, result = got
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        key = AppWrapperKey(f"{namespace}/{name}")
        found = explain(snapshot, result, key)
        if found is None:
            return status(404, f"AppWrapper {key} is not queued or running (completed, "
                               "failed, deleted, or not seen yet)", "NotFound")
        scope = await scopes.within(request[CALLER], namespace)
        return _json(answers.explanation(found, snapshot, plan(), scope,
                                         conditions=conditions(key)))

    async def dry_run(request: web.Request) -> web.Response:
        got = cycle()
        if isinstance(got, web.Response):
            return got
        namespace = request.match_info["namespace"]
        try:
            body = await _bounded_body(request)
            async with gate.turn():
                trial = await asyncio.to_thread(
                    dryrun.trial, body, request.headers.get("Content-Type", ""),
                    namespace=namespace, snapshot=got[0], config=config, now=clock())
                estimate = None
                if dry_plan is not None and trial.found.outcome not in ("Running",
                                                                        "Dispatched"):
                    estimate = await dry_plan(trial.snapshot, trial.result, trial.record)
        except dryrun.Refused as refused:
            return status(refused.status, refused.message, _REASONS.get(refused.status, ""),
                          retry_after=refused.retry_after)
        scope = await scopes.within(request[CALLER], namespace)
        return _json(answers.explanation(trial.found, trial.snapshot, plan(), scope,
                                         estimate=estimate, dry_run=True), code=201)

    async def view(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name in ASSETS:
            file, kind = ASSETS[name]
            text = resources.files("mcad").joinpath(f"ui/{file}").read_text()
            return web.Response(text=text, content_type=kind, headers=PAGE_HEADERS)
        if name != "state":
            return status(404, f"there is no view {name!r}: the web view is at views/page",
                          "NotFound")
        got = cycle()
        if isinstance(got, web.Response):
            return got
        snapshot, result = got
        namespaces = {e.key.partition("/")[0] for e in snapshot.appwrappers}
        scope = await scopes.of(request[CALLER], namespaces)
        return _json(answers.overview(snapshot, result, plan(), scope))

    app = web.Application(middlewares=[front_proxy_only],
                          client_max_size=dryrun.MAX_BODY_BYTES)
    app.router.add_get(f"/{GROUP}", group)
    app.router.add_get(BASE, resource_list)
    app.router.add_get(f"{BASE}/{PENDING}", pending_everywhere)
    app.router.add_get(f"{BASE}/namespaces/{{namespace}}/{PENDING}", pending_in)
    app.router.add_get(f"{BASE}/namespaces/{{namespace}}/{PENDING}/{{name}}", pending_in)
    app.router.add_get(f"{BASE}/namespaces/{{namespace}}/{EXPLANATIONS}/{{name}}",
                       explanation)
    app.router.add_post(f"{BASE}/namespaces/{{namespace}}/{EXPLANATIONS}", dry_run)
    app.router.add_get(f"{BASE}/{VIEWS}/{{name}}", view)
    return app


_REASONS = {400: "BadRequest", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType",
            422: "Invalid", 429: "TooManyRequests"}


async def _bounded_body(request: web.Request) -> bytes:
    """The body, refused past ``dryrun.MAX_BODY_BYTES`` before more of it is read."""
    limit = dryrun.MAX_BODY_BYTES
    if request.content_length is not None and request.content_length > limit:
        raise dryrun.Refused(413, f"the body is {request.content_length} bytes; a dry run "
                                  f"takes at most {limit}")
    body = await request.content.read(limit + 1)
    if len(body) > limit:
        raise dryrun.Refused(413, f"the body is over {limit} bytes; a dry run takes at most "
                                  f"{limit}")
    return body


def status(code: int, message: str, reason: str, *, retry_after: int | None = None
           ) -> web.Response:
    """A ``metav1.Status`` failure, as kubectl and mcad's client read them."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": message, "reason": reason,
                            "code": code}
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return web.Response(status=code, text=json.dumps(body), content_type="application/json",
                        headers=headers)


def _json(body: dict[str, Any], *, code: int = 200) -> web.Response:
    return web.Response(status=code, text=json.dumps(body, default=_default),
                        content_type="application/json", headers={"Cache-Control": "no-store"})


def _default(value: object) -> str:
    return rfc3339(value) if isinstance(value, datetime) else str(value)
