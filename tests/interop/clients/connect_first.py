"""An application on glibc as most connect: ``socket.create_connection((NAME, PORT))``, which
asks getaddrinfo(3) (through nsswitch and /etc/resolv.conf) and connects to the first
address that answers, COUNT times in a row. Prints one JSON object: the address each
connection reached, in order.

Arguments: NAME PORT COUNT. Something must listen on PORT at every address (the test
gives the namespace's loopback the members' addresses and runs accept_all.py)."""

from __future__ import annotations

import json
import socket
import sys


def main() -> None:
    name, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    reached = []
    for _ in range(count):
        with socket.create_connection((name, port), timeout=5) as conn:
            reached.append(conn.getpeername()[0])
    print(json.dumps({"reached": reached}))


if __name__ == "__main__":
    main()
