"""glibc's stub resolver as a C program sees it: getaddrinfo(3) through nsswitch, and
res_query(3) / res_search(3) from libresolv, called through ctypes. Reads whatever
/etc/resolv.conf says (inside a test's network namespace: the test's resolver on port 53,
its search list and ndots). One JSON object per argument on stdout.

Arguments: gai:NAME (AF_UNSPEC), gai4:NAME, gai6:NAME, query:TYPE:NAME (res_query, no
search list), search:TYPE:NAME (res_search, the search list applies).
"""

from __future__ import annotations

import ctypes
import json
import socket
import sys

import dns.message
import dns.rdatatype

libresolv = ctypes.CDLL("libresolv.so.2", use_errno=True)
libc = ctypes.CDLL("libc.so.6")
libc.__h_errno_location.restype = ctypes.POINTER(ctypes.c_int)
for fn in (libresolv.res_query, libresolv.res_search):
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    fn.restype = ctypes.c_int
H_ERRNO = {1: "HOST_NOT_FOUND", 2: "TRY_AGAIN", 3: "NO_RECOVERY", 4: "NO_DATA"}
FAMILY = {"gai": socket.AF_UNSPEC, "gai4": socket.AF_INET, "gai6": socket.AF_INET6}


def getaddrinfo(kind: str, name: str) -> dict[str, object]:
    try:
        infos = socket.getaddrinfo(name, None, FAMILY[kind], socket.SOCK_STREAM)
    except socket.gaierror as e:
        return {"error": e.strerror, "gai_error": e.errno,
                "not_found": e.errno == socket.EAI_NONAME}
    return {"addresses": sorted({str(info[4][0]) for info in infos})}


def res(kind: str, rdtype: str, name: str) -> dict[str, object]:
    buf = ctypes.create_string_buffer(65535)
    fn = libresolv.res_query if kind == "query" else libresolv.res_search
    n = fn(name.encode(), 1, dns.rdatatype.from_text(rdtype), buf, len(buf))
    if n < 0:
        h_errno = libc.__h_errno_location().contents.value
        return {"error": H_ERRNO.get(h_errno, str(h_errno)), "not_found": h_errno == 1}
    msg = dns.message.from_wire(buf.raw[:n])
    return {
        "rcode": msg.rcode(), "qname": msg.question[0].name.to_text(),
        "records": sorted(f"{dns.rdatatype.to_text(rrset.rdtype)} {rd.to_text()}"
                          for rrset in msg.answer for rd in rrset),
        "additional": sorted(f"{rrset.name} {rd.to_text()}" for rrset in msg.additional
                             for rd in rrset),
    }


def main() -> None:
    for arg in sys.argv[1:]:
        kind, rest = arg.split(":", 1)
        if kind in FAMILY:
            out = getaddrinfo(kind, rest)
        else:
            rdtype, name = rest.split(":", 1)
            out = res(kind, rdtype, name)
        print(json.dumps({"query": arg, **out}), flush=True)


if __name__ == "__main__":
    main()
