"""The file source: formats, bad input, reload, and "keep the last good state" through a server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import dns.rcode
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dnsside.model.events import Event, Kind, LinksUnavailable, Replace
from dnsside.model.linkerd import LinkRecord, ServiceRecord
from dnsside.sources.file import (
    FileSource,
    FileSourceError,
    load_records,
    read_objects,
)
from testkit.serve import DEMO, Dnsside, answers, run_cli, wait_for

NGINX = ["10.42.1.10", "10.42.1.11", "10.43.179.60", "10.43.218.18", "10.43.245.244"]


def test_list_multidoc_and_json_read_the_same(tmp_path: Path) -> None:
    items = yaml.safe_load(DEMO.read_text())["items"]
    multi = tmp_path / "multi.yaml"
    multi.write_text("\n".join("---\n" + yaml.safe_dump(o) for o in items))
    as_json = tmp_path / "dump.json"
    as_json.write_text(json.dumps({"kind": "List", "items": items}))
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(items))
    expected, _ = load_records(DEMO)
    for path in (multi, as_json, bare):
        got, warnings = load_records(path)
        assert got == expected and warnings == []


def test_namespace_filter() -> None:
    recs, _ = load_records(DEMO, frozenset({"db"}))
    links = [r for r in recs if isinstance(r, LinkRecord)]
    assert recs and {r.namespace for r in recs if r not in links} == {"db"}
    # Links count wherever they live, as on the API: they say which clusters are linked.
    assert {link.target_cluster for link in links} == {"west", "north", "south"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("items: [\n  - {kind: Service\n", r"bad.yaml:\d+:\d+: invalid YAML"),
        ('{"kind": "List", "items": [}', r"bad.yaml:1:\d+: invalid JSON"),
    ],
)
def test_broken_files_say_where(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(FileSourceError, match=message):
        list(read_objects(path))


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"kind: Service\nmetadata: {name: caf\xe9}\n")
    with pytest.raises(FileSourceError, match="not UTF-8"):
        list(read_objects(path))


def test_bad_objects_are_skipped_with_warnings(tmp_path: Path) -> None:
    items = yaml.safe_load(DEMO.read_text())["items"]
    items[2]["spec"]["clusterIPs"] = 42  # nginx-svc-west: wrong type
    items[4]["metadata"]["annotations"]["mirror.linkerd.io/remote-svc-fq-name"] = (
        "x" * 64 + ".nginx-svc.default.svc")  # nginx-set-0-west: hostname too long
    items[6]["metadata"]["annotations"]["mirror.linkerd.io/remote-svc-fq-name"] = (
        "ñginx.nginx-svc.default.svc")  # non-ASCII
    items.append({"kind": "Pod", "metadata": {"name": "p", "namespace": "default"}})
    items.append({"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}})
    items.append("just a string")
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": items}, allow_unicode=True))
    recs, warnings = load_records(path)
    names = {r.name for r in recs if isinstance(r, ServiceRecord)}
    assert {"nginx-svc-west", "nginx-set-0-west", "nginx-set-1-west"}.isdisjoint(names)
    assert "nginx-set-2-west" in names
    text = "\n".join(warnings)
    assert f"{path} items[2]: Service default/nginx-svc-west: spec.clusterIPs" in text
    assert "items[4]" in text and "cannot be a DNS label" in text
    assert "items[6]" in text
    assert "kind Pod" in text and "kind ConfigMap" in text
    assert "expected an object" in text


@pytest.mark.quick
@pytest.mark.parametrize(
    ("text", "warning"),
    [
        # A YAML list whose second item has no kind (a wrong indent, a hand-written file).
        ("- kind: Pod\n  metadata: {name: p, namespace: n}\n- metadata: {name: x}\n",
         "{path} item 2: not a Kubernetes object: no kind; skipped"),
        ("apiVersion: v1\nmetadata: {name: x, namespace: n}\n",
         "{path}: not a Kubernetes object: no kind; skipped"),
        ("kind: 7\nmetadata: {name: x, namespace: n}\n",
         "{path}: not a Kubernetes object: no kind (kind is int); skipped"),
        ("kind: List\nitems: {kind: Service}\n",
         "{path}: a List's items must be a list, got dict; skipped"),
        ('{"kind": "List", "items": "svc"}',
         "{path}: a List's items must be a list, got str; skipped"),
        ("---\nkind: List\n---\nkind: ServiceList\nitems: 3\n",
         "{path} document 2: a List's items must be a list, got int; skipped"),
    ],
)
def test_a_file_of_the_wrong_shape_says_what_and_where(tmp_path: Path, text: str,
                                                       warning: str) -> None:
    """These were all "ignored 1 object(s) of kind None" (or "of kind List")."""
    path = tmp_path / "dump.yaml"
    path.write_text(text)
    _, warnings = load_records(path)
    assert warning.format(path=path) in warnings, warnings
    assert not any("kind None" in w or "kind List" in w for w in warnings), warnings


def test_bad_object_keeps_its_previous_version(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml"
    shutil.copy(DEMO, path)
    first, _ = load_records(path)
    previous = {("Service" if isinstance(r, ServiceRecord) else "EndpointSlice", r.namespace,
                 r.name): r for r in first}
    items = yaml.safe_load(DEMO.read_text())["items"]
    items[4]["spec"]["ports"] = "eighty"
    path.write_text(yaml.safe_dump({"kind": "List", "items": items}))
    from dnsside.model.events import Kind

    prev = {(Kind.SERVICE if k[0] == "Service" else Kind.SLICE, k[1], k[2]): v
            for k, v in previous.items()}
    recs, warnings = load_records(path, previous=prev)
    assert any("kept its previous version" in w for w in warnings)
    assert recs == first


async def test_events_then_reload_then_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml"
    shutil.copy(DEMO, path)
    source = FileSource(path, poll_interval=0.01)
    stream = source.events()
    first = await anext(stream)
    assert isinstance(first[0], Replace) and len(first[0].records) == 61
    # The dump has Links, so it has all of them: Links are part of the whole truth.
    assert Kind.LINK in first[0].kinds
    items = yaml.safe_load(DEMO.read_text())["items"][:10]
    path.write_text(yaml.safe_dump({"kind": "List", "items": items}))
    second = await anext(stream)
    assert isinstance(second[0], Replace) and len(second[0].records) == 10
    # A dump without any Link was taken without them: say so, so nothing is filtered.
    assert Kind.LINK not in second[0].kinds
    assert isinstance(second[1], LinksUnavailable) and "no Link objects" in second[1].reason
    path.write_text("{{{ not yaml")
    third = await anext(stream)
    assert "invalid" in str(third[0])
    await stream.aclose()


def test_missing_file_exits_nonzero_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = run_cli(["serve", "--source", str(missing), "--listen", "127.0.0.1:0",
                      "--http-listen", "127.0.0.1:0"])
    assert result.returncode == 2
    assert f"{missing}: no such file" in result.stderr


def test_bad_flags_exit_nonzero() -> None:
    result = run_cli(["serve", "--source", str(DEMO), "--listen", "nonsense"])
    assert result.returncode == 2 and "--listen 'nonsense'" in result.stderr
    result = run_cli(["serve", "--source", str(DEMO), "--cluster-name", "Not_A Label"])
    assert result.returncode == 2 and "--cluster-name" in result.stderr


def test_server_reloads_and_survives_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml"
    shutil.copy(DEMO, path)
    with Dnsside("--source", str(path), "--cluster-name", "east",
                 env={"DNSSIDE_RELOAD_INTERVAL": "0.05"}) as srv:
        assert answers(srv.query("nginx-svc.default.svc-global")) == NGINX
        items = yaml.safe_load(DEMO.read_text())["items"]
        north = [o for o in items if o["kind"] == "EndpointSlice"
                 and o["metadata"]["name"].startswith("nginx-set-0-north")]
        north[0]["endpoints"][0]["conditions"]["ready"] = True
        path.write_text(yaml.safe_dump({"kind": "List", "items": items}))
        wait_for(lambda: "10.43.61.5" in answers(srv.query("nginx-svc.default.svc-global")),
                 what="north's nginx-set-0 after reload")
        path.write_text("items: [ {{ broken")
        srv.wait_log("reload failed, still serving the previous state")
        assert re.search(r"dump\.yaml:\d+:\d+: invalid YAML", srv.wait_log("invalid YAML"))
        assert "10.43.61.5" in answers(srv.query("nginx-svc.default.svc-global"))
        os.remove(path)
        srv.wait_log("no such file")
        msg = srv.query("nginx-svc.default.svc-global")
        assert msg.rcode() == dns.rcode.NOERROR and len(answers(msg)) == 6
        status, text = srv.http("/metrics")
        assert status == 200
        assert "dnsside_file_reload_errors_total 2.0" in text
        assert srv.stop() == 0


# Cheap to generate (a loaded CI machine must not trip hypothesis' too_slow check), and
# still nested: a dict inside an item, an "items" key that is not the top-level one.
_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=4)
_values = _leaf | st.lists(_leaf, max_size=3) | st.dictionaries(
    st.sampled_from(["items", "a", "b"]), _leaf, max_size=2)


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(st.dictionaries(st.sampled_from(["kind", "items", "metadata", "x"]), _values,
                                   max_size=3), max_size=4),
    extra=st.dictionaries(st.sampled_from(["apiVersion", "kind", "metadata"]), _values),
    items_first=st.booleans(),
    indent=st.sampled_from([None, 0, 2, "\t"]),
)
def test_streamed_json_list_equals_json_loads(
        tmp_path_factory: pytest.TempPathFactory, items: list[Any], extra: dict[str, Any],
        items_first: bool, indent: Any) -> None:
    doc = {"items": items, **extra} if items_first else {**extra, "items": items}
    f = json_file(tmp_path_factory, json.dumps(doc, indent=indent))
    assert [o for _, o in read_objects(f)] == items
    assert [w for w, _ in read_objects(f)] == [f"{f} items[{i}]" for i in range(len(items))]


def json_file(tmp_path_factory: pytest.TempPathFactory, text: str) -> Path:
    """``text`` in a file of its own (hypothesis takes no function-scoped tmp_path)."""
    f = tmp_path_factory.mktemp("json") / "dump.json"
    f.write_text(text)
    return f


def test_json_shapes_and_errors(tmp_path_factory: pytest.TempPathFactory) -> None:
    single = {"kind": "Service", "metadata": {"items": [1, 2]}}
    f = json_file(tmp_path_factory, json.dumps(single))
    assert list(read_objects(f)) == [(str(f), single)]
    f = json_file(tmp_path_factory, '[{"a": 1}, {"b": 2}]')
    assert list(read_objects(f)) == [(f"{f} item 1", {"a": 1}), (f"{f} item 2", {"b": 2})]
    for bad in ('{"items": [1 2]}', '{"items": [1], }', '{"items": [1,]}', '{"items": [1]} x',
                '{"a" 1}', "{1: 2}"):
        with pytest.raises(FileSourceError, match="invalid JSON"):
            list(read_objects(json_file(tmp_path_factory, bad)))


def first_batch(source: FileSource) -> list[Event]:
    """What ``source`` yields first (its load, then the sync), as `serve` takes it."""
    async def first() -> list[Event]:
        batches = source.events()
        try:
            return await anext(batches)
        finally:
            await batches.aclose()  # type: ignore[attr-defined]  # an async generator

    return asyncio.run(first())


def test_a_file_with_no_usable_service_says_the_zone_is_empty(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": [
        {"kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}},
        {"kind": "Service", "metadata": {"name": "bad", "namespace": "default"},
         "spec": {"clusterIPs": 42}}]}))
    caplog.set_level("WARNING", logger="dnsside.file")
    first_batch(FileSource(path))
    assert any(r.getMessage() == f"{path}: no Service in it could be used: the zones stay "
               "empty until it holds one (`kubectl get services,endpointslices,"
               "links.multicluster.linkerd.io -A -o yaml` writes such a file)"
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    caplog.clear()
    first_batch(FileSource(DEMO))
    assert not [r for r in caplog.records if "no Service" in r.getMessage()]


def test_readyz_says_why_it_is_not_ready() -> None:
    from dnsside.serving.http import HttpServer

    reason: list[str | None] = ["initial sync not done: the source (kube) has not delivered "
                                "its first complete list yet; the log says why"]
    http = HttpServer(lambda: reason[0])
    status, _, body = http.route(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (status, body) == (503, f"not ready: {reason[0]}\n".encode())
    reason[0] = None
    assert http.route(b"GET /readyz HTTP/1.1\r\n\r\n")[:3:2] == (200, b"ready\n")
