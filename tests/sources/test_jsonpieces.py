"""A long watch line decoded in short calls (dnsside/sources/jsonpieces.py): the value
``json.loads`` gives, the refusals it gives, and the event loop's thread let in meanwhile
(issue 33 item 12: ``json.loads`` of a 1 MB line held the GIL 20-50 ms, worker thread
or not)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dnsside.model.linkerd import parse_slice
from dnsside.sources import jsonpieces
from dnsside.sources.watchline import OFF_LOOP_BYTES, ParsedRecord, load_event, load_long_event
from testkit.flatnet import endpoint, endpoint_slice

pytestmark = pytest.mark.quick


def big_line(pods: int = 12_000) -> bytes:
    eps = [endpoint(f"10.{100 + n // 62500}.{n // 250 % 250}.{n % 250 + 1}", f"big-{n}")
           for n in range(pods)]
    return json.dumps({"type": "MODIFIED", "object": endpoint_slice("big-1", "big", eps)}
                      ).encode()


DOCUMENTS: list[Any] = [
    {}, [], 0, -1.5e-7, "text", None, True, False,
    {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": {"j": [1, {"k": []}]}}}}}}}}}},
    {"type": "ADDED", "object": {"metadata": {"name": "x", "labels": {}},
                                 "endpoints": [{"addresses": ["10.0.0.1"]}, [], {}, 1, "s"]}},
    {"unicode": "é\u2028\u0000\"\\", "big": 10**40, "neg": -0, "exp": 1E+5, "list": [[[[1]]]]},
]


def spellings(doc: Any) -> Iterator[str]:
    yield json.dumps(doc)
    yield json.dumps(doc, indent=2)
    yield json.dumps(doc, separators=(",", ":"))
    yield " \n\t" + json.dumps(doc, indent="\t") + "\r\n "
    yield json.dumps(doc, ensure_ascii=False)


@pytest.mark.parametrize("doc", DOCUMENTS, ids=range(len(DOCUMENTS)))
def test_every_spelling_decodes_as_json_loads_does(doc: Any) -> None:
    for text in spellings(doc):
        assert jsonpieces.loads(text) == json.loads(text), text


def test_a_duplicate_key_keeps_its_last_value_and_nan_passes_as_in_json_loads() -> None:
    text = '{"a": 1, "a": {"b": 2, "b": [3]}, "n": NaN, "i": -Infinity}'
    got, want = jsonpieces.loads(text), json.loads(text)
    assert repr(got) == repr(want)


def test_what_json_loads_refuses_is_refused() -> None:
    """Every cut of a document, and the usual mistakes: a ValueError each, never another
    exception, never a value."""
    text = json.dumps({"type": "ADDED", "object": {"a": [1, {"b": "c"}, [2]], "d": None}})
    bad = [text[:n] for n in range(len(text))] + [
        text + "x", text + "{}", '{"a": 1,}', '{"a" 1}', '{a: 1}', "{'a': 1}", '[1 2]',
        '[1,]', '{"a": [1, 2}', '{"a": 1 "b": 2}', "", "   ", '"\x01"', "{\"a\": tru}"]
    for t in bad:
        with pytest.raises(ValueError):
            json.loads(t)
        with pytest.raises(ValueError):
            jsonpieces.loads(t)


def test_the_big_slice_is_what_json_loads_gives() -> None:
    line = big_line()
    assert jsonpieces.loads(line.decode()) == json.loads(line)


def test_a_long_line_nested_too_deeply_is_not_json_not_a_crash() -> None:
    line = (b'{"type": "ADDED", "object": ' + b'{"a": ' * 10 + b"[" * 200_000 + b"]" * 200_000
            + b"}" * 10 + b"}")
    assert len(line) > OFF_LOOP_BYTES
    event, parsed = load_event(parse_slice, line, "here")
    assert isinstance(event, ValueError) and parsed is None


def test_a_long_line_lets_the_loops_thread_in_while_a_worker_decodes_it() -> None:
    """While a worker thread decodes a 4 MB line (as the reflector has it do), the thread
    of the event loop gets its turns: before, ``json.loads`` held the GIL for the whole
    line, and that thread ran once or twice, at its ends. (Counted: the times this thread
    is let in while the worker is inside the call, with the switch interval made short.
    The line is long so that a machine busy with other work still lets it in often: 1 MB
    gave 5 turns once in a full run beside three other workers, 195 alone.)"""
    line = big_line(48_000)
    inside, done = threading.Event(), threading.Event()
    result: list[Any] = []

    def decode() -> None:
        inside.set()
        result.append(load_event(parse_slice, line, "here", parse=False))  # the JSON alone
        done.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        worker = threading.Thread(target=decode)
        worker.start()
        inside.wait()
        turns, last = 0, time.perf_counter()
        while not done.is_set():
            now = time.perf_counter()
            if now - last > 5e-5:  # this thread was out, and is let in again
                turns += 1
            last = now
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    event, parsed = result[0]
    assert parsed is None and event["object"]["metadata"]["name"] == "big-1"
    assert turns >= 6, turns  # json.loads: 1 or 2, before it took the GIL and after


def test_a_long_line_is_decoded_and_parsed_with_the_collector_off() -> None:
    """The JSON of a 12,000-endpoint slice is tens of thousands of dicts and lists that
    live until it is parsed: collections meanwhile would move them to the oldest
    generation and bring the collector's full pass, a stall of every query, sooner
    (in process, 10 such events brought 15 full passes; with the collector off, 8). The
    worker thread's call has it off until the record is made, and on again after."""
    import gc

    seen: list[bool] = []

    def parser(obj: Any, where: str) -> Any:
        seen.append(gc.isenabled())
        return parse_slice(obj, where)

    assert gc.isenabled()
    event, parsed = load_long_event(parser, big_line(), "here")
    assert seen == [False] and gc.isenabled()
    assert isinstance(parsed, ParsedRecord) and parsed.record is not None
    assert len(parsed.record.endpoints) == 12_000
