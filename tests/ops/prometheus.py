"""prometheus.py BIN — Debian's Prometheus scrapes memdecayd's --metrics-listen
endpoint and finds the daemon's own figures.

memdecay-loadgen runs 1500 steps under a 64-page budget, then holds its
engine attached, so memdecay_evictions_total stops moving at a value the
daemon reports through `memdecayctl metrics`.  A Prometheus server on loopback
(free port, temp-dir storage, 1 s scrape interval) scrapes the daemon; its
HTTP API must return that same value, and the histogram counts.  The scraped
text passes `promtool check metrics`.  Also: a client that sends half a
request and stalls does not slow the control socket; a non-loopback
--metrics-listen needs --metrics-allow-remote."""
import json
import os
import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import opslib


def metric_values(text, name):
    """{labels: value} of every sample of `name` in Prometheus text."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def body(run):
    sock = run.path("md.sock")
    conf = run.path("memdecayd.conf")
    with open(conf, "w") as f:
        f.write("daemon.heartbeat_timeout_ms = 600000\n")
    md = os.path.join(run.bin, "memdecayd")

    r = subprocess.run([md, "--socket", run.path("x.sock"), "--foreground",
                        "--metrics-listen", "0.0.0.0:0"], capture_output=True, text=True,
                       timeout=10)
    if r.returncode != 2 or "metrics-allow-remote" not in r.stderr:
        run.fail("non-loopback --metrics-listen without opt-in: rc=%d %s" % (r.returncode, r.stderr))

    d = run.spawn([md, "--socket", sock, "--foreground", "--config", conf,
                   "--metrics-listen", "127.0.0.1:0"], log="daemon.log")
    run.wait_ping(sock, d)
    port = None
    for _ in range(100):
        with open(run.path("daemon.log"), errors="replace") as f:
            m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", f.read())
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.05)
    if not port:
        run.fail("no 'metrics on http://...' line in the daemon log")
    murl = "http://127.0.0.1:%d/metrics" % port

    lg = run.spawn([os.path.join(run.bin, "memdecay-loadgen"), "--socket", sock,
                    "--engine-name", "promlg", "--seqs", "4", "--pages-per-seq", "32",
                    "--steps", "1500", "--budget-pages", "64", "--hold-ms", "120000"],
                   log="loadgen.log")

    # wait until the engine's eviction count is non-zero and still for 1 s
    last, still_since, ev = None, None, None
    t_end = time.monotonic() + 60
    while time.monotonic() < t_end:
        if lg.poll() is not None:
            run.fail("loadgen exited early (rc=%s)" % lg.returncode)
        vals = metric_values(run.ctl(sock, "metrics").stdout, "memdecay_evictions_total")
        v = list(vals.values())[0] if len(vals) == 1 else None
        if v and v == last:
            if time.monotonic() - still_since >= 1.0:
                ev = v
                break
        else:
            last, still_since = v, time.monotonic()
        time.sleep(0.2)
    if not ev:
        run.fail("memdecay_evictions_total never settled above 0 (last %r)" % last)

    # the endpoint serves the same figure as memdecayctl metrics
    status, text = http_get(murl)
    got = metric_values(text, "memdecay_evictions_total")
    if status != 200 or list(got.values()) != [ev]:
        run.fail("GET /metrics: status %d, memdecay_evictions_total %r, daemon says %g"
                 % (status, got, ev))
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)
    if lint.returncode != 0:
        run.fail("promtool check metrics: %s%s" % (lint.stdout, lint.stderr))
    for h in ("memdecay_decision_duration_seconds", "memdecay_command_latency_seconds"):
        if "# TYPE %s histogram" % h not in text or not metric_values(text, h + "_count"):
            run.fail("no %s histogram in /metrics" % h)
    cmd_count = list(metric_values(text, "memdecay_command_latency_seconds_count").values())[0]
    if cmd_count < 1:
        run.fail("memdecay_command_latency_seconds_count = 0 after %g evictions" % ev)

    # a half-sent request holds one HTTP connection, not the daemon
    stall = socket.create_connection(("127.0.0.1", port), timeout=5)
    stall.sendall(b"GET /metr")
    t0 = time.monotonic()
    run.ctl(sock, "ping")
    ping_ms = (time.monotonic() - t0) * 1e3
    status2, _ = http_get(murl)
    if status2 != 200:
        run.fail("GET /metrics with a stalled client open: %d" % status2)

    # Prometheus on loopback, scraping every second
    pport = opslib.free_port()
    pconf = run.path("prometheus.yml")
    with open(pconf, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                "scrape_configs:\n  - job_name: memdecay\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n" % port)
    prom = run.spawn(["prometheus", "--config.file=" + pconf,
                      "--storage.tsdb.path=" + run.path("tsdb"),
                      "--web.listen-address=127.0.0.1:%d" % pport,
                      "--log.level=warn"], log="prometheus.log")
    purl = "http://127.0.0.1:%d" % pport

    def query(q):
        status, txt = http_get(purl + "/api/v1/query?" + urllib.parse.urlencode({"query": q}))
        res = json.loads(txt)
        if res.get("status") != "success":
            run.fail("query %s: %s" % (q, txt[:300]))
        return res["data"]["result"]

    t0 = time.monotonic()
    seen = None
    while time.monotonic() < t0 + 60:
        if prom.poll() is not None:
            run.fail("prometheus exited (rc=%s)" % prom.returncode)
        try:
            res = query('memdecay_evictions_total{job="memdecay"}')
        except OSError:
            res = []
        if res:
            seen = res
            break
        time.sleep(0.5)
    if not seen:
        run.fail("Prometheus never returned memdecay_evictions_total")
    scrape_s = time.monotonic() - t0
    if len(seen) != 1 or float(seen[0]["value"][1]) != ev or seen[0]["metric"].get("name") != "promlg":
        run.fail("Prometheus: memdecay_evictions_total = %r, daemon says %g" % (seen, ev))
    up = query('up{job="memdecay"}')
    if not up or up[0]["value"][1] != "1":
        run.fail("Prometheus: up = %r" % up)
    hc = query("memdecay_command_latency_seconds_count")
    if not hc or float(hc[0]["value"][1]) != cmd_count:
        run.fail("Prometheus: command latency count %r, daemon %g" % (hc, cmd_count))
    print("prometheus: memdecay_evictions_total{name=\"promlg\"} = %g in Prometheus, %g from "
          "the daemon (found %.1f s after start); command latency count %g; promtool ok; "
          "ping with a stalled HTTP client %.1f ms" % (
              float(seen[0]["value"][1]), ev, scrape_s, cmd_count, ping_ms))
    stall.close()
    run.stop(prom)
    run.stop(lg)
    if run.stop(d) != 0:
        run.fail("memdecayd did not stop cleanly")


opslib.main("ops_prometheus", body)
