"""One error hierarchy for every API failure, whatever the cluster or verb.

Callers branch on the class (``NotFound``, ``Conflict``...) rather than on status
codes, and every message names the cluster, so a status condition built from one
tells the user where the problem is.
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    """Base of everything the gateway raises."""


class BadKubeconfig(GatewayError):
    """A kubeconfig that cannot be used; the message says what is wrong with it."""


class ApiError(GatewayError):
    """The API server answered with an error status (or could not be reached)."""

    status: int = 0

    def __init__(self, message: str, *, cluster: str, status: int = 0, reason: str = "",
                 body: dict[str, Any] | None = None, retry_after: float | None = None) -> None:
        super().__init__(f"{cluster}: {message}")
        self.cluster = cluster
        self.status = status or type(self).status
        self.reason = reason
        self.message = message
        self.body = body or {}
        self.retry_after = retry_after


class Unreachable(ApiError):
    """No answer: connection refused, DNS, TLS or time-out."""


class Abandoned(Unreachable):
    """Given up while waiting for an answer, because the cluster was found unreachable
    meanwhile (``Connection.abandon``): not retried, since a retry would wait on the same
    silent server for the whole request timeout again."""


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    """409 Conflict: a stale resourceVersion."""

    status = 409


class AlreadyExists(ApiError):
    """409 AlreadyExists: create of a name that exists."""

    status = 409


class Gone(ApiError):
    """410: a watch's resourceVersion is too old; relist."""

    status = 410


class Invalid(ApiError):
    """422 (or 400): the object was rejected by validation."""

    status = 422


class TooManyRequests(ApiError):
    status = 429


class ServerError(ApiError):
    status = 500


class BadResponse(ApiError):
    """The server's answer could not be read (a watch line too long, not JSON)."""


class Fenced(ApiError):
    """This process may not write now: it is not (or no longer surely) the leader."""


class UnknownKind(ApiError):
    """Discovery does not know this apiVersion/kind on this cluster."""

    status = 404


RETRYABLE = (Unreachable, TooManyRequests, ServerError)


def error_for(status: int, body: dict[str, Any], *, cluster: str,
              retry_after: float | None = None) -> ApiError:
    """The ApiError subclass for an HTTP status and a metav1.Status body."""
    reason = str(body.get("reason", ""))
    message = str(body.get("message", "")) or f"HTTP {status}"
    kinds: dict[int, type[ApiError]] = {401: Unauthorized, 403: Forbidden, 404: NotFound,
                                        410: Gone, 422: Invalid, 400: Invalid,
                                        429: TooManyRequests}
    if status == 409:
        cls: type[ApiError] = AlreadyExists if reason == "AlreadyExists" else Conflict
    elif status >= 500:
        cls = ServerError
    else:
        cls = kinds.get(status, ApiError)
    return cls(message, cluster=cluster, status=status, reason=reason, body=body,
               retry_after=retry_after)
