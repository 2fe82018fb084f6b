#!/usr/bin/env python3
"""How long GET /metrics takes while N clients hold the metrics port: 'slow' ones trickle an
unfinished request (a header line every 100 ms), 'idle' ones send nothing. It starts the given
ucudnn-worker on the CPU backend with an unreachable database (its metrics endpoint serves while
it waits for the database), so no PostgreSQL is needed.

  python3 bench/metrics_slow_clients.py build/bin/ucudnn-worker

Prints one JSON line per case (N = 0, 16, 64, 200, 500 of each kind): the first of 5 scrapes
right after the N connected, their median and max, in ms."""
import json, re, socket, statistics, subprocess, sys, threading, time

binary = sys.argv[1]
proc = subprocess.Popen([binary, "--backend", "cpu", "--database-url", "postgresql://127.0.0.1:1/none",
                         "--metrics-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
port = None
log = ""
deadline = time.time() + 20
while port is None and time.time() < deadline:
    line = proc.stdout.readline()
    log += line
    m = re.search(r"metrics at http://[0-9.]+:([0-9]+)/metrics", line)
    if m: port = int(m.group(1))
threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
if port is None:
    print(log); proc.kill(); sys.exit(1)

def scrape_ms():
    t = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        d = s.recv(65536)
        if not d: break
        data += d
    s.close()
    ok = b" 200 " in data[:20] and b"ucudnn_worker_jobs_total" in data
    return (time.perf_counter() - t) * 1000 if ok else float("nan")

for kind in ("slow", "idle"):
    for n in (0, 16, 64, 200, 500):
        socks, stop = [], threading.Event()
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            if kind == "slow": s.sendall(b"GET /metrics HTTP/1.1\r\nHost: slow\r\n")
            socks.append(s)
        def trickle():
            while not stop.is_set():
                for s in socks:
                    try: s.sendall(b"X-Slow: 1\r\n")
                    except OSError: pass
                time.sleep(0.1)
        t = threading.Thread(target=trickle); 
        if kind == "slow": t.start()
        times = [scrape_ms() for _ in range(5)]
        stop.set()
        if kind == "slow": t.join()
        for s in socks: s.close()
        print(json.dumps({"clients": kind, "n": n, "first_ms": round(times[0], 1),
                          "median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}))
        time.sleep(6)  # the old endpoint's 5 s deadline clears what is left
proc.terminate(); proc.wait()
