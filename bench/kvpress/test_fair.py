#!/usr/bin/env python3
"""test_fair.py — the harness gives kvpress's presses what the fair comparison promises
(fair.py, docs/kvpress.md "A fair fight"), checked on SmolLM2 with one generated trace:

  1. online StreamingLLM (DecodingPress, compression_interval=1) keeps exactly its 4 sinks plus
     the newest tokens, in every layer and head: read from the cache itself (layer 0's keys
     depend only on token and position, so they identify the positions kept), not from the
     harness's own bookkeeping, which must agree;
  2. kvpress's own compress (kept entries in top-k order) does not: the check above fails for
     it, so the check can fail;
  3. the pinned row keeps every system token and the newest pages in every head;
  4. the pinned, paged row keeps whole pages, the same set in every layer and head, the system
     message and the newest pages among them, and at most the budget;
  5. FreshRandomPress draws different scores per call, and the same run twice gives the same
     kept set.

Needs the kvpress venv (tests/transformers/run.sh) and MEMDECAY_HF_MODEL."""
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fair  # noqa: E402
import run as bench  # noqa: E402
from memdecay import Region  # noqa: E402
from memdecay_transformers import Feeder  # noqa: E402

FAILS = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what), flush=True)
    if not ok:
        FAILS.append(what)


def layer0_positions(m, f, full_keys):
    """The true position of each cache entry of layer 0, per KV head, found by matching its
    key against the full cache's layer-0 keys (-1 where none is within 1e-3 of the key's
    norm: chunked and whole forwards round differently)."""
    got = f.cache.layers[0].keys[0]                      # (KV, phys, d)
    out = []
    for h in range(got.shape[0]):
        d = torch.cdist(got[h].float(), full_keys[h].float())   # (phys, n)
        best = d.min(-1)
        tol = 1e-3 * got[h].float().norm(dim=-1)
        out.append([int(i) if float(v) < float(t) else -1
                    for v, i, t in zip(best.values, best.indices, tol)])
    return out


def main():
    model = os.environ.get("MEMDECAY_HF_MODEL")
    if not model:
        print("MEMDECAY_HF_MODEL unset", file=sys.stderr)
        return 2
    m = bench.Model(model)
    torch.set_num_threads(int(os.environ.get("MEMDECAY_TORCH_THREADS", "2")))
    with tempfile.TemporaryDirectory() as d:
        paths, _ = bench.make_traces(d, bench.TRACE_SEED, 1)
        tr = bench.Trace(m, paths[0])
    B = bench.budget_tokens(tr.n, 0.25)
    full = Feeder(m.model)
    full.forward(tr.ids)
    full_keys = full.cache.layers[0].keys[0]
    print("trace %s: %d tokens, %d messages, budget %d" % (tr.name, tr.n, len(tr.spans), B))

    want = list(range(4)) + list(range(tr.n - (B - 4), tr.n))
    f = Feeder(m.model)
    kept, _ = bench.feed_press(m, tr, f, "kv:streaming_llm", "online", B)
    seen = layer0_positions(m, f, full_keys)
    check(all(h == want for h in seen),
          "online StreamingLLM: layer 0's cache holds exactly sinks 0-3 and the newest %d "
          "tokens in every KV head (cache read back: %s)"
          % (B - 4, "as wanted" if all(h == want for h in seen) else seen[0][:12]))
    check(all(h == want for layer in kept for h in layer),
          "online StreamingLLM: the harness's kept map says the same for every layer and head")

    f = Feeder(m.model)
    bench.feed_press(m, tr, f, "kv:streaming_llm", "online", B, ordered=False)
    raw = layer0_positions(m, f, full_keys)
    lost = sorted(set(want) - set(raw[0]))
    check(lost != [],
          "kvpress's own compress (top-k order) loses part of that set online: %d of the %d "
          "positions missing in head 0 (the check above can fail)" % (len(lost), len(want)))

    system = [p for p, r in enumerate(tr.regions) if r == int(Region.SYSTEM)]
    last = (tr.n - 1) // fair.PAGE
    newest = [p for p in range(tr.n) if p // fair.PAGE >= last - (fair.RECENT_PAGES - 1)]
    for press in ("snapkv", "knorm"):
        f = Feeder(m.model)
        kept, _ = bench.feed_press(m, tr, f, "kv:%s+pin" % press, "online", B)
        ok = all(set(system + newest) <= set(h) and len(h) == B for layer in kept for h in layer)
        check(ok, "online %s+pin: every head keeps the %d system tokens and the newest %d, "
              "%d entries in all" % (press, len(system), len(newest), B))

    for press in ("streaming_llm", "snapkv"):
        f = Feeder(m.model)
        kept, _ = bench.feed_press(m, tr, f, "kv:%s+pin+page" % press, "online", B)
        k0 = kept[0][0]
        same = all(h == k0 for layer in kept for h in layer)
        pages = {}
        for p in k0:
            pages.setdefault(p // fair.PAGE, []).append(p)
        whole = all(len(v) == min(fair.PAGE, tr.n - pg * fair.PAGE) for pg, v in pages.items())
        check(same and whole and set(system + newest) <= set(k0) and len(k0) <= B
              and f.phys_len() == len(k0),
              "online %s+pin+page: one set in every layer and head, whole pages, system and "
              "newest pages kept, %d <= %d tokens, cache of that size" % (press, len(k0), B))
        if press == "streaming_llm":
            rest = sorted(set(pages) - {p // fair.PAGE for p in system + newest})
            check(rest == list(range(rest[0], rest[0] + len(rest))) if rest else True,
                  "online streaming_llm+pin+page: the unprotected pages kept are one newest run "
                  "(pages %s)" % rest)

    r = fair.FreshRandomPress(seed=0)
    keys = torch.zeros(1, 3, 50, 8)
    s1, s2 = r.score(None, None, keys, keys, None, {}), r.score(None, None, keys, keys, None, {})
    check(not torch.equal(s1, s2), "FreshRandomPress: two calls draw different scores")
    k1, _ = bench.feed_press(m, tr, Feeder(m.model), "kv:random", "online", B)
    k2, _ = bench.feed_press(m, tr, Feeder(m.model), "kv:random", "online", B)
    check(k1 == k2 and k1[0][0] != k1[1][0],
          "kv:random online: the same run twice keeps the same sets; layers keep different ones")

    print("%d failed" % len(FAILS) if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
