"""Sharing the interpreter with the UDP thread while zone transfers are sent.

UDP is answered on a thread of its own (:class:`dnsside.serving.server.UdpServer`), TCP and
zone transfers on the event loop; both need the GIL. A transfer of a large zone keeps the
event loop busy for as long as it is packed (100,000 members: about 610,000 records, a
tenth of a second of CPU and more per transfer, in slices), and a thread that waits for the
GIL gets it only when the holder is asked to drop it, after ``sys.getswitchinterval()``
(5 ms by Python's default, :data:`SERVING_SWITCH_INTERVAL` while serving), once per
acquisition: the UDP thread takes the GIL twice a batch (after
``recvmmsg`` and after ``sendmmsg``), so every UDP answer waited up to 10 ms and more behind
a transfer (issue 36: 26-56 ms behind one 100k AXFR, 70-151 ms behind four).

The subtle point: the switch interval is one setting of the whole process. It is lowered to
:data:`TRANSFER_SWITCH_INTERVAL` while at least one transfer is under way (from the request,
whose records are taken then, to the last message written or the connection gone) and set
back to what it was when the last one ends, so it costs nothing the rest of the time; while
it is low, two busy threads switch more often (a few percent of CPU, only then).
"""

from __future__ import annotations

import sys

from dnsside.telemetry import metrics

# Half a millisecond: a UDP answer waits at most about that for its turn, twice a batch.
TRANSFER_SWITCH_INTERVAL = 0.0005
# The switch interval while serving, transfers or not. A worker thread (a long watch line
# being decoded and parsed) holds the GIL until the event loop has waited this long for
# it, at each I/O callback of the loop: with Python's 5 ms, a TCP answer (accept, read,
# write) waited up to 5 ms a step while a linked cluster flooded dnsside with 1 MB lines
# (issue 33 item 12, figures in docs/security.md). Two threads switch only while both
# want the interpreter, so it costs nothing the rest of the time.
SERVING_SWITCH_INTERVAL = 0.001


def share_while_serving() -> None:
    """Set the switch interval for serving (:data:`SERVING_SWITCH_INTERVAL`)."""
    sys.setswitchinterval(SERVING_SWITCH_INTERVAL)


class SharedWhileSending:
    """Counts the transfers under way; the first lowers the switch interval, the last
    puts it back."""

    def __init__(self, interval: float = TRANSFER_SWITCH_INTERVAL) -> None:
        self.interval = interval
        self.under_way = 0
        self.saved: float | None = None

    def enter(self) -> None:
        if self.under_way == 0:
            self.saved = sys.getswitchinterval()
            sys.setswitchinterval(min(self.saved, self.interval))
        self.under_way += 1
        metrics.TRANSFERS_SENDING.set(self.under_way)

    def leave(self) -> None:
        self.under_way = max(self.under_way - 1, 0)
        metrics.TRANSFERS_SENDING.set(self.under_way)
        if self.under_way == 0 and self.saved is not None:
            sys.setswitchinterval(self.saved)
            self.saved = None


SHARING = SharedWhileSending()  # one process, one interpreter: one count
