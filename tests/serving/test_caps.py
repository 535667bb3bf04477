"""What one client is for the connection and transfer caps, and which connection a full
cap closes (dnsside/serving/caps.py), without sockets."""

from __future__ import annotations

import pytest

from dnsside.serving.caps import ConnectionCaps, client_of

pytestmark = pytest.mark.quick


@pytest.mark.parametrize(("host", "client"), [
    ("10.1.2.3", "10.1.2.3"),
    ("::ffff:10.1.2.3", "10.1.2.3"),  # a dual-stack listener's IPv4 peer
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),  # the same host's /64
    ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
    ("fe80::1%eth0", "fe80::/64"),
    ("not an address", "not an address"),
])
def test_a_client_is_an_ipv4_address_or_an_ipv6_64(host: str, client: str) -> None:
    assert client_of(host) == client


class Conn:
    def __init__(self, name: str, busy: bool = False) -> None:
        self.name, self.aborted, self.busy = name, False, busy

    def abort(self) -> None:
        self.aborted = True

    def __repr__(self) -> str:
        return self.name


def test_a_full_cap_closes_the_quietest_of_that_client_or_of_the_heaviest() -> None:
    caps = ConnectionCaps("test", total=5, per_client=3, total_flag="--t", client_flag="--c")
    a = [Conn(f"a{i}") for i in range(4)]
    b = [Conn(f"b{i}") for i in range(2)]
    for conn in a[:3]:
        caps.admit(conn, "10.0.0.1")
    caps.touch(a[0])  # a0 answered a query: a1 is now the quietest
    caps.admit(a[3], "10.0.0.1")  # at its cap: its own quietest goes
    assert [c for c in a if c.aborted] == [a[1]] and len(caps) == 3
    for conn in b:
        caps.admit(conn, "2001:db8::1")
    c = Conn("c")
    caps.admit(c, "10.0.0.3")  # every slot taken: the heaviest client's quietest goes
    assert [x for x in [*a, *b] if x.aborted] == [a[1], a[2]] and len(caps) == 5
    caps.release(a[1])  # already released when it was closed: idempotent
    assert len(caps) == 5


def test_a_connection_sending_a_transfer_is_never_the_one_closed() -> None:
    """Busy (a transfer under way) is not idle: the next quietest goes; with every one
    busy, the newcomer is closed instead."""
    caps = ConnectionCaps("test", total=3, per_client=2, total_flag="--t", client_flag="--c")
    sending, idle, new = Conn("sending", busy=True), Conn("idle"), Conn("new")
    caps.admit(sending, "10.0.0.1")
    caps.admit(idle, "10.0.0.1")
    caps.admit(new, "10.0.0.1")
    assert (sending.aborted, idle.aborted, new.aborted) == (False, True, False)
    new.busy = True
    late = Conn("late")
    caps.admit(late, "10.0.0.1")
    assert late.aborted and not sending.aborted and not new.aborted and len(caps) == 2


def test_a_client_reopening_its_share_within_a_second_loses_its_newcomers() -> None:
    """Its whole share closed for newcomers within a second: for the rest of that second
    its newcomers are closed unread (reading and answering each is what a flood of them
    costs the others); a second later the quietest goes again."""
    now = [100.0]
    caps = ConnectionCaps("test", total=10, per_client=3, total_flag="--t", client_flag="--c",
                          clock=lambda: now[0])
    first = [Conn(f"first{i}") for i in range(3)]
    second = [Conn(f"second{i}") for i in range(3)]
    for conn in first + second:
        caps.admit(conn, "10.0.0.1")
    assert all(c.aborted for c in first) and not any(c.aborted for c in second)
    flood = Conn("flood")
    caps.admit(flood, "10.0.0.1")
    assert flood.aborted and not any(c.aborted for c in second)
    other = Conn("other")
    caps.admit(other, "10.0.0.2")  # another client is not affected
    assert not other.aborted
    now[0] += 1.0
    later = Conn("later")
    caps.admit(later, "10.0.0.1")
    assert not later.aborted and second[0].aborted
