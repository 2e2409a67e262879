#!/usr/bin/python3
"""Two emulated hosts sending to each other at once, as an allreduce's ranks do: what each way
carries, and what the host's own queue and TCP say about it. Run it through on_hosts:

    bazel-bin/comm/job/on_hosts --nprocs=2 --hosts=2 --link=1gbit -- \\
        /usr/bin/python3 tools/link_both_ways.py [--mib=200]

Each rank prints one line: Gbit/s each way, its eth0 queue (tc -s) and its retransmitted TCP
segments (nstat).
"""

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

PORT = 29700


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=200, help="MiB each way")
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    total = args.mib << 20
    chunk = b"x" * (1 << 20)
    if rank == 0:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", PORT))
        server.listen(1)
        server.settimeout(60)
        sock, _ = server.accept()
    else:
        deadline = time.time() + 60
        while True:
            try:
                sock = socket.create_connection((os.environ["MASTER_ADDR"], PORT), timeout=60)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)

    def receive():
        left = total
        while left > 0:
            data = sock.recv(1 << 20)
            if not data:
                raise SystemExit("error: the peer closed early")
            left -= len(data)

    start = time.time()
    receiver = threading.Thread(target=receive)
    receiver.start()
    sock.sendall(chunk * (total // len(chunk)))
    receiver.join()
    seconds = time.time() - start
    qdisc = subprocess.run(["tc", "-s", "qdisc", "show", "dev", "eth0"], capture_output=True,
                           text=True, timeout=30).stdout.splitlines()
    sent = next((line.strip() for line in qdisc if "dropped" in line), "")
    retrans = subprocess.run(["nstat", "-az", "TcpRetransSegs"], capture_output=True,
                             text=True, timeout=30).stdout.split()
    print(f"rank {rank}: {total * 8 / seconds / 1e9:.3f} Gbit/s each way; "
          f"{qdisc[0] if qdisc else ''} | {sent}; TcpRetransSegs {retrans[-2] if retrans else '?'}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
