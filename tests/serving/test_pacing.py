"""The switch interval while serving and while zone transfers are sent
(dnsside/serving/pacing.py): 1 ms while serving; lowered by the first transfer, kept while any
is under way, set back to what it was by the last, and never raised above what the process
had."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from dnsside.serving.pacing import SharedWhileSending, share_while_serving

pytestmark = pytest.mark.quick


@pytest.fixture
def interval() -> Iterator[float]:
    saved = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield 0.005
    sys.setswitchinterval(saved)


def test_lowered_while_any_transfer_is_sent(interval: float) -> None:
    sharing = SharedWhileSending(0.0005)
    sharing.enter()
    assert sys.getswitchinterval() == pytest.approx(0.0005, rel=0.05)
    sharing.enter()
    sharing.leave()
    assert sys.getswitchinterval() == pytest.approx(0.0005, rel=0.05)  # one still under way
    sharing.leave()
    assert sys.getswitchinterval() == pytest.approx(interval, rel=0.05)
    sharing.leave()  # one leave too many changes nothing
    assert sys.getswitchinterval() == pytest.approx(interval, rel=0.05) and sharing.under_way == 0


def test_never_raised_above_the_process_setting(interval: float) -> None:
    sys.setswitchinterval(0.0001)
    sharing = SharedWhileSending(0.0005)
    sharing.enter()
    assert sys.getswitchinterval() == pytest.approx(0.0001, rel=0.05)
    sharing.leave()
    assert sys.getswitchinterval() == pytest.approx(0.0001, rel=0.05)


def test_serving_hands_the_loop_the_interpreter_within_a_millisecond(interval: float) -> None:
    """Python's 5 ms let a worker thread decoding a long watch line keep the event loop
    waiting up to 5 ms at each I/O callback (issue 33 item 12); a transfer lowers it
    from there and puts that back."""
    share_while_serving()
    assert sys.getswitchinterval() == pytest.approx(0.001, rel=0.05)
    sharing = SharedWhileSending()
    sharing.enter()
    assert sys.getswitchinterval() == pytest.approx(0.0005, rel=0.05)
    sharing.leave()
    assert sys.getswitchinterval() == pytest.approx(0.001, rel=0.05)
