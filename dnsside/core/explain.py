"""`dnsside explain NAME [TYPE]`: the answer to a question, and where each record comes from.

It asks the same :class:`~dnsside.dns.responder.Responder` the server uses (so what it
prints is what a client gets), then walks the global service behind the name
and says, member by member, which objects it comes from and why it is in or
out of the answer. Only humans call this; nothing here is on the query path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dnslib import RCODE, DNSRecord

from dnsside.core.assembly import GlobalService
from dnsside.core.encode import published
from dnsside.core.locality import answering, describe
from dnsside.core.members import Member
from dnsside.core.view import ExplainView
from dnsside.dns.catalog import CatalogZone
from dnsside.dns.names import MCS, SERVICES_LABEL, Shape, parse
from dnsside.dns.wire import to_wire
from dnsside.model.events import Gateway
from dnsside.model.linkerd import Via
from dnsside.model.printable import printable
from dnsside.model.probes import probe_targets


class Explainer:
    """Reads the index through its :class:`~dnsside.core.view.ExplainView` only."""

    def __init__(self, index: ExplainView,
                 secondaries: Callable[[], Mapping[str, str]] | None = None) -> None:
        self.index = index
        # The --notify secondaries and their state in words (the serving process's NOTIFYs;
        # ``dnsside explain`` sends none and has none).
        self.secondaries = secondaries

    def _unwatched(self, namespace: str) -> str:
        """What to add when ``--namespace`` leaves ``namespace`` out: nothing of it is read,
        so "no mirror of it exists" would send the operator to the wrong cluster."""
        watched = self.index.options.namespaces
        if not watched or namespace in watched:
            return ""
        return (f": namespace {namespace} is not watched (--namespace {', '.join(watched)}), "
                "so none of its Services is read")

    def _origin(self, namespace: str, m: Member) -> str:
        """The objects a member comes from, spelled out from the index."""
        if m.via is Via.FLAT_NETWORK:  # a linked cluster's own slice, watched directly
            kind = self.index.flat.object_kind(m.cluster, namespace, m.source)
            return f"{kind} {namespace}/{m.source} in cluster {m.cluster}"
        if m.local and m.hostname is not None:  # endpoints of the local headless Service
            svc = self.index.local.slices[(namespace, m.source)].service_name
            slices = [s.name for s in self.index.local.slices_of(namespace, svc)
                      if any(m.hostname in (e.hostname, e.pod_name) or (
                          e.addresses and e.addresses[0] in m.addresses) for e in s.endpoints)]
            return ", ".join(f"EndpointSlice {namespace}/{name}" for name in slices)
        slices = [s.name for s in self.index.local.slices_of(namespace, m.source)]
        return ", ".join([f"Service {namespace}/{m.source}",
                          *(f"EndpointSlice {namespace}/{name}" for name in slices)])

    def explain(self, name: str, qtype: str = "A") -> dict[str, Any]:
        report: dict[str, Any] = {"question": {"name": name, "type": qtype.upper()}}
        try:
            query = DNSRecord.question(name, qtype.upper())
        except Exception as exc:  # dnslib raises several types for a bad name or type
            return {**report, "error": f"cannot build a query for {name!r} {qtype!r}: {exc}"}
        reply_bytes = self.index.responder.respond(bytes(query.pack()), udp=False)
        if reply_bytes is None:
            return {**report, "error": "no reply"}
        reply = DNSRecord.parse(reply_bytes)
        report["rcode"] = RCODE.get(reply.header.rcode)
        report["answer"] = [str(rr) for rr in reply.rr]
        report["authority"] = [str(rr) for rr in reply.auth]
        report["additional"] = [str(rr) for rr in reply.ar]
        report.update(self._why(name))
        zone_info = self._zone(name)
        if zone_info:
            report["zone"] = zone_info
        return report

    def _zone(self, name: str) -> dict[str, Any] | None:
        """The zone ``name`` is in: its serial and what transfers keep of it."""
        try:
            zone = self.index.responder.zone_of(to_wire(name))
        except ValueError:
            return None
        if zone is None:
            return None
        cut = self.index.publisher.cut_serial
        out: dict[str, Any] = {"origin": zone.origin, "serial": cut}
        if isinstance(zone, CatalogZone):  # its own serial, the serving process's start
            out["serial"] = zone.serial if cut is not None else None
        versions = self.index.publisher.versions.get(zone.wire)
        if versions is None:
            out["transfers"] = "not transferred (no --allow-transfer or --tsig-key-file)"
        else:
            out["transfers"] = (f"{_count(versions.history_versions, 'version')} of differences "
                                f"kept for IXFR, {_count(versions.history_records, 'record')}")
            if versions.broken:
                out["transfers"] += f"; transfers fail: {versions.broken}"
            if isinstance(zone, CatalogZone):
                out["transfers"] = ("one version for the life of the process, no history (an "
                                    "IXFR from an older serial gets the whole catalog)")
        if self.secondaries is not None and (states := self.secondaries()):
            out["notify"] = dict(states)
        return out

    def _why(self, name: str) -> dict[str, Any]:
        try:
            wire = to_wire(name)
        except ValueError as exc:
            return {"explanation": str(exc)}
        zone = self.index.responder.zone_of(wire)
        if zone is None:
            return {"explanation": "outside every served zone: REFUSED"}
        if not self.index.synced:
            return {"explanation": "the source has not finished its initial sync: SERVFAIL"}
        if isinstance(zone, CatalogZone):
            return {"explanation": zone.describe(wire.lower())}
        request = parse(wire, zone)
        kind, mcs = request.kind, request.scheme == MCS
        if kind is Shape.APEX:
            return {"explanation": f"the zone apex {zone.origin}"}
        if kind is Shape.VERSION:
            return {"explanation": "the schema version of the Multi-Cluster Services DNS "
                                   "specification (TXT)"}
        if kind is Shape.SERVICES:
            return {"explanation": f"svc.{zone.origin}: an empty non-terminal"}
        if kind is Shape.NONE:
            if mcs and request.labels[-1] != SERVICES_LABEL:
                return {"explanation": "not a Multi-Cluster Services name (they end in "
                                       f"svc.{zone.origin}): NXDOMAIN"}
            below = f"svc.{zone.origin}" if mcs else zone.origin
            return {"explanation": f"no name of the zone has this shape (below {below}: "
                                   "<ns>, <svc>.<ns>, <cluster>.<svc>.<ns>, "
                                   "<host>.<cluster>.<svc>.<ns>, _<port>._<proto>.<svc>.<ns>): "
                                   "NXDOMAIN"}
        unwatched = self._unwatched(request.namespace)
        if kind is Shape.NAMESPACE:
            services = sorted(n for ns, n in self.index.global_services
                              if ns == request.namespace)
            return {"explanation": f"namespace {request.namespace}: global services {services}"
                                   + unwatched}
        srv_filter = None
        if kind is Shape.SRV:  # _<port>._<proto>
            srv_filter = ".".join(request.labels[:2])
        elif kind is Shape.PROTOCOL:  # _<proto>
            srv_filter = request.labels[0]
        svc, ns = request.service, request.namespace
        gs = self.index.global_services.get((ns, svc))
        scope = self.index.flat.scope(ns)
        if gs is None:
            if unwatched:
                return {"explanation": f"no global service {ns}/{svc}{unwatched}"}
            return {"explanation": f"no global service {ns}/{svc}: no mirror of it exists and "
                                   "the local Service is not exported"
                                   + (f"; {scope}" if scope else "")}
        zone_members = published(gs, self.index.options.zone)
        shown = set(map(id, zone_members))
        if mcs and not gs.local_exported:  # only exporting clusters' members belong
            zone_members = [m for m in zone_members if not m.via.local]
        own_name = kind in (Shape.SERVICE, Shape.SRV, Shape.PROTOCOL)  # what --locality filters
        own = set(map(id, answering(gs, zone_members)))
        cluster, host = request.cluster or None, request.host or None
        federated = not gs.headless and any(
            m.via is Via.FEDERATED and id(m) in shown for m in gs.members)
        members = []
        for m in (*gs.members, *gs.excluded):
            if cluster is not None and m.cluster != cluster:
                continue
            if host is not None and m.hostname != host:
                continue
            if id(m) in shown and mcs and m.via.local and not gs.local_exported:
                why = ("left out: only exporting clusters belong to a clusterset service, and "
                       "the local Service has no mirror.linkerd.io/exported label")
            elif id(m) in shown and mcs and kind is Shape.CLUSTER:
                why = "left out: KEP-1645 has no per-cluster names"
            elif id(m) in shown and own_name and id(m) not in own:
                why = (f"left out: locality {gs.locality.value}: only the local cluster "
                       "answers while it has a ready member")
            elif id(m) in shown and mcs and federated and m.via is not Via.FEDERATED:
                why = "left out: the federated ClusterIP stands for every cluster"
            elif id(m) in shown:
                why = "in the answer"
            elif m.exclusion is not None:
                why = f"left out: {m.why_not_ready}"
            elif not m.addresses:
                why = "left out: no address"
            else:
                why = f"left out: not ready ({m.why_not_ready})"
            entry = {
                "cluster": m.cluster,
                "hostname": m.hostname,
                "addresses": list(m.addresses),
                "ports": [f"{p.name or '-'}/{p.protocol}:{p.port}" for p in m.ports],
                "ready": m.ready,
                "local": m.local,
                "via": m.via.value,
                "from": self._origin(ns, m),
                "status": why,
            }
            if m.via.through_gateway:
                entry["gateway_probe"] = self._gateway(m.cluster)
            if m.via is Via.FLAT_NETWORK:
                entry["remote_api"] = self.index.flat.describe(m.cluster)
            members.append(entry)
        out: dict[str, Any] = {"global_service": f"{ns}/{svc}", "members": members,
                               "links": self.index.links.describe()}
        out["locality"] = self._locality(gs, zone_members, kind, mcs)
        if self.index.flat.status:
            out["flat_network"] = {c: self.index.flat.describe(c)
                                   for c in sorted(self.index.flat.status)}
        if scope:
            out["flat_network_namespaces"] = scope
        if self.index.warnings:
            out["warnings"] = list(self.index.warnings.values())
        if srv_filter:
            out["srv_filter"] = srv_filter
        if mcs:
            out["naming"] = _mcs_naming(gs, kind)
        return out

    @staticmethod
    def _locality(gs: GlobalService, zone_members: list[Member], kind: Shape, mcs: bool
                  ) -> dict[str, Any]:
        """The locality in force, where it comes from, which clusters the service's own
        name answers now and why; and whether it applies to this name at all."""
        report = describe(gs, zone_members)
        out: dict[str, Any] = {"mode": report.mode, "from": report.source,
                               "answering": report.answering, "why": report.why}
        if mcs and not gs.local_exported and gs.has_local:
            out["why"] = ("the local Service is not exported (mirror.linkerd.io/exported): its "
                          "members are not in the clusterset service, so every exporting "
                          "cluster answers")
        if kind in (Shape.CLUSTER, Shape.MEMBER):
            out["applies"] = ("no: this name is one cluster's or one pod's; locality filters "
                              "only the service's own name and its SRV")
        return out

    def _gateway(self, cluster: str) -> str:
        known = self.index.gateways.get(cluster)
        probed = cluster in probe_targets(self.index.local.probe_services(),
                                          self.index.links.values(), self.index.links.linked())
        if known is not None:
            state, detail = known
            if state is Gateway.UNREACHED:
                text = (f"never answered since start ({detail}): not acted on, Linkerd's "
                        "readiness stands")
            else:
                text = f"{state.value}" + (f" ({detail})" if state is Gateway.FAILING else "")
            if not probed:
                text += ("; last known, not probed now (no Link or no probe Service): it "
                         "stands until the probe resumes")
            return text
        if probed:
            return "not probed yet, or off (dnsside explain itself never probes: ask the " \
                   "running server's /debug/explain)"
        return "not probed: no gateway probe Service for this cluster"


def _mcs_naming(gs: GlobalService, kind: Shape) -> str:
    """How the --mcs-zone encoder reads this service, in one sentence."""
    if kind is Shape.CLUSTER:
        return ("KEP-1645 forbids per-cluster names (<clusterid>.<svc>.<ns>.svc): no "
                "records whatever the members; NODATA where pod names exist below it (an "
                "empty non-terminal, RFC 8020), else NXDOMAIN")
    if gs.headless:
        return ("KEP-1645 headless service: every published member's address; pod members "
                "have <hostname>.<clusterid> names and SRV targets, cluster-level members "
                "(headless mirroring off) only the service's A/AAAA")
    if any(m.via is Via.FEDERATED for m in gs.members):
        return ("KEP-1645 ClusterIP service: the federated Service's ClusterIP is the "
                "clusterset IP, the only address answered; SRV targets <svc>.<ns>.svc")
    return ("KEP-1645 ClusterIP service with no federated Service: every member's ClusterIP "
            "stands in for a clusterset IP; SRV targets <svc>.<ns>.svc")


__all__ = ["Explainer"]


def render(report: dict[str, Any]) -> str:
    """An :meth:`Explainer.explain` report for a person, in the way of ``kubectl describe``:
    the question, the answer as dig prints it, then one line per member."""
    question = report.get("question") or {}
    lines = [f"Question:        {question.get('name', '?')} {question.get('type', '?')}"]
    if "error" in report:
        return "\n".join([*lines, f"Error:           {report['error']}"]) + "\n"
    answer = report.get("answer") or []
    lines.append(f"Answer:          {report.get('rcode', '?')}, {_count(len(answer), 'record')}")
    for section in ("answer", "authority", "additional"):
        records = report.get(section) or []
        if records and section != "answer":
            lines.append(f"{section.capitalize() + ':':<17}{_count(len(records), 'record')}")
        lines.extend(f"  {' '.join(str(r).split())}" for r in records)
    if "explanation" in report:
        lines.append(f"Explanation:     {report['explanation']}")
    if "zone" in report:
        zone = report["zone"]
        serial = (f"serial {zone['serial']}" if zone["serial"] is not None else
                  "no version yet (the serving process numbers them)")
        lines.append(f"Zone:            {zone['origin']} {serial}; {zone['transfers']}")
        for target, state in (zone.get("notify") or {}).items():
            lines.append(f"NOTIFY:          {target} {state}")
    if "global_service" in report:
        lines.append(f"Global service:  {report['global_service']}")
    if "naming" in report:
        lines.append(f"Naming:          {report['naming']}")
    if "srv_filter" in report:
        lines.append(f"SRV names:       {report['srv_filter']} only")
    if "locality" in report:
        loc = report["locality"]
        lines.append(f"Locality:        {loc['mode']}, from {loc['from']}")
        lines.append(f"Answering:       {', '.join(loc['answering']) or 'none'}: {loc['why']}")
        if "applies" in loc:
            lines.append(f"                 (applies to this name: {loc['applies']})")
    if "links" in report:
        lines.append(f"Links:           {report['links']}")
    for cluster, state in (report.get("flat_network") or {}).items():
        lines.append(f"Flat network:    cluster {cluster}: {state}")
    if "flat_network_namespaces" in report:
        lines.append(f"Flat network:    {report['flat_network_namespaces']}")
    members = report.get("members")
    if members is not None:
        lines.append(f"Members:         {len(members) or 'none'}")
        rows = [("CLUSTER", "HOSTNAME", "ADDRESSES", "ANSWER", "FROM", "HOW, OR WHY NOT")]
        for m in members:
            served = m["status"] == "in the answer"
            how = m["via"] if served else m["status"].removeprefix("left out: ")
            probe = m.get("gateway_probe") or ""
            if probe and not probe.startswith("not probed"):
                how += f"; gateway probe: {probe}"
            origin = m["from"].split(", ")
            rows.append((m["cluster"], m["hostname"] or "-", ",".join(m["addresses"]) or "-",
                         "yes" if served else "no",
                         origin[0] + (f" (+{len(origin) - 1})" if len(origin) > 1 else ""), how))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        if members:
            lines.extend("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False))
                         + "  " + r[-1] for r in rows)
    for warning in report.get("warnings") or []:
        lines.append(f"Warning:         {warning}")
    # One line each, whatever the objects' names hold (a linked cluster chose some of them).
    return "\n".join(printable(line.rstrip(), _LINE) for line in lines) + "\n"


_LINE = 64 * 1024  # characters of one line of the report: escaped, never cut in practice


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
