"""A TCP listener on 0.0.0.0:PORT that accepts every connection and closes it: what the
connecting clients of test_client_spread.py reach. Runs until stopped."""

from __future__ import annotations

import socket
import sys


def main() -> None:
    with socket.create_server(("0.0.0.0", int(sys.argv[1])), backlog=128) as server:
        print("listening", flush=True)
        while True:
            conn, _ = server.accept()
            conn.close()


if __name__ == "__main__":
    main()
