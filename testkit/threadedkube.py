"""The fake API server (testkit/fakekube.py) on an event loop of its own, in a daemon
thread, for tests and benchmarks written as plain blocking code."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from testkit.fakekube import FakeKube
from testkit.netns import enter_netns

T = TypeVar("T")


class ThreadedKube:
    """The fake API server (testkit/fakekube.py) on a private event loop in a daemon thread,
    so a test or bench can block on DNS polls while it keeps serving watches.

    With ``netns`` (a testkit/netns.py namespace name) that thread joins the namespace
    before it binds anything, so processes started inside it (`ip netns exec`) reach the
    server on its 127.0.0.1 address, while the test still controls it directly."""

    def __init__(self, tmp: Path, *, netns: str | None = None, **kwargs: Any) -> None:
        self.loop = asyncio.new_event_loop()
        entered: Future[None] = Future()
        self.thread = threading.Thread(target=self._serve, args=(netns, entered), daemon=True)
        self.thread.start()
        try:
            entered.result(10)  # a failed setns is raised here, before anything listens
        except BaseException:
            self.loop.close()
            raise
        self.kube = FakeKube(**{"bookmark_interval": 0.2, **kwargs})
        self.run(self.kube.start(tmp))
        self.kubeconfig = self.kube.kubeconfig

    def _serve(self, netns: str | None, entered: Future[None]) -> None:
        try:
            if netns is not None:
                enter_netns(netns)
        except BaseException as exc:
            entered.set_exception(exc)
            return
        entered.set_result(None)
        self.loop.run_forever()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """Run ``fn`` on the fake's loop thread (its state is not thread-safe)."""
        done: Future[T] = Future()

        def invoke() -> None:
            try:
                done.set_result(fn(*args, **kw))
            except Exception as exc:
                done.set_exception(exc)

        self.loop.call_soon_threadsafe(invoke)
        return done.result(600)

    def close(self) -> None:
        self.run(self.kube.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
