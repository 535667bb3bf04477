"""What the API server's refusals mean, as exceptions: one class per status that
changes what dnsside does (:class:`Expired` relists, :class:`Forbidden` names RBAC, ...),
and :class:`KubeConfigError` for a configuration that cannot be used.

They hold no HTTP: the sources' pacing (a ``Retry-After``), the command line (a missing
kubeconfig is one line) and the linked clusters' limits name them without loading the
HTTP client, which :mod:`dnsside.kubeapi.client` is (it raises them, and re-exports them
for the operations wing, which reaches the API through it alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dnsside.model.printable import printable


class KubeConfigError(Exception):
    """No usable kubeconfig or in-cluster configuration."""


class RefusedCredentials(KubeConfigError):
    """A Link's kubeconfig holds what a Secret may not (an exec user, a file, insecure
    TLS, ...); ``field`` names where (``users[0].user.exec``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class ApiError(Exception):
    """A non-2xx answer from the API server (or an ERROR watch event), with its Status."""

    def __init__(
        self, status: int, reason: str, message: str, retry_after: float | None = None
    ) -> None:
        # The server's words (a linked cluster's may be hostile): escaped once, here, for
        # every log line, state detail and `explain` text they reach.
        reason, message = printable(reason, 128), printable(message)
        super().__init__(f"HTTP {status} {reason}: {message}".rstrip(": "))
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @staticmethod
    def of(status: int, reason: str, message: str,
           retry_after: float | None = None) -> ApiError:
        """The error of the subclass ``status`` names."""
        kind = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
        return kind(status, reason, message, retry_after)

    @staticmethod
    def from_status(status: Any, default_code: int) -> ApiError:
        """The error a Status object (a watch ERROR event's, a failed request's body) says."""
        if not isinstance(status, Mapping):
            return ApiError.of(default_code, "", str(status)[:200])
        code = status.get("code")
        retry = (status.get("details") or {}).get("retryAfterSeconds")
        return ApiError.of(
            code if isinstance(code, int) else default_code,
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
            float(retry) if isinstance(retry, (int, float)) else None,
        )

    @property
    def expired(self) -> bool:
        return self.status == 410


class Unauthorized(ApiError):
    """401: the credentials are missing, expired or wrong."""


class Forbidden(ApiError):
    """403: RBAC denies the request."""


class NotFound(ApiError):
    """404: no such object, or the resource (a CRD) is not served."""


class Expired(ApiError):
    """410: the resourceVersion or continue token is older than the server's history."""


class TooManyRequests(ApiError):
    """429: API priority and fairness; ``retry_after`` says when to come back."""


class ServerError(ApiError):
    """5xx: the API server (or an aggregated API, a webhook) failed."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: Unauthorized, 403: Forbidden, 404: NotFound, 410: Expired, 429: TooManyRequests,
}
