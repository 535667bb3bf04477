"""Fixtures the serving tests share."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def socks() -> Iterator[list[socket.socket]]:
    """The sockets a test opens as a client of many connections, closed after it."""
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()
