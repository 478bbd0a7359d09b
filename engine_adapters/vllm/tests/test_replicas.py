#!/usr/bin/env python3
"""test_replicas.py — sessions across replicas behind vllm-router (docs/deploy.md).

scripts/replicas.py brings up 2 `vllm serve` replicas in pool mode, each with a
memdecayd of its own, behind vllm-router with consistent_hash.  Three agents
send their turns through the router with the openai client and an
X-Session-ID header.  Checks: every turn answered; every later turn adopted
its session (the client's cached_tokens, and the adoption in the plugin's
trace) on the replica that served the session's first turn; each session is
retained (memdecayctl sessions, by its id's first bytes) on that replica's
daemon and on no other; scripts/fleetctl.sh sets a key on both daemons at
once; the script stops every process at SIGTERM.

test_replicas.py [--quick] [--keep DIR]"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents  # noqa: E402
import harness  # noqa: E402
from test_sessions import adoption, ask  # noqa: E402

check = harness.Checks()
SCRIPT = str(harness.ROOT / "scripts" / "replicas.py")


def start(work):
    """scripts/replicas.py; returns (process, router url, [(replica url, daemon socket)])."""
    log = os.path.join(work, "replicas.out")
    p = subprocess.Popen([sys.executable, SCRIPT, "--replicas", "2", "--policy",
                          "consistent_hash", "--pool-blocks", "120", "--work", work],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT,
                         preexec_fn=harness.die_with_parent)

    def up():
        if p.poll() is not None:
            raise RuntimeError("replicas.py exited %d:\n%s" % (p.returncode,
                                                              open(log).read()[-3000:]))
        return "replicas: up" in open(log).read()
    harness.wait_until(up, 900, "scripts/replicas.py to bring the fleet up")
    router, reps = None, []
    for line in open(log):
        f = line.split()
        if f and f[0] == "router":
            router = f[1]
        elif f and f[0] == "replica":
            reps.append((f[2], f[4]))
    return p, router, reps


def answers(url):
    """Whether anything still accepts connections at url's port."""
    import socket
    import urllib.parse
    u = urllib.parse.urlparse(url)
    try:
        socket.create_connection((u.hostname, u.port), timeout=2).close()
        return True
    except OSError:
        return False


def sessions_on(sock):
    r = subprocess.run([str(harness.BIN / "memdecayctl"), "--socket", sock, "--json",
                        "sessions"], capture_output=True, text=True, timeout=20)
    rows = json.loads(r.stdout)["sessions"] if r.returncode == 0 else []
    return {row.get("session") for row in rows if row.get("state") == "retained"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keep", default=None)
    a = ap.parse_args()
    turns = 3 if a.quick else 5
    work = a.keep or harness.tmpdir("md-vllm-replicas-")
    os.makedirs(work, exist_ok=True)
    harness.exit_on_sigterm()
    import openai
    p, router, reps = None, None, []
    try:
        p, router, reps = start(work)
        check(router and len(reps) == 2, "the script started a router and 2 replicas: %s, %s"
              % (router, [u for u, _ in reps]))
        client = openai.OpenAI(base_url=router + "/v1", api_key="none", timeout=600,
                               max_retries=0)
        sids = ["agent-%d" % i for i in range(3)]
        got = {}
        for sid in sids:
            sess = agents.Session(sum(map(ord, sid)), turns)
            msgs = agents.start_messages()
            got[sid] = []
            for k in range(turns):
                msgs += sess.turn(k)
                r = ask(client, msgs, header=sid, plain=True)
                got[sid].append(r)
                msgs.append({"role": "assistant", "content": r["text"]})
        check(all(r["text"] for v in got.values() for r in v),
              "every turn of 3 sessions x %d turns answered through the router" % turns)
        traces = [os.path.join(work, "replica-%d" % i, "trace.jsonl") for i in range(2)]
        where = {}
        for sid, rs in got.items():
            homes = []
            for r in rs:
                seen = [i for i, t in enumerate(traces) if r["id"] in open(t).read()]
                homes.append(seen[0] if len(seen) == 1 else None)
            ad = [adoption(traces[homes[0]], r["id"]) if homes[0] is not None else None
                  for r in rs[1:]]
            cached = [r["cached"] for r in rs[1:]]
            ok = (len(set(homes)) == 1 and homes[0] is not None and all(ad)
                  and all(c >= x for c, x in zip(cached, ad)))
            check(ok, "%s: every turn on replica %s, later turns adopted %s tokens (cached_tokens "
                  "%s)" % (sid, homes, ad, cached))
            where[sid] = homes[0]
        tags = [sessions_on(sock) for _, sock in reps]
        for sid, home in where.items():
            on = [i for i, t in enumerate(tags) if sid[:8] in t]
            check(on == [home], "%s retained on replica %s's daemon only (memdecayctl sessions: "
                  "replicas %s)" % (sid, home, on))
        fleet_file = os.path.join(work, "fleet")
        with open(fleet_file, "w") as f:
            f.write("# the test's two nodes\n")
            f.writelines("replica-%d %s\n" % (i, sock) for i, (_, sock) in enumerate(reps))
        env = dict(os.environ, MEMDECAYCTL=str(harness.BIN / "memdecayctl"))
        key = "memdecay.region.tool_out.lambda"
        rc = subprocess.run(["bash", str(harness.ROOT / "scripts" / "fleetctl.sh"), fleet_file,
                             "set", key + "=0.031"], env=env, capture_output=True,
                            text=True).returncode
        vals = [subprocess.run([str(harness.BIN / "memdecayctl"), "--socket", sock, "get", key],
                               capture_output=True, text=True).stdout.strip() for _, sock in reps]
        check(rc == 0 and vals == ["0.031", "0.031"],
              "fleetctl.sh set %s on both daemons at once: exit %d, now %s" % (key, rc, vals))
        # the ring hashes the replicas' URLs, whose ports are free ones: where a session
        # goes is the router's choice, shown, not checked
        print("  note: sessions by replica: %s" % where, flush=True)
    except Exception as e:
        check(False, "%s: %s" % (type(e).__name__, e))
    finally:
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        time.sleep(1)
    if p is not None:
        # the daemons' command lines name their sockets in work; vLLM and the
        # router are checked by their ports
        left = subprocess.run(["pgrep", "-f", "memdecayd --socket " + work],
                              capture_output=True, text=True).stdout.split()
        answering = [u for u in [router] + [u for u, _ in reps] if u and answers(u)]
        check(not left and not answering, "SIGTERM to the script stopped every process of "
              "the fleet (%d daemons left, %s still answering)" % (len(left), answering))
        for pid in left:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    return check.verdict("test_replicas", work, ("replicas.out", "router.log",
                                                 "replica-0/vllm.log", "replica-1/vllm.log"))


if __name__ == "__main__":
    sys.exit(main())
