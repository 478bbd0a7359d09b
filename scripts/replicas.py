#!/usr/bin/env python3
"""replicas.py — N `vllm serve` replicas with the MemDecay plugin, one memdecayd
each (as on separate nodes), behind vllm-router, all on this machine's loopback
(docs/deploy.md).  Prints the router's URL, each replica's URL and daemon
socket, and runs until Ctrl-C or SIGTERM, then stops everything.

  .deps/vllm/bin/python scripts/replicas.py [--replicas 2] [--policy consistent_hash]
      [--pool-blocks N] [--mode pool|sessions] [--work DIR]

Needs scripts/setup_vllm.sh and scripts/setup_router.sh.  Send each agent's
turns with an X-Session-ID header: under consistent_hash the router sends a
session to one replica, whose plugin keeps its KV cache between turns."""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "engine_adapters", "vllm", "tests"))
import fleet  # noqa: E402
import harness  # noqa: E402

MODES = {"pool": {"MEMDECAY_VLLM_POOL": "on", "MEMDECAY_VLLM_POLICY": "memdecay-turn"},
         "sessions": {"MEMDECAY_VLLM_BUDGET_TOKENS": "512",
                      "MEMDECAY_VLLM_POLICY": "memdecay-turn"}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--policy", default="consistent_hash", choices=fleet.POLICIES)
    ap.add_argument("--pool-blocks", type=int, default=None,
                    help="each replica's KV pool in 32-token blocks (default: vLLM's)")
    ap.add_argument("--mode", default="pool", choices=sorted(MODES),
                    help="pool: MemDecay's pool mode; sessions: a 512-token budget a request")
    ap.add_argument("--work", default=None, help="where logs, sockets and traces go")
    a = ap.parse_args()
    if a.replicas < 1:
        ap.error("--replicas must be at least 1")
    work = a.work or harness.tmpdir("md-replicas-")
    os.makedirs(work, exist_ok=True)
    f = fleet.Fleet(work, a.replicas, a.policy, MODES[a.mode], a.pool_blocks)
    print("replicas: starting %d replicas and vllm-router (%s) in %s" % (a.replicas, a.policy,
                                                                       work), flush=True)
    f.start()
    try:
        print("router   %s" % f.url)
        for r in f.replicas:
            print("replica %d %s  memdecayd %s  log %s" % (r.i, r.url, r.daemon.sock, r.log))
        print("replicas: up; Ctrl-C stops everything", flush=True)
        return f.wait()
    finally:
        f.stop()


if __name__ == "__main__":
    sys.exit(main())
