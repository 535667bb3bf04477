"""SRV answers below a service name, and their glue: the same in both naming schemes.

:mod:`dnsside.core.encode` hands over the targets (a pod, a cluster, a KEP-1645
service) with their ports; this writes ``<svc>`` (every port) and ``_<port>._<proto>.<svc>``
(each named one), one record per target and port number (RFC 2181 §5: an RRset holds
no duplicates), with each target's addresses as glue.

The subtle point is size. A service of 12,000 pods has 12,000 targets, but an answer
holds what fits in a TCP message, a couple of thousand records at most, and the
answer is the first ones that fit. So the records are taken from the targets as they
come and no target past a full answer is looked at. Only the weight depends on how
many targets there are, and only while they are few (``100 // n``, at least 1): they
are counted up to :data:`COUNTED`, never all. An answer changed by one pod far down
the list so costs what the answer holds, not what the service holds.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import Protocol

from dnsside.core.steps import Steps
from dnsside.dns.names import protocol_name, srv_name
from dnsside.dns.wire import AT_QUESTION, CLASS_IN, MAX_BODY, NOERROR, SRV, Answer, Ring, rr_head
from dnsside.dns.zone import ZoneOptions
from dnsside.model.linkerd import Port


class Target(Protocol):
    """What an SRV record points at, and the A/AAAA record tails of its glue."""

    target: bytes
    local: bool  # priority 0 under --srv-priority local-first
    a: tuple[bytes, ...]
    aaaa: tuple[bytes, ...]


Pair = tuple[Target, int]  # a target and a port number: one record
Triple = tuple[int, Target, int]  # a record as written: its priority, target and port
KeptAnswers = dict[bytes, "KeptSrv"]  # SRV answers as made, by name

# 100 // n is 0 past 100 targets (the weight is then 1): this many are enough to count.
COUNTED = 101


def fit(rrs: list[bytes], room: int) -> list[bytes]:
    """Keep as many records as fit in ``room`` bytes (only huge RRsets ever lose any)."""
    total = 0
    for i, rr in enumerate(rrs):
        total += len(rr)
        if total > room:
            return rrs[:i]
    return rrs


def srv_answers(answers: dict[bytes, Answer], names: set[bytes], rotate: bool,
                svc_name: bytes, targets: Sequence[Target],
                ports_of: Sequence[tuple[Port, ...]], options: ZoneOptions,
                kept: tuple[KeptAnswers, KeptAnswers] | None = None) -> Steps[None]:
    """SRV below a service name: the service name answers for every port,
    ``_<port>._<proto>`` for each named one (unnamed ports have none); into ``answers``,
    the empty non-terminals ``_<proto>.<svc>`` into ``names``. ``ports_of[i]``: the ports
    ``targets[i]`` serves. ``kept``: a big service's answers as last made, and where to
    keep these (an answer made of the same records is the same). Each answer made is a
    step (:mod:`dnsside.core.steps`): a big one is thousands of records."""
    if not any(ports_of):
        return
    numbers: dict[int, tuple[int, ...]] = {}  # id(ports) → its port numbers, each once

    def every_port(ports: tuple[Port, ...]) -> tuple[int, ...]:
        found = numbers.get(id(ports))
        if found is None:
            found = numbers[id(ports)] = tuple(dict.fromkeys(p.port for p in ports))
        return found

    _put_srv(answers, rotate, svc_name, svc_name, _pairs(targets, ports_of, every_port),
             options, kept)
    yield
    # The named ports, in the order they first appear (port tuples are shared by a
    # slice's endpoints: a few distinct ones among thousands of targets).
    named: dict[tuple[str, str], None] = {}
    for ports in dict(zip(map(id, ports_of), ports_of, strict=True)).values():
        named.update(((p.name, p.protocol), None) for p in ports if p.name)
    for port_name, protocol in named:
        proto = protocol_name(protocol, svc_name)
        if proto is None:
            continue
        names.add(proto)
        try:
            name = srv_name(port_name, proto)
        except ValueError:
            continue
        chosen: dict[int, tuple[int, ...]] = {}

        def its_ports(ports: tuple[Port, ...], port_name: str = port_name,
                      protocol: str = protocol,
                      chosen: dict[int, tuple[int, ...]] = chosen) -> tuple[int, ...]:
            found = chosen.get(id(ports))
            if found is None:
                found = chosen[id(ports)] = tuple(dict.fromkeys(
                    p.port for p in ports if p.name == port_name and p.protocol == protocol))
            return found

        _put_srv(answers, rotate, name, svc_name, _pairs(targets, ports_of, its_ports),
                 options, kept)
        yield


def _pairs(targets: Sequence[Target], ports_of: Sequence[tuple[Port, ...]],
           numbers: Callable[[tuple[Port, ...]], tuple[int, ...]]
           ) -> Callable[[Callable[[Target], bool] | None], Iterator[Pair]]:
    """The records' (target, port) pairs in order, as often as asked, of the targets
    ``only`` accepts (all without it): lazily, so a full answer stops the walk."""
    def walk(only: Callable[[Target], bool] | None) -> Iterator[Pair]:
        for t, ports in zip(targets, ports_of, strict=True):
            if only is None or only(t):
                for number in numbers(ports):
                    yield t, number
    return walk


def _put_srv(answers: dict[bytes, Answer], rotate: bool, name: bytes, svc_name: bytes,
             pairs: Callable[[Callable[[Target], bool] | None], Iterator[Pair]],
             options: ZoneOptions, kept_both: tuple[KeptAnswers, KeptAnswers] | None
             ) -> None:
    """The SRV answer of ``name`` (``svc_name`` or a ``_port._proto`` name below it) and its
    glue. A glue record's owner is a compression pointer into the SRV record naming its
    target when the answer keeps one order; when the records rotate, a pointer into them
    would point at another record after a turn, so the owners point only at what stays
    put (:func:`_still_glue`)."""
    ttl = options.ttl
    # Under local-first the local targets (priority 0) come first, then the others (10).
    walks: list[tuple[int, Iterator[Pair]]] = (
        [(0, pairs(_is_local)), (10, pairs(_is_remote))]
        if options.srv_priority == "local-first" else [(0, pairs(None))])
    runs: list[tuple[int, Iterable[Pair]]] = []
    weights: dict[int, int] = {}
    for prio, walk in walks:
        first = list(islice(walk, COUNTED))
        if first:
            weights[prio] = max(1, 100 // len(first))
            runs.append((prio, chain(first, walk)))
    records: Iterator[Triple] = (
        (prio, w, port) for prio, run in runs for w, port in run)
    kept, kept_next = kept_both if kept_both is not None else (None, None)
    last = kept.get(name) if kept is not None else None
    if last is not None and last.weights == weights:
        # The same records (the very same target objects, immutable) as far as the last
        # answer went, and the one that did not fit, or the end: the same bytes.
        n = len(last.seen)
        probe = list(islice(records, n + 1))
        if probe[:n] == last.seen and (last.full or len(probe) == n):
            answers[name + _SRV_IN] = last.answer
            if kept_next is not None:
                kept_next[name] = last
            return
        records = chain(probe, records)
    # Offsets below are absolute in the reply: header, then the question (name + 4).
    offset = 12 + len(name) + 4
    answer: list[bytes] = []
    seen: list[Triple] = []  # the records looked at: those taken and the first left out
    full = False
    target_at: dict[bytes, tuple[int, Target]] = {}
    # Everything of a record but its target: the pointer to the question, the RR head
    # (RDLENGTH depends on the target's length), priority, weight and port.
    heads: dict[tuple[int, int, int], bytes] = {}
    size = 0
    for triple in records:
        prio, w, port = triple
        target = w.target
        head = heads.get((prio, port, len(target)))
        if head is None:
            head = heads[(prio, port, len(target))] = (
                AT_QUESTION + rr_head(SRV, ttl, 6 + len(target))
                + _PACK_SRV(prio, weights[prio], port))
        rr = head + target
        seen.append(triple)
        if size + len(rr) > MAX_BODY:
            full = True
            break
        # The glue's owner will point at the target inside this record's RDATA.
        if target not in target_at:
            target_at[target] = (offset + size + 2 + 10 + 6, w)
        answer.append(rr)
        size += len(rr)
    rotate = rotate and len(answer) > 1
    additional: list[bytes] = []
    if rotate:
        additional = _still_glue([(target, w) for target, (_, w) in target_at.items()],
                                 {svc_name: 12 + len(name) - len(svc_name)}, offset + size)
    else:
        for target, (at, w) in target_at.items():
            owner = _pointer(at) if at < 0x4000 else target
            additional += [owner + t for t in w.a]
            if w.aaaa:
                additional += [owner + t for t in w.aaaa]
    additional = fit(additional, MAX_BODY - size)
    made = answers[name + _SRV_IN] = (Ring(NOERROR, SRV, answer, additional) if rotate
                                      else Answer(NOERROR, SRV, answer, (), additional))
    if kept_next is not None:
        kept_next[name] = KeptSrv(seen, full, weights, made)


class KeptSrv:
    """One SRV answer as made, with what it was made of: the records looked at (priority,
    the target object itself, port), the last of them left out when the answer was
    ``full``, and the weights. A big service keeps them between encodings: a change past
    the records an answer holds (most, in a service of thousands) keeps the answer."""

    __slots__ = ("answer", "full", "seen", "weights")

    def __init__(self, seen: list[Triple], full: bool, weights: dict[int, int],
                 answer: Answer) -> None:
        self.seen = seen
        self.full = full
        self.weights = weights
        self.answer = answer


def _is_local(t: Target) -> bool:
    return t.local


def _is_remote(t: Target) -> bool:
    return not t.local


_SRV_IN = struct.pack("!HH", SRV, CLASS_IN)  # QTYPE, QCLASS
_PACK_SRV = struct.Struct("!HHH").pack  # priority, weight, port


def _pointer(at: int) -> bytes:
    return struct.pack("!H", 0xC000 | at)


def _still_glue(targets: list[tuple[bytes, Target]], known: dict[bytes, int],
                at: int) -> list[bytes]:
    """The glue of a rotating SRV answer, written from offset ``at`` of the reply (just past
    the answer records, whose length no turn changes). Owners are compressed only against
    names that do not move with a turn: ``known`` (the service name inside the question,
    where every target ends) and the glue owners written before, so a target's second
    address record is a pointer to its first, and a pod's owner its hostname label and a
    pointer to its cluster's name, once written."""
    out: list[bytes] = []
    for target, w in targets:
        tails = (*w.a, *w.aaaa)
        if not tails:
            continue
        pos = 0
        while target[pos] and target[pos:] not in known:
            if at + pos < 0x4000:
                known[target[pos:]] = at + pos
            pos += target[pos] + 1
        owner = target[:pos] + _pointer(known[target[pos:]]) if target[pos] else target
        out.append(owner + tails[0])
        at += len(owner) + len(tails[0])
        if len(tails) > 1:
            again = _pointer(known[target]) if target in known else owner
            for tail in tails[1:]:
                out.append(again + tail)
                at += len(again) + len(tail)
    return out


__all__ = ["COUNTED", "KeptAnswers", "KeptSrv", "Target", "fit", "srv_answers"]
