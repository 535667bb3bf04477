"""When a reflector asks an API server again: after a failure, after a stream the server
closed, after a watch history that expired. Pure: the reflector reads the clock and
says what happened; these say how long to wait.

In each, a server that fails *fast* must not get dnsside
asking in a tight loop. A retry waits a jittered exponential backoff (longer when the
server says Retry-After); a stream closed cleanly is reopened at once only when it
lived (seconds) or carried a change; a relist after a 410 goes out at once only when the watch
it ends ran for a while.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dnsside.kubeapi.errors import ApiError

# Seconds a watch stream must have lived to be reopened at once without having carried a
# change (an API server closes them after timeoutSeconds, minutes).
WATCH_LIVED = 5.0


class Backoff:
    """Exponential backoff with full jitter: uniform(0, min(cap, base * 2**attempt))."""

    def __init__(self, base: float, cap: float, rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = cap
        self.attempt = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        ceiling = min(self.cap, self.base * 2 ** min(self.attempt, 32))
        self.attempt += 1
        return self._rng.uniform(0, ceiling)

    def reset(self) -> None:
        self.attempt = 0


@dataclass(frozen=True, slots=True)
class Pacing:
    """How a reflector paces its requests: retries (jittered exponential backoff from
    ``backoff_base`` up to ``backoff_cap`` seconds), watch streams (the server closes them
    after about ``watch_timeout``), list pages and request timeouts."""

    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    watch_timeout: float = 300.0
    page_size: int = 500
    request_timeout: float = 60.0

    def backoff(self, rng: random.Random) -> Backoff:
        return Backoff(self.backoff_base, self.backoff_cap, rng)

    def retry_delay(self, backoff: Backoff, exc: BaseException) -> float:
        """The wait before retrying a failed request: the backoff's next step, or the
        server's Retry-After when that is longer (never past the cap)."""
        delay = backoff.next()
        if isinstance(exc, ApiError) and exc.retry_after is not None:
            delay = max(delay, min(exc.retry_after, self.backoff_cap))
        return delay

    def reopen_delay(self, backoff: Backoff, changed: bool, lived: float) -> float:
        """The wait before reopening a watch the server closed cleanly (timeoutSeconds): none
        when the stream carried a change (an object added, modified or deleted) or lived
        :data:`WATCH_LIVED` seconds (or the whole ``watch_timeout`` asked for, when shorter),
        else the next backoff step, as client-go's reflector does. A bookmark is no change:
        a server that answers each watch with one bookmark and closes it was asked again at
        once, 2,000 times a second (issue 33)."""
        if changed or lived >= min(WATCH_LIVED, self.watch_timeout):
            backoff.reset()
            return 0.0
        return backoff.next()


DEFAULT_PACING = Pacing()


class RelistPacing:
    """How long to wait before relisting a resource whose watch history expired (410).

    An API server compacts its history every few minutes, so a watch normally runs long
    before a 410 and the relist goes out at once. One that answers every watch with 410
    (a linked cluster's API gone wrong, or hostile) would otherwise have dnsside list
    the whole resource again in a tight loop, up to its caps each time: CPU taken from
    every other cluster and from the queries. So a relist that follows a short-lived
    watch waits a jittered exponential backoff first, and a watch that ran for
    ``settled`` seconds resets it.
    """

    def __init__(self, backoff: Backoff, settled: float = 10.0) -> None:
        self.backoff = backoff
        self.settled = settled

    def delay(self, watched_for: float) -> float:
        if watched_for >= self.settled:
            self.backoff.reset()
            return 0.0
        return self.backoff.next()
