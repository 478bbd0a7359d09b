#!/usr/bin/env python3
"""test_core.py — the plugin's engine-core side on vLLM's real scheduler, block
by block (docs/vllm.md "Sessions", "Fail-open").

vLLM's own Scheduler, KVCacheManager and BlockPool run in this process with
the plugin's hooks installed (core_driver.py: no model, synthetic model
outputs; the worker's evicted-block pairs are put on the outputs by hand, as
the worker would).  At every step the block references are recounted
independently (core_driver.check_refcounts, with the blocks the session store
holds declared).

  accounting   agents of several turns (with and without session ids, under
               budgets) on a short pool, with evictions from running requests
               and from retained sessions, a late eviction after an adoption,
               an abort: after every session expires the pool's free blocks
               equal their count at start.  Then the same with a fault injected
               into each wrapper in turn (MEMDECAY_VLLM_TEST_FAULT);
  leak         the store raising after it took a finished request's blocks;
  late         a block evicted from a session after its adoption is freed from
               the adopter, which from then on caches nothing;
  stall        an adopter that cannot be allocated while its own session fills
               the pool gives the session back and is scheduled at once;
  unguarded    the store raising inside allocate_slots after vLLM allocated:
               nothing reaches vLLM's scheduler, no block is lost;
  replace      a request id retained twice frees the first session's blocks;
  hole first   a request whose block 0 was evicted is retained with the hole at
               index 0 and every block at its own index, and its next turn
               adopts exactly those blocks, position by position;
  limit        (vLLM 0.33) get_computed_blocks' max_cache_hit_length is passed
               on, and a session longer than it is not adopted;
  order        pool mode (docs/vllm.md "Pool mode"): two requests outgrow the
               pool; where the worker relays memdecayd's evictions of what is
               short, nothing is preempted; where it reports that memdecayd has
               nothing left, vLLM preempts at once (counted); where it is
               silent, a request waits at most MEMDECAY_VLLM_POOL_HOLD_STEPS.

  test_core.py [--quick]      (--quick: fewer turns; the same checks)"""
import os
import random
import sys

os.environ["MEMDECAY_VLLM"] = "1"
os.environ.setdefault("MEMDECAY_VLLM_SESSION_SHARE", "1.0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

check = harness.Checks()
BS = 32
BUDGET = {"memdecay_budget_tokens": 256}


def store_refs(d):
    st = getattr(d.kv, "_memdecay_store", None)     # sessions.store_of's
    return [b for x in (st.sessions.values() if st else ()) for g in x.blocks for b in g]


class Agents:
    """Conversations of `turns` turns: turn k+1's prompt is turn k's prompt, its
    output and 40 new tokens.  Half carry a session id."""

    def __init__(self, d, n, turns, rng):
        self.d, self.turns, self.rng = d, turns, rng
        self.convs = [{"sid": "s%d" % i if i % 2 == 0 else None, "tokens": None, "k": 0,
                       "rid": None, "prev": None, "base": 5000 + 1000 * i} for i in range(n)]

    def start_turns(self):
        """Adds the next turn of every conversation that has none running; returns
        the request ids of the turns before them (sessions the new turns adopt)."""
        prev = []
        for i, c in enumerate(self.convs):
            if c["k"] >= self.turns or c["rid"] is not None:
                continue
            new = [c["base"] + c["k"] * 50 + j for j in range(40)]
            prompt = (c["tokens"] or [c["base"] + 999] * 100) + new
            c["rid"] = "c%d-t%d" % (i, c["k"])
            self.d.add(c["rid"], prompt, 8, session_id=c["sid"], extra_args=BUDGET)
            if c["prev"]:
                prev.append(c["prev"])
        return prev

    def collect(self):
        for c in self.convs:
            r = self.d.requests.get(c["rid"]) if c["rid"] else None
            if r is not None and r.is_finished():
                c["tokens"] = list(r.all_token_ids)
                c["prev"] = c["rid"]
                c["rid"] = None
                c["k"] += 1

    def done(self):
        return all(c["k"] >= self.turns for c in self.convs)


def evictions(d, rng, keys):
    """Pairs the worker might send this step: a block of a running request with
    three or more, and now and then one of a retained session (by its key)."""
    pairs = []
    for req in list(d.scheduler.running):
        blocks = d.blocks_of(req.request_id)[0]
        live = [i for i, b in enumerate(blocks[:-1]) if not b.is_null]
        if len(blocks) >= 3 and live and rng.random() < 0.3:
            pairs.append((req.request_id, rng.choice(live)))
    from memdecay_vllm.sessions import store_of
    st = store_of(d.kv)
    for key, x in list(st.sessions.items()):
        live = [i for i, b in enumerate(x.blocks[0]) if not b.is_null]
        if live and rng.random() < 0.2:
            pairs.append((key, rng.choice(live)))
    pairs += keys
    return pairs


def accounting(fault, turns):
    from core_driver import Driver
    from memdecay_vllm import settings
    from memdecay_vllm.sessions import store_of
    s = settings.get()
    s.test_faults = {fault} if fault else set()
    s.session_ttl_s = 600.0
    rng = random.Random(7)
    d = Driver(num_blocks=48)
    start = d.free_blocks()
    ag = Agents(d, 5, turns, rng)
    problems, steps, aborted = [], 0, False
    late = []
    while not ag.done() and steps < 3000:
        adopted = ag.start_turns()
        _, _ = d.step(extra={"memdecay_evicted": evictions(d, rng, late)})
        steps += 1
        # a late pair: the session a turn just adopted is named by the next step's
        # evictions, as a worker that evicted it in the same step would
        late = [(key, 1) for key in adopted]
        if not aborted and steps == 40 and d.scheduler.running:
            d.abort([d.scheduler.running[0].request_id])
            aborted = True
        problems += ["step %d: %s" % (d.steps, p) for p in d.check_refcounts(store_refs(d))]
        ag.collect()
    st = store_of(d.kv)
    counters = dict(st.counters)
    s.test_faults = set()           # (a fault in expire kept them all so far)
    s.session_ttl_s = 1e-6          # every session expires at the next step
    d.step()
    d.step()
    s.session_ttl_s = 600.0
    problems += ["after expiry: %s" % p for p in d.check_refcounts(store_refs(d))]
    what = "fault in %s" % fault if fault else "no fault"
    check(ag.done(), "%s: %d conversations x %d turns finished in %d steps" % (
        what, len(ag.convs), turns, steps))
    check(not problems, "%s: every block's references recount right at every step %s"
          % (what, problems[:2]))
    check(d.free_blocks() == start and not st.sessions,
          "%s: after every session expires the pool's free blocks are back to %d (%d)"
          % (what, start, d.free_blocks()))
    return counters


def part_accounting(turns):
    print("accounting: block references at every step, then every session expired",
          flush=True)
    c = accounting(None, turns)
    check(c["retained"] > 0 and c["adopted"] > 0 and c.get("late_evictions", 0) > 0,
          "the run retained %d, adopted %d, freed %d late evictions from adopters, released %s"
          % (c["retained"], c["adopted"], c.get("late_evictions", 0),
             {k[9:]: v for k, v in c.items() if k.startswith("released_") and v}))
    for fault in ("scheduler", "cache", "retain", "match", "adopt", "expire"):
        accounting(fault, turns)


def part_leak():
    print("leak: the store raises after taking a finished request's blocks", flush=True)
    from core_driver import Driver
    from memdecay_vllm import sessions, settings
    settings.get().test_faults = set()
    d = Driver(num_blocks=32)
    start = d.free_blocks()
    real = sessions.Session

    def broken(*a, **kw):
        raise RuntimeError("injected: Session() fails")
    sessions.Session = broken
    try:
        d.add("l1", list(range(100, 300)), 8, extra_args=BUDGET)
        d.run_until_done()
    finally:
        sessions.Session = real
    check(d.free_blocks() == start and not d.check_refcounts(),
          "every block came back (free %d of %d)" % (d.free_blocks(), start))


def part_late():
    print("late: an eviction pair that arrives after the session's adoption", flush=True)
    from core_driver import Driver
    from memdecay_vllm import settings
    from memdecay_vllm.sessions import store_of
    settings.get().test_faults = set()
    d = Driver(num_blocks=64)
    p1 = list(range(100, 260))                     # 5 blocks
    d.add("a1", p1, 8, session_id="late", extra_args=BUDGET)
    d.run_until_done()
    st = store_of(d.kv)
    check("a1" in st.sessions and not any(b.is_null for b in st.sessions["a1"].blocks[0]),
          "turn 1 retained, no hole")
    p2 = list(d.requests["a1"].all_token_ids) + list(range(900, 940))
    d.add("a2", p2, 100, session_id="late", extra_args=BUDGET)
    d.step()                                       # a2 adopts a1 and prefills its suffix
    check("a1" not in st.sessions and d.requests["a2"].num_computed_tokens >= 160,
          "turn 2 adopted turn 1")
    first = d.requests["a2"].num_computed_tokens // BS     # blocks complete before the hole
    free0 = d.free_blocks()
    b = d.blocks_of("a2")[0][1]
    d.step(extra={"memdecay_evicted": [("a1", 1)]})
    blocks = d.blocks_of("a2")[0]
    check(blocks[1].is_null and d.free_blocks() >= free0 + 1 and b.ref_cnt == 0,
          "the pair for session a1's block 1 freed it from adopter a2 (free %d -> %d)"
          % (free0, d.free_blocks()))
    a2 = d.requests["a2"]
    while not a2.is_finished() and a2.num_computed_tokens < (first + 2) * BS + 8:
        d.step()
    blocks = d.blocks_of("a2")[0]
    after = [i for i, blk in enumerate(blocks) if i >= first and not blk.is_null]
    cached_after = [i for i in after if blocks[i].block_hash is not None]
    check(after and not cached_after, "none of the %d blocks a2 computed over the hole entered "
          "the prefix cache (hashed: %s)" % (len(after), cached_after))
    d.run_until_done()
    check(not d.check_refcounts(store_refs(d)), "references recount right")


def part_stall():
    print("stall: an adopter whose own session fills the pool", flush=True)
    from core_driver import Driver
    from memdecay_vllm import settings
    from memdecay_vllm.sessions import store_of
    settings.get().test_faults = set()
    d = Driver(num_blocks=24)                       # 23 usable
    d.add("s1", list(range(100, 100 + 22 * BS)), 8, session_id="u",
          extra_args={"memdecay_budget_tokens": 4096})
    d.run_until_done()
    st = store_of(d.kv)
    held = st.sessions["s1"].held if "s1" in st.sessions else 0
    check(held == 22, "a session of id u holds 22 of the 23 blocks")
    # the same id, a prompt sharing the first two blocks, then 10 blocks of its own:
    # adopting 2 blocks, its first chunk needs 2 more while the session's other 20
    # fill the pool
    p = list(range(100, 100 + 2 * BS)) + list(range(5000, 5000 + 10 * BS))
    d.add("s2", p, 8, session_id="u", extra_args={"memdecay_budget_tokens": 4096})
    waited = 0
    while d.requests["s2"].num_computed_tokens == 0 and waited < 50:
        d.step()
        waited += 1
    check(d.requests["s2"].num_computed_tokens > 0 and waited <= 3,
          "the adopter is scheduled after %d steps (its session given back: %d)"
          % (waited, st.counters.get("released_adopt_failed", 0)))
    d.run_until_done(max_steps=500)
    check(d.finish_status("s2") is not None, "and finishes")


def part_unguarded():
    """A fault inside the adoption's bookkeeping after vLLM allocated (the store's
    consume raising): the step goes on, both turns finish, no block is lost."""
    print("unguarded: the store raises inside allocate_slots", flush=True)
    from core_driver import Driver
    from memdecay_vllm import sessions, settings
    settings.get().test_faults = set()
    d = Driver(num_blocks=40)
    start = d.free_blocks()
    real = sessions.Store.consume

    def broken(self, *a, **kw):
        raise RuntimeError("injected: consume fails")
    d.add("g1", list(range(100, 260)), 8, session_id="g", extra_args=BUDGET)
    d.run_until_done()
    sessions.Store.consume = broken
    try:
        d.add("g2", list(d.requests["g1"].all_token_ids) + list(range(900, 940)), 8,
              session_id="g", extra_args=BUDGET)
        d.run_until_done(max_steps=200)
        ok = d.finish_status("g2") is not None
    except Exception as e:
        ok = False
        print("  raised into vLLM's scheduler: %s: %s" % (type(e).__name__, e))
    finally:
        sessions.Store.consume = real
    check(ok, "the adopter finished; nothing raised into vLLM's scheduler")
    st = sessions.store_of(d.kv)
    check(not d.check_refcounts(store_refs(d)), "references recount right")
    for key in list(st.sessions):
        st.release(key, "reset")
    check(d.free_blocks() == start, "the pool is whole once the sessions go (%d of %d)"
          % (d.free_blocks(), start))


def part_replace():
    print("replace: a request id retained twice", flush=True)
    from core_driver import Driver
    from memdecay_vllm import settings
    from memdecay_vllm.sessions import store_of
    settings.get().test_faults = set()
    d = Driver(num_blocks=40)
    start = d.free_blocks()
    for k in range(2):
        d.add("same", [7000 + 100 * k + j for j in range(130)], 8, extra_args=BUDGET)
        d.run_until_done()
    st = store_of(d.kv)
    check(len(st.sessions) == 1 and not d.check_refcounts(store_refs(d)),
          "one session left, every block accounted for (%d sessions)" % len(st.sessions))
    st.release("same", "reset")
    check(d.free_blocks() == start, "releasing it gives the pool back (%d of %d)"
          % (d.free_blocks(), start))


def part_hole_first():
    """A request whose first block was evicted: its session keeps the hole at
    index 0 and every kept block at its own index (vLLM 0.33's
    pop_blocks_for_free drops leading null blocks; the store must not read
    the request's blocks from it), and the next turn adopts exactly those."""
    print("hole first: a request whose block 0 was evicted, retained and adopted", flush=True)
    from core_driver import Driver
    from memdecay_vllm import settings
    from memdecay_vllm.sessions import EVICTED_FLAG, store_of
    settings.get().test_faults = set()
    d = Driver(num_blocks=64)
    start = d.free_blocks()
    d.add("h1", list(range(100, 260)), 8, session_id="hole", extra_args=BUDGET)  # 5 blocks
    while d.requests["h1"].num_computed_tokens < 160:
        d.step()
    d.step(extra={"memdecay_evicted": [("h1", 0)]})
    table = d.blocks_of("h1")[0]                   # the request's blocks, hole in place
    check(table[0].is_null and len(table) == 6, "block 0 of h1 evicted: its table %s"
          % _ids(table))
    problems = run_checked(d)
    st = store_of(d.kv)
    x = st.sessions.get("h1")
    kept = x.blocks[0] if x is not None else []
    check(x is not None and _ids(kept) == _ids(table[:5]),
          "retained with the hole first, each block at its own index: %s (the request's "
          "table: %s)" % (_ids(kept), _ids(table[:5])))
    p2 = list(d.requests["h1"].all_token_ids) + list(range(900, 940))
    d.add("h2", p2, 8, session_id="hole", extra_args=BUDGET)
    d.step()
    got = d.blocks_of("h2")[0]
    check("h1" not in st.sessions and st.counters["adopted"] == 1
          and len(got) > len(kept) and all(a is b for a, b in zip(got, kept))
          and _ids(got[:5]) == _ids(table[:5]),
          "turn 2 adopted it: its first %d blocks are the retained ones, position by position, "
          "as h1 held them (%s)" % (len(kept), _ids(got[:len(kept)])))
    check(getattr(d.requests["h2"], EVICTED_FLAG, False),
          "the adopter is flagged: nothing it computes over the hole is cached")
    problems += run_checked(d)
    for key in list(st.sessions):
        st.release(key, "reset")
    check(not problems and d.free_blocks() == start,
          "references recount right; the pool is whole once the sessions go (%d of %d) %s"
          % (d.free_blocks(), start, problems[:2]))


def run_checked(d, max_steps=1000):
    """Steps until the scheduler is idle; every block's references recounted at each
    step, the session store's declared.  Returns the problems, step by step."""
    problems = []
    while d.scheduler.has_requests() and max_steps > 0:
        d.step()
        max_steps -= 1
        problems += ["step %d: %s" % (d.steps, p) for p in d.check_refcounts(store_refs(d))]
    return problems


def _ids(blocks):
    return [None if b.is_null else b.block_id for b in blocks]


def part_hit_limit():
    """vLLM 0.33's max_cache_hit_length (its scheduler passes it positionally):
    passed on to vLLM, and a session longer than it is not adopted."""
    print("limit: get_computed_blocks' max_cache_hit_length", flush=True)
    import inspect
    from core_driver import Driver
    from memdecay_vllm import settings
    from memdecay_vllm.sessions import HIT_ATTR, store_of
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    orig = getattr(KVCacheManager.get_computed_blocks, "__wrapped__", None)
    if orig is None or "max_cache_hit_length" not in inspect.signature(orig).parameters:
        print("  (this vLLM's get_computed_blocks has no max_cache_hit_length: nothing to "
              "check)")
        return
    settings.get().test_faults = set()
    d = Driver(num_blocks=64)
    d.add("m1", list(range(100, 260)), 8, session_id="lim", extra_args=BUDGET)
    problems = run_checked(d)
    st = store_of(d.kv)
    check("m1" in st.sessions, "turn 1 retained")
    p2 = list(d.requests["m1"].all_token_ids) + list(range(900, 940))
    d.add("m2", p2, 8, session_id="lim", extra_args=BUDGET)
    req = d.scheduler.requests["m2"]
    blocks, n, _ = d.kv.get_computed_blocks(req, 64)
    check(getattr(blocks, HIT_ATTR, None) is None and n <= 64,
          "max_cache_hit_length=64 (positional): no adoption of the 160-token session, vLLM's "
          "own hit of %d tokens" % n)
    blocks, n, _ = d.kv.get_computed_blocks(req, max_cache_hit_length=160)
    hit = getattr(blocks, HIT_ATTR, None)
    check(hit is not None and n == 160, "max_cache_hit_length=160: the session is the hit "
          "(%d tokens)" % n)
    blocks, n, _ = d.kv.get_computed_blocks(req, None)
    check(getattr(blocks, HIT_ATTR, None) is not None and n == 160,
          "max_cache_hit_length=None: the session is the hit (%d tokens)" % n)
    problems += run_checked(d)
    check(st.counters["adopted"] == 1 and d.num_cached_tokens("m2") == 160 and not problems,
          "scheduled by vLLM's own scheduler, turn 2 adopts 160 tokens (%s); references "
          "recount right %s" % (d.num_cached_tokens("m2"), problems[:2]))


def pool_run(daemon):
    """Pool mode on a 24-block pool: two requests of 10 blocks that each decode 300
    tokens (10 more blocks) outgrow it.  daemon: "frees" (the blocks each step's
    failed allocations needed are evicted from the requests' oldest blocks on the next output, as the worker
    relays memdecayd's commands), "spent" (the worker reports that memdecayd has
    nothing left to evict) or "silent" (no report, no eviction).  Returns (the
    pool's counters, preemptions seen on the SchedulerOutputs, whether both
    finished, reference problems)."""
    from core_driver import Driver
    from memdecay_vllm import settings
    from memdecay_vllm.pool import SHORT_ATTR, STATE_ATTR
    from memdecay_vllm.scheduler import EVICTED_ATTR
    s = settings.get()
    s.test_faults = set()
    s.pool, s.pool_hold_steps = True, 8
    try:
        d = Driver(num_blocks=24)
        for i, rid in enumerate(("p1", "p2")):
            d.add(rid, list(range(100 + 1000 * i, 100 + 1000 * i + 10 * BS)), 300)
        preempted, extra, short = 0, None, 0
        for _ in range(2000):
            if not d.scheduler.has_requests():
                break
            so, _ = d.step(extra=extra)
            preempted += len(so.preempted_req_ids or ())
            short = (getattr(so, SHORT_ATTR, None) or {}).get("need", 0)
            extra = None
            if daemon == "spent":
                extra = {STATE_ATTR: {"outcome": "UNREACHABLE"}}
            elif daemon == "frees" and short:
                pairs = []
                for rid in ("p1", "p2"):
                    blocks = d.blocks_of(rid)[0]
                    pairs += [(rid, j) for j, b in enumerate(blocks[:-2]) if not b.is_null]
                pairs.sort(key=lambda p: p[1])
                extra = {EVICTED_ATTR: pairs[:short], STATE_ATTR: {"outcome": "OK"}}
        done = all(d.finish_status(r) is not None for r in ("p1", "p2"))
        return (dict(d.kv._memdecay_pool.counters), preempted, done,
                d.check_refcounts(store_refs(d)))
    finally:
        s.pool = False


def part_order():
    print("order: pool mode's order before preemption", flush=True)
    c, pre, done, probs = pool_run("frees")
    check(done and pre == 0 and c["held"] > 0 and c["needed_blocks"] > 0 and not probs,
          "memdecayd frees what is short: both requests finish, %d preemptions, held %d "
          "request-steps, %d blocks needed (%s)" % (pre, c["held"], c["needed_blocks"],
                                                   probs[:2] or "references right"))
    c, pre, done, probs = pool_run("spent")
    check(done and pre > 0 and c["held"] == 0 and c["held_out"] > 0 and c["preempted"] == pre,
          "memdecayd has nothing to evict: no wait, vLLM preempts (%d, counted %d, held_out %d)"
          % (pre, c["preempted"], c["held_out"]))
    c, pre, done, probs = pool_run("silent")
    check(done and pre > 0 and c["held"] >= 8 and c["held_out"] > 0 and not probs,
          "memdecayd silent: a request waits at most 8 steps, then vLLM preempts (held %d, "
          "held_out %d, preempted %d)" % (c["held"], c["held_out"], pre))


def main():
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        return 0
    turns = 3 if "--quick" in sys.argv[1:] else 6
    import vllm
    print("vLLM %s (%s)" % (vllm.__version__, os.path.dirname(vllm.__file__)), flush=True)
    for part in (lambda: part_accounting(turns), part_leak, part_late, part_stall,
                 part_unguarded, part_replace, part_hole_first, part_hit_limit, part_order):
        try:
            part()
        except Exception as e:
            import traceback
            traceback.print_exc()
            check(False, "%s: %s" % (type(e).__name__, e))
    return check.verdict("test_core")


if __name__ == "__main__":
    sys.exit(main())
