"""The verbs on objects of any kind: get, list, create, patch, delete.

Thin on purpose: each is one request on a ``ResourceRef`` path (``mcad.gateway.refs``),
retried by the connection when that is safe; conflicts and missing objects surface as
``Conflict`` / ``NotFound`` for the caller to decide about. ``options`` pass through to
``Connection.request`` (``timeout``, ``attempts``, ``fenced``).

A create whose object has ``generateName`` and no name is never retried blind: each
attempt that reached the server made a new object, so a retry after a time-out would
make a second one (two Events for one). Such a create gets one attempt.
"""

from __future__ import annotations

from typing import Any

from mcad.gateway.connection import MERGE_PATCH, Connection
from mcad.gateway.refs import ResourceRef

Obj = dict[str, Any]


async def get(conn: Connection, ref: ResourceRef, name: str, *,
              namespace: str | None = None, **options: Any) -> Obj:
    return await conn.request("GET", ref.path(namespace=namespace, name=name), **options)


async def list_all(conn: Connection, ref: ResourceRef, *, namespace: str | None = None,
                   label_selector: str | None = None, page: int = 500) -> tuple[list[Obj], str]:
    """Every object (paginated), and the list's resourceVersion to watch from."""
    params = {"limit": str(page)}
    if label_selector:
        params["labelSelector"] = label_selector
    items: list[Obj] = []
    while True:
        answer = await conn.request("GET", ref.path(namespace=namespace), params=params)
        items.extend(answer.get("items") or [])
        meta = answer.get("metadata") or {}
        if not meta.get("continue"):
            return items, str(meta.get("resourceVersion", ""))
        params["continue"] = meta["continue"]


async def create(conn: Connection, ref: ResourceRef, obj: Obj, *,
                 namespace: str | None = None, **options: Any) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and meta.get("generateName") and not meta.get("name"):
        options.setdefault("attempts", 1)  # a retry would create a second object
    return await conn.request("POST", ref.path(namespace=namespace), body=obj, **options)


async def merge_patch(conn: Connection, ref: ResourceRef, name: str, patch: Obj, *,
                      namespace: str | None = None, subresource: str | None = None,
                      **options: Any) -> Obj:
    return await conn.request("PATCH", ref.path(namespace=namespace, name=name,
                                                subresource=subresource),
                              body=patch, content_type=MERGE_PATCH, **options)


async def replace(conn: Connection, ref: ResourceRef, obj: Obj, *,
                  subresource: str | None = None, **options: Any) -> Obj:
    """PUT with the object's resourceVersion: fails with Conflict if it moved on."""
    meta = obj["metadata"]
    return await conn.request("PUT", ref.path(namespace=meta.get("namespace"),
                                              name=meta["name"], subresource=subresource),
                              body=obj, **options)


async def delete(conn: Connection, ref: ResourceRef, name: str, *,
                 namespace: str | None = None, propagation: str = "Background",
                 grace_seconds: int | None = None, **options: Any) -> Obj:
    body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1",
                            "propagationPolicy": propagation}
    if grace_seconds is not None:
        body["gracePeriodSeconds"] = grace_seconds
    return await conn.request("DELETE", ref.path(namespace=namespace, name=name), body=body,
                              **options)
