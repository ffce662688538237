#!/usr/bin/env python3
"""Half-sent request bodies against a running Warden: the server's memory before, during
and after N clients that announce a 4 MB `/api/alerts` body with a wrong token, send up to
2 MB of it and stall. Standard library only.

    tests/bench/half_sent_bodies.py PORT PID [N]

PORT is the server's port on 127.0.0.1 (started with --alert-token), PID its process id.
Prints one JSON object (RSS in MiB).
"""
import json
import socket
import sys
import time

HEADERS = (
    b"POST /api/alerts HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Authorization: Bearer not-the-alert-token\r\n"
    b"Content-Type: application/json\r\nContent-Length: 4000000\r\n\r\n"
)


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    raise SystemExit(f"no process {pid}")


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    port, pid = int(sys.argv[1]), int(sys.argv[2])
    clients = int(sys.argv[3]) if len(sys.argv) == 4 else 250
    before = rss_mib(pid)
    chunk = b"x" * 65536
    held = []
    for _ in range(clients):
        conn = socket.create_connection(("127.0.0.1", port))
        conn.sendall(HEADERS)
        conn.setblocking(False)
        sent, deadline = 0, time.time() + 0.5
        while sent < 2_000_000 and time.time() < deadline:
            try:
                sent += conn.send(chunk)
            except BlockingIOError:
                time.sleep(0.005)
            except OSError:
                break  # the server answered and closed: nothing more to send
        held.append(conn)
    time.sleep(3)
    during = rss_mib(pid)
    for conn in held:
        conn.close()
    time.sleep(3)
    print(json.dumps({
        "clients": clients,
        "rss_before_mib": before,
        "rss_with_half_sent_bodies_mib": during,
        "rss_after_close_mib": rss_mib(pid),
    }))


if __name__ == "__main__":
    main()
