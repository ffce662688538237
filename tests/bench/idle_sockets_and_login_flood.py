#!/usr/bin/env python3
"""Two attacks by clients without an account, against a running Warden. Standard library only.

    tests/bench/idle_sockets_and_login_flood.py PORT USER PASSWORD [SOCKETS]

1. SOCKETS (default 320) sockets that send a request line and one header, then nothing;
   while they are open, `GET /healthz` is timed (10 s at most), and 15 s later the sockets
   the server still holds open are counted.
2. A password-guessing flood: 16 threads guess USER's password from 200 addresses (by
   `X-Forwarded-For`: start the server with `--trusted-proxy 127.0.0.1`); after 2 s the
   real user signs in 20 times from an address of their own. Counts the sign-ins that got
   through and their waits.

Prints one JSON object.
"""
import http.client
import json
import socket
import sys
import threading
import time


def healthz_ms(port):
    started = time.time()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/healthz")
        status = conn.getresponse().status
    except OSError:
        return None
    return round((time.time() - started) * 1000) if status == 200 else None


def idle_sockets(port, count):
    held = []
    for _ in range(count):
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=2)
            conn.sendall(b"GET /api/me HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Waiting: ")
            held.append(conn)
        except OSError:
            pass
    during = healthz_ms(port)
    time.sleep(15)
    still_open = 0
    for conn in held:
        conn.setblocking(False)
        try:
            if conn.recv(1) != b"":
                still_open += 1
        except BlockingIOError:
            still_open += 1
        except OSError:
            pass
        conn.close()
    return {"sockets": len(held), "healthz_ms_during": during,
            "still_open_after_15_s": still_open}


def sign_in(port, user, password, address):
    body = json.dumps({"name": user, "password": password})
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/api/login", body, {
            "Content-Type": "application/json", "X-Forwarded-For": address})
        return conn.getresponse().status
    except OSError:
        return None


def login_flood(port, user, password):
    stop = threading.Event()
    guesses = [0]

    def guess(start):
        n = start
        while not stop.is_set():
            sign_in(port, user, "not-the-password", f"10.9.0.{n % 200}")
            guesses[0] += 1
            n += 16

    threads = [threading.Thread(target=guess, args=(t,)) for t in range(16)]
    for thread in threads:
        thread.start()
    time.sleep(2)
    waits, succeeded = [], 0
    for _ in range(20):
        started = time.time()
        if sign_in(port, user, password, "192.168.50.7") == 200:
            succeeded += 1
        waits.append(round((time.time() - started) * 1000))
    stop.set()
    for thread in threads:
        thread.join()
    waits.sort()
    return {"user_sign_ins": 20, "succeeded": succeeded, "p50_ms": waits[10],
            "max_ms": waits[-1], "guesses": guesses[0]}


def main():
    if len(sys.argv) not in (4, 5):
        raise SystemExit(__doc__)
    port, user, password = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    count = int(sys.argv[4]) if len(sys.argv) == 5 else 320
    print(json.dumps({"idle_sockets": idle_sockets(port, count),
                      "login_flood": login_flood(port, user, password)}))


if __name__ == "__main__":
    main()
