#!/usr/bin/env python3
"""bench_binding.py — what one step costs an engine through the Python binding.

Starts memdecayd on a Unix socket in a temporary directory, attaches one engine
with --pages live pages, and times, in one run and alternating block by block:
  batch     one Client.publish per step (a STEP and --pages ATTN_PAGE records,
            one C call: md_publish_batch); a doorbell only if the daemon slept
  batch_empty  the same step with no pages: the call and a STEP
  per_page  Client.seq_step + one Client.attn_page per page (a C call each)
Each step is timed alone and followed by --pause-ms, as behind a real engine:
the daemon drains the ring between steps and, within its daemon.nap_ms (50 ms
by default), naps instead of sleeping, so no doorbell is due.  Prints JSON:
per-step microseconds (median, p10, p90 over all steps) for each, their ratio
and the attention records dropped (0 unless the daemon fell behind).  Target:
batch <= 50 us per step at 1,000 pages; pages_add_us is batch - batch_empty,
what the page records themselves add.

  bench_binding.py [--pages N] [--steps N] [--blocks N] [--pause-ms MS] [--bin DIR]
                   [--library PATH] [--out FILE]
"""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "engine_adapters", "python"))
import memdecay  # noqa: E402


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=100, help="steps per block (default 100)")
    ap.add_argument("--blocks", type=int, default=10, help="blocks per variant (default 10)")
    ap.add_argument("--pause-ms", type=float, default=2.0,
                    help="pause after each step (default 2 ms)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--library", default=os.environ.get("MEMDECAY_LIBRARY") or
                    os.path.join(ROOT, "build", "lib", "libmemdecay.so"))
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="memdecay-bench-binding.")
    sock = os.path.join(d, "memdecayd.sock")
    daemon = subprocess.Popen([os.path.join(a.bin, "memdecayd"), "--socket", sock,
                               "--foreground", "--log-level", "warn"],
                              stderr=open(os.path.join(d, "daemon.log"), "wb"))
    try:
        t = time.monotonic() + 10
        while not os.path.exists(sock):
            if time.monotonic() > t or daemon.poll() is not None:
                sys.exit("bench_binding: memdecayd did not start (log in %s)" % d)
            time.sleep(0.02)
        c = memdecay.Client(socket_path=sock, engine_name="bench-binding", library=a.library,
                            page_capacity=a.pages, max_seqs=1, require_daemon=True,
                            budget_engine_pages=0)
        lab = memdecay.labels([memdecay.Region.USER] * 16)
        slots = [c.page_open(0, 16 * i, 16, lab)[0] for i in range(a.pages)]
        b = c.batch()
        for i, s in enumerate(slots):
            b.slots[i], b.mass[i], b.refresh[i] = s, 1.0 / a.pages, 1
        mass = 1.0 / a.pages

        # Each step is timed alone, with a pause after it (an engine's step
        # is milliseconds of compute) so that the daemon drains the ring as it
        # would between real steps (and naps or sleeps as it would then).
        def block(step):
            out = []
            for _ in range(a.steps):
                t0 = time.perf_counter_ns()
                step()
                out.append((time.perf_counter_ns() - t0) / 1e3)
                c.check()   # the step boundary: heartbeat and liveness
                time.sleep(a.pause_ms / 1e3)
            return out

        def per_page_step():
            c.seq_step(0, 1)
            for s in slots:
                c.attn_page(s, mass, 1)

        # batch_empty: the same step with no pages (the call and the STEP
        # record, and a doorbell if the daemon slept, without the page records)
        variants = [("batch", lambda: c.publish(b, a.pages, steps=[(0, 1)])),
                    ("batch_empty", lambda: c.publish(b, 0, steps=[(0, 1)])),
                    ("per_page", per_page_step)]

        runs = {name: [] for name, _ in variants}
        drops = {k: 0 for k in runs}
        print("bench_binding: %d pages, %d blocks of %d steps each way ..."
              % (a.pages, a.blocks, a.steps), file=sys.stderr)
        for k in range(a.blocks):
            for name, step in variants if k % 2 == 0 else variants[::-1]:
                d0 = c.counters()["attn_dropped"]
                runs[name].extend(block(step))
                drops[name] += c.counters()["attn_dropped"] - d0
        dropped = sum(drops.values())
        c.close()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(10)
    if dropped:
        print("bench_binding: attention records dropped (the daemon fell behind): %s"
              % drops, file=sys.stderr)
    res = {"bench": "python_binding", "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cpu": platform.processor() or platform.machine(),
                       "python": platform.python_version(), "loadavg": os.getloadavg()},
           "pages": a.pages, "steps_per_block": a.steps, "blocks": a.blocks,
           "attn_dropped": drops}
    for name, xs in runs.items():
        res[name + "_us_per_step"] = {"median": round(statistics.median(xs), 2),
                                      "p10": round(pct(xs, 0.1), 2), "p90": round(pct(xs, 0.9), 2)}
    res["pause_ms"] = a.pause_ms
    res["per_page_over_batch"] = round(statistics.median(runs["per_page"]) /
                                       statistics.median(runs["batch"]), 1)
    res["target_us_per_step"] = 50
    res["target_met"] = res["batch_us_per_step"]["median"] <= 50
    # what the page records add to a step, above its call and STEP
    res["pages_add_us"] = round(res["batch_us_per_step"]["median"] -
                                res["batch_empty_us_per_step"]["median"], 1)
    print(json.dumps(res, indent=2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
