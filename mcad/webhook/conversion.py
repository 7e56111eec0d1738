"""The conversion webhook: a ConversionReview (``apiextensions.k8s.io/v1``) in, the
AppWrappers converted (``mcad.api.conversion``) out.

Why every replica serves it: the API server converts every read and write of v1beta2
(kubectl's default version, since it is the newest), and every object of a list in one
review; if only the leader converted, a leader change would leave v1beta2 unreadable
until the next one is elected. So the leader and the standbys convert alike, on the TLS
server they already run for the admission webhook, with its certificate.

The door: the API server calls it without a credential of its own (as it calls the
admission webhook), so anyone who reaches the port may ask for a conversion. It reveals
nothing (it answers with what it was sent, converted) and costs bounded work: the body
is read up to ``MAX_BODY`` (a list of 10,000 AppWrappers is about 30 MiB), at most
``AT_ONCE`` reviews are converted at a time, in a worker thread so the event loop (the
leader's controller) is never held by a long list, and anything malformed is answered
with a Failure naming what is wrong.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from mcad.api.conversion import ConversionError, convert

log = logging.getLogger(__name__)
MAX_BODY = 64 * 1024 * 1024
"""The largest ConversionReview read (bytes); a larger one is refused (413)."""
AT_ONCE = 2
"""ConversionReviews converted at once; others wait their turn."""
API_VERSION = "apiextensions.k8s.io/v1"


def review(body: bytes) -> bytes:
    """The ConversionReview response to ``body`` (JSON both ways): CPU-bound, run in a
    worker thread."""
    try:
        request = json.loads(body)
    except ValueError:
        return _answer("", failure="the request is not JSON (a ConversionReview)")
    if not isinstance(request, Mapping) or not isinstance(request.get("request"), Mapping):
        return _answer("", failure="the request is not a ConversionReview")
    asked = request["request"]
    uid = str(asked.get("uid") or "")
    wanted = asked.get("desiredAPIVersion")
    objects = asked.get("objects")
    if not isinstance(wanted, str) or not isinstance(objects, list):
        return _answer(uid, failure="the ConversionReview has no desiredAPIVersion or no "
                                    "objects")
    converted = []
    for index, obj in enumerate(objects):
        if not isinstance(obj, Mapping):
            return _answer(uid, failure=f"objects[{index}] is not an object")
        named = obj.get("metadata")
        meta: Mapping[str, Any] = named if isinstance(named, Mapping) else {}
        which = f"AppWrapper {meta.get('namespace', '')}/{meta.get('name', '')}"
        try:
            converted.append(convert(obj, wanted))
        except ConversionError as err:
            return _answer(uid, failure=f"{which}: {err}")
        except Exception as err:  # a defect: said, never a 500 without a word
            log.exception("converting %s to %s failed", which, wanted)
            return _answer(uid, failure=f"{which} cannot be converted to {wanted} "
                                        f"({type(err).__name__}); see mcad's log")
    return _answer(uid, objects=converted)


def _answer(uid: str, *, objects: list[dict[str, Any]] | None = None,
            failure: str = "") -> bytes:
    result: dict[str, Any] = {"status": "Failure", "message": failure} if failure \
        else {"status": "Success"}
    response: dict[str, Any] = {"uid": uid, "result": result}
    if not failure:
        response["convertedObjects"] = objects or []
    return json.dumps({"apiVersion": API_VERSION, "kind": "ConversionReview",
                       "response": response}, separators=(",", ":")).encode()
