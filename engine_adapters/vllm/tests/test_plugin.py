#!/usr/bin/env python3
"""test_plugin.py — the plugin's switch, its version check and its regions, without an engine.

  - vLLM finds the entry point (vllm.general_plugins: memdecay);
  - with MEMDECAY_VLLM unset, register() installs nothing;
  - with MEMDECAY_VLLM=1 on a vLLM version it was not checked against, or with
    a wrapped method missing or of another signature, register() raises (vLLM
    does not start) naming the version or the method, and installs nothing;
  - on the checked version it installs every hook of hooks.HOOKS, once;
  - regions: roles, tool calls and explicit labels through the model's own chat
    template; the run-length form round-trips and refuses what is out of range;
  - the session store's rules (sessions.Store on stand-ins for vLLM's block
    pool): what is retained, who may adopt what, the share cap, the TTL;
  - the request fields' checks (fields.check, docs/vllm.md "Bad requests"):
    every malformed budget, policy and region list is refused naming its
    field, the pinned-token cap and MEMDECAY_VLLM_CLIENT_REGIONS=deny hold,
    and good fields pass.
Each case runs in a fresh interpreter, since a plugin installs once per process."""
import os
import subprocess
import sys

HOOKS = """
from vllm.v1.worker.gpu_model_runner import GPUModelRunner as R
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl as I, CPUAttentionMetadataBuilder as B
from vllm.v1.core.sched.scheduler import Scheduler as S
from vllm.v1.core.single_type_kv_cache_manager import SingleTypeKVCacheManager as M
from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat as C
from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion as O
from vllm.v1.engine.input_processor import InputProcessor as P
from vllm.v1.core.kv_cache_manager import KVCacheManager as K
fs = [R._update_states, R.sample_tokens, I.forward, B.build, S.update_from_output, M.cache_blocks,
      C.render_chat_request, O.render_completion_request, P.process_inputs, S._free_blocks,
      S.schedule, K.get_computed_blocks, K.allocate_slots, K.reset_prefix_cache,
      S._request_blocks_can_be_freed, R.execute_model, S.__init__]
print("HOOKED", sum("memdecay_vllm" in f.__code__.co_filename for f in fs), "OF", len(fs))
"""


def run(code, env_extra):
    env = dict(os.environ)
    env.pop("MEMDECAY_VLLM", None)
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    return r.returncode, r.stdout + r.stderr


def main():
    if len(sys.argv) > 1:
        print(__doc__)
        return 0 if sys.argv[1] in ("-h", "--help") else 2
    fails = []
    from memdecay_vllm import hooks
    N = len(hooks.HOOKS)    # the table's rows: every one is installed, or none

    def check(ok, what):
        print("  %-4s %s" % ("ok" if ok else "FAIL", what), flush=True)
        if not ok:
            fails.append(what)

    from importlib.metadata import entry_points
    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "memdecay"]
    check(len(eps) == 1 and eps[0].value == "memdecay_vllm:register",
          "entry point vllm.general_plugins: memdecay = memdecay_vllm:register")

    rc, out = run("import memdecay_vllm; memdecay_vllm.register()" + HOOKS, {})
    check(rc == 0 and "HOOKED 0 OF %d" % N in out, "switched off: no hook installed")

    refuse = ("import memdecay_vllm\ntry:\n    memdecay_vllm.register()\n"
              "except RuntimeError as e:\n    print('REFUSED', e)\n")
    rc, out = run("import vllm; vllm.__version__ = '0.31.9'\n" + refuse + HOOKS,
                  {"MEMDECAY_VLLM": "1"})
    line = next((x for x in out.splitlines() if x.startswith("REFUSED")), "")
    check(rc == 0 and "HOOKED 0 OF %d" % N in out and "0.31.9" in line and "0.32.0" in line,
          "unknown vLLM version: refused, naming it (%r), and no hook" % line[:120])
    rc, out = run("from vllm.v1.core.kv_cache_manager import KVCacheManager as K\n"
                  "def allocate_slots(self, request, num_new_tokens): pass\n"
                  "K.allocate_slots = allocate_slots\n" + refuse + HOOKS, {"MEMDECAY_VLLM": "1"})
    line = next((x for x in out.splitlines() if x.startswith("REFUSED")), "")
    check(rc == 0 and "KVCacheManager.allocate_slots" in line and "HOOKED 0 OF %d" % N in out,
          "a wrapped method of another signature: refused, naming it (%r), no hook"
          % line[:140])
    rc, out = run("from vllm.v1.core.sched.scheduler import Scheduler as S\n"
                  "del S._free_blocks\n" + refuse, {"MEMDECAY_VLLM": "1"})
    line = next((x for x in out.splitlines() if x.startswith("REFUSED")), "")
    check(rc == 0 and "Scheduler._free_blocks" in line,
          "a wrapped method missing: refused, naming it (%r)" % line[:120])
    rc, out = run("import memdecay_vllm; memdecay_vllm.register()",
                  {"MEMDECAY_VLLM": "1", "MEMDECAY_VLLM_TRACE": "/nonexistent-dir/trace.jsonl"})
    check(rc != 0 and "MEMDECAY_VLLM_TRACE" in out and "/nonexistent-dir" in out,
          "an unwritable MEMDECAY_VLLM_TRACE: refused at start-up, naming it")

    check_serve_refuses(check)

    rc, out = run("import memdecay_vllm; memdecay_vllm.register(); memdecay_vllm.register()" + HOOKS,
                  {"MEMDECAY_VLLM": "1"})
    check(rc == 0 and "HOOKED %d OF %d" % (N, N) in out,
          "switched on: all %d hooks installed, once" % N)

    from transformers import AutoTokenizer
    from memdecay import Region
    from memdecay_vllm import regions
    tok = AutoTokenizer.from_pretrained(os.environ.get("MEMDECAY_VLLM_MODEL") or
                                        os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                     ".deps", "models", "smollm2-hf"))
    msgs = [{"role": "system", "content": "You plan trips."},
            {"role": "user", "content": "Book Lisbon."},
            {"role": "assistant", "content": "search(LIS)", "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "content": "TP1357 at 10:40", "tool_call_id": "1"},
            {"role": "assistant", "content": "Step 1: book TP1357.", "region": "plan"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                  return_dict=False)
    reg = regions.prompt_regions(tok, msgs, ids)
    seq = [r for k, r in enumerate(reg) if k == 0 or reg[k - 1] != r]
    want = [Region.SYSTEM, Region.USER, Region.TOOL_IN, Region.TOOL_OUT, Region.PLAN,
            Region.ASSISTANT]
    check(reg is not None and len(reg) == len(ids) and seq == [int(x) for x in want],
          "regions in prompt order: %s" % [Region(x).name.lower() for x in seq])
    text = tok.decode([i for i, r in zip(ids, reg) if r == Region.TOOL_OUT])
    check("TP1357" in text and "tool" in text, "the tool answer's tokens, header included: %r"
          % text)
    check(regions.unrle(regions.rle(reg), len(reg)) == reg, "run-length form round-trips")
    for bad in ([16, 3], [0, 5000], [1]):
        try:
            regions.unrle(bad, 100)
            check(False, "unrle refuses %r" % bad)
        except ValueError:
            check(True, "unrle refuses %r" % bad)
    check_fields(check, tok, msgs)
    check_store(check)
    check_idle_rule(check)
    print("test_plugin:", "PASS" if not fails else "FAIL (%d)" % len(fails))
    return 1 if fails else 0


class _View:
    """The daemon's answers, as fields.DaemonView gives them."""

    def __init__(self, policies, pinned):
        self.p, self.pinned = policies, pinned

    def snapshot(self):
        return self.p, frozenset(self.pinned)


def check_serve_refuses(check):
    """`vllm serve` itself, with the plugin on and vLLM's version other than the
    supported one (set by a sitecustomize before vLLM's command line runs):
    it exits before loading the model, and its output names the version."""
    import tempfile
    import time
    d = tempfile.mkdtemp(prefix="md-vllm-version-")
    with open(os.path.join(d, "sitecustomize.py"), "w") as f:
        f.write("import vllm\nvllm.__version__ = '0.99.0'\n")
    env = dict(os.environ, MEMDECAY_VLLM="1", PYTHONPATH=d)
    vllm_bin = os.path.join(os.path.dirname(sys.executable), "vllm")
    model = os.environ.get("MEMDECAY_VLLM_MODEL") or "unused"
    t0 = time.monotonic()
    r = subprocess.run([vllm_bin, "serve", model, "--port", "1"], env=env, capture_output=True,
                       text=True, timeout=300)
    out = r.stdout + r.stderr
    check(r.returncode != 0 and "0.99.0" in out and "MEMDECAY_VLLM" in out,
          "vllm serve on an unsupported vLLM (0.99.0) with the plugin on: exits %d in %.0f s, "
          "naming the version" % (r.returncode, time.monotonic() - t0))


def check_fields(check, tok, msgs):
    from memdecay import checks
    from memdecay_vllm import fields, offline, regions, settings
    view = _View(("memdecay", "recency", "memdecay-turn"), {0})
    s = settings.Settings()
    B, P, R = regions.BUDGET_KEY, regions.POLICY_KEY, regions.REGIONS_KEY
    refused = [
        ({B: "abc"}, B), ({B: -5}, B), ({B: 0}, B), ({B: True}, B), ({B: 1.5}, B),
        ({B: float("nan")}, B), ({B: 1 << 40}, B), ({B: [64]}, B),
        ({P: ["memdecay"]}, P), ({P: "nosuch"}, P), ({P: ""}, P), ({P: "x" * 5000}, P),
        ({P: 3}, P),
        ({B: 64, R: [99, 5]}, R), ({R: ["x", "y"]}, R), ({R: [1]}, R), ({R: [1, 100000]}, R),
        ({R: [1, 5]}, R), ({R: [2, 0, 2, 10]}, R), ({R: [2, -3, 2, 13]}, R), ({R: "2,10"}, R),
        ({R: [2, 10.0]}, R), ({R: [[2, 10]]}, R), ({R: []}, R), ({R: [2, 1] * 11}, R),
        ({"memdecay_budget": 64}, "memdecay_budget"),
        # the pinned cap: every token system under a budget of 8 (share 1.0 of it)
        ({B: 8, R: [0, 10]}, R),
    ]
    for args, field in refused:
        try:
            fields.check(args, 10, view=view, s=s)
            check(False, "refused: %s" % checks.show(args))
        except fields.FieldError as e:
            check(e.field == field and field in str(e),
                  "refused, naming %s: %s -> %s" % (field, checks.show(args, 40), e))
    for args in ({}, {B: 64}, {P: "recency"}, {B: 8, R: [0, 8, 2, 2]}, {R: [0, 10]},
                 {"other_key": [1, 2]}):
        try:
            fields.check(args, 10, view=view, s=s)
            check(True, "accepted: %s" % checks.show(args))
        except fields.FieldError as e:
            check(False, "accepted: %s (%s)" % (checks.show(args), e))
    err = ""
    try:
        fields.check({P: "nosuch"}, 10, view=view, s=s)
    except fields.FieldError as e:
        err = str(e)
    check("memdecay-turn" in err and "nosuch" in err, "a refused policy lists the daemon's names")
    try:
        fields.check({B: 64, R: [2, 10]}, 10, view=_View(None, {0}), s=s)
        check(True, "no daemon yet: a well-formed request passes")
    except fields.FieldError as e:
        check(False, "no daemon yet: a well-formed request passes (%s)" % e)
    os.environ["MEMDECAY_VLLM_MAX_PINNED_TOKENS"] = "4"
    os.environ["MEMDECAY_VLLM_CLIENT_REGIONS"] = "deny"
    try:
        s2 = settings.Settings()
    finally:
        del os.environ["MEMDECAY_VLLM_MAX_PINNED_TOKENS"], os.environ["MEMDECAY_VLLM_CLIENT_REGIONS"]
    for args, labelled, ok, what in (
            ({R: [2, 10]}, False, False, "deny: a client's own region list is refused"),
            ({R: [2, 10]}, True, True, "deny: the server's own labels pass"),
            ({R: [0, 5, 2, 5], fields.LABEL_KEY: fields.NONCE}, False, False,
             "absolute cap of 4 pinned tokens, no budget: 5 system tokens refused"),
            ({R: [0, 4, 2, 6], fields.LABEL_KEY: fields.NONCE}, False, True,
             "absolute cap of 4 pinned tokens: 4 system tokens pass"),
            ({R: [0, 4, 2, 6], fields.LABEL_KEY: "guess"}, False, False,
             "deny: a guessed nonce does not pass")):
        try:
            fields.check(args, 10, labelled_here=labelled, view=view, s=s2)
            check(ok, what)
        except fields.FieldError as e:
            check(not ok and e.field == R, "%s (%s)" % (what, e))
    # the offline helper refuses as the server does, before anything runs
    from vllm import SamplingParams
    for kw, field in (({"budget_tokens": "abc"}, B), ({"policy": ["memdecay"]}, P)):
        try:
            offline.prepare(tok, msgs, SamplingParams(max_tokens=4), **kw)
            check(False, "offline.prepare refuses %s" % kw)
        except fields.FieldError as e:
            check(e.field == field, "offline.prepare refuses %s: %s" % (kw, e))
    allsys = [dict(m, region="system") for m in msgs]
    try:
        offline.prepare(tok, allsys, SamplingParams(max_tokens=4), budget_tokens=32)
        check(False, "offline.prepare refuses every message labelled system under budget 32")
    except fields.FieldError as e:
        check(e.field == "messages" and "pins" in str(e), "offline.prepare refuses every message labelled "
              "system under budget 32: %s" % e)


class _Block:
    def __init__(self, i):
        self.block_id, self.is_null, self.ref_cnt = i, i == 0, 1


class _Pool:
    def __init__(self, n):
        self.num_gpu_blocks = n
        self.null_block = _Block(0)
        self.freed = []

    def free_blocks(self, blocks):
        for b in blocks:
            if not b.is_null:
                b.ref_cnt -= 1
                self.freed.append(b.block_id)


class _Mgr:
    def __init__(self):
        self.req_to_blocks, self.num_cached_block = {}, {}

    def pop_blocks_for_free(self, rid):
        self.num_cached_block.pop(rid, None)
        return self.req_to_blocks.pop(rid, [])


class _Status:
    def __init__(self, name):
        self.name = name


class _Params:
    def __init__(self, budget):
        self.extra_args = {"memdecay_budget_tokens": budget} if budget else {}


class _Request:
    def __init__(self, rid, tokens, budget=64, session_id=None, salt=None, computed=None,
                 status="FINISHED_STOPPED", prompt=None, lora=None):
        self.request_id, self.all_token_ids = rid, list(tokens)
        self.num_tokens = len(tokens)
        self.num_prompt_tokens = len(tokens) - 4 if prompt is None else prompt
        self.num_computed_tokens = len(tokens) - 1 if computed is None else computed
        self.sampling_params = _Params(budget)
        self.session_id, self.cache_salt, self.lora_request = session_id, salt, lora
        self.status = _Status(status)
        self.skip_reading_prefix_cache, self.mm_features, self.prompt_embeds = False, [], None


def check_store(check):
    """The session store's rules on stand-ins for vLLM's block pool, managers and
    requests (test_core.py runs them on vLLM's real scheduler, test_sessions.py
    through `vllm serve`)."""
    from memdecay_vllm import sessions, settings
    bs = 4

    def store(**env):
        saved = dict(os.environ)
        os.environ.update({k: str(v) for k, v in env.items()})
        try:
            st = sessions.Store(None, settings.Settings())
        finally:
            os.environ.clear()
            os.environ.update(saved)
        pool = _Pool(41)
        st.manager = type("M", (), {"block_pool": pool})()
        return st, pool

    def finish(st, mgr, rid, tokens, blocks, fault=None, **kw):
        r = _Request(rid, tokens, **kw)
        mgr.req_to_blocks[rid] = [_Block(b) for b in blocks]
        return st.retain(r, [mgr], bs, fault)

    st, pool = store()
    mgr = _Mgr()
    toks = list(range(100, 122))        # 22 tokens (18 prompt): 21 computed, 5 whole blocks
    finish(st, mgr, "a", toks, [5, 0, 7, 8, 9, 10], session_id="s1")
    x = st.sessions.get("a")
    check(x is not None and len(x.tokens) == 20 and pool.freed == [10] and x.held == 4
          and x.cover == 16,
          "store: a finished request keeps its whole blocks, holes included; the partial one "
          "goes back (freed %s); its prompt's full blocks (%s tokens) are what an id-less "
          "adopter must match" % (pool.freed, x and x.cover))
    nxt = toks[:20] + [1, 2, 3, 4, 5, 6]
    for what, req, want in (
            ("the same id, the same prefix", _Request("b", nxt, session_id="s1"), 20),
            ("another id", _Request("c", nxt, session_id="s2"), 0),
            ("no id", _Request("d", nxt), 0),
            ("another cache_salt", _Request("e", nxt, session_id="s1", salt="t"), 0),
            ("another LoRA adapter", _Request("e2", nxt, session_id="s1",
                                              lora=type("L", (), {"lora_name": "x",
                                                                  "lora_path": "/x"})()), 0),
            ("no budget", _Request("f", nxt, budget=0, session_id="s1"), 0),
            ("an edit at token 9 (with its id)",
             _Request("g", toks[:9] + [0] + nxt[10:], session_id="s1"), 8),
            ("a prompt one token past the retained ones",
             _Request("h", toks[:21], session_id="s1"), 20),
            ("a prompt equal to the retained tokens", _Request("i", toks[:20], session_id="s1"),
             16)):
        got = st.match(req, bs)[1]
        check(got == want, "store: %s adopts %d tokens (want %d)" % (what, got, want))
    # id-less: only a match covering the retained prompt adopts
    st2, _ = store()
    m2 = _Mgr()
    finish(st2, m2, "u", toks, [1, 2, 3, 4, 5, 6])
    for what, req, want in (
            ("id-less, the whole history", _Request("v", nxt), 20),
            ("id-less, the retained prompt and no more", _Request("w", toks[:17] + [9, 9, 9]), 16),
            ("id-less, only the first block shared (a common system prompt)",
             _Request("y", toks[:4] + [7] * 20), 0),
            ("id-less, 12 of the 16 prompt tokens shared", _Request("z", toks[:12] + [7] * 12),
             0)):
        got = st2.match(req, bs)[1]
        check(got == want, "store: %s adopts %d tokens (want %d)" % (what, got, want))
    b = _Request("b", nxt, session_id="s1")
    st.install(b, x, 20, [mgr], bs)
    st.consume(b, x, 20, bs)
    check("a" not in st.sessions and [blk.block_id for blk in mgr.req_to_blocks["b"]] ==
          [5, 0, 7, 8, 9] and getattr(b, sessions.EVICTED_FLAG, False)
          and st.events["adopted"] == {"b": ("a", 20)},
          "store: adoption moves the blocks (holes stay holes) and flags no prefix caching")
    check(st.apply_evicted("a", 3) == (0, "b") and st.counters["late_evictions"] == 1,
          "store: a pair evicted from the session after its adoption is the adopter's")
    st, pool = store()
    mgr = _Mgr()
    finish(st, mgr, "a", toks, [1, 2, 3, 4, 5, 6], session_id="s1")
    finish(st, mgr, "t", toks, [11, 12, 13, 14, 15, 16], session_id="s1", salt="t")
    check(list(st.sessions) == ["a", "t"], "store: the same id under another cache_salt is "
          "another session (%s)" % list(st.sessions))
    finish(st, mgr, "a2", toks, [21, 22, 23, 24, 25, 26], session_id="s1")
    check(list(st.sessions) == ["t", "a2"] and st.counters["released_stale"] == 1,
          "store: a newer turn of the same id and salt replaces the older one (%s)"
          % list(st.sessions))
    finish(st, mgr, "a3", [7] * 22, [31, 32, 33, 34, 35, 36], session_id="s1")
    check(list(st.sessions) == ["t", "a2", "a3"] and st.counters["released_stale"] == 1,
          "store: the same id with other tokens leaves the older session to its TTL (%s)"
          % list(st.sessions))
    x = st.sessions["a2"]
    kept = x.blocks[0]
    longer = type("Hit", (), {"blocks": (kept + [_Block(30)],)})()
    copies = type("Hit", (), {"blocks": ([_Block(b.block_id) for b in kept] + [_Block(30)],)})()
    check(sessions.extends(x, longer, 20, bs) and not sessions.extends(x, copies, 20, bs),
          "store: a longer prefix hit extends the session only over its very blocks")
    pool.freed.clear()
    st.consume(_Request("n", nxt, session_id="s1"), x, 20, bs, moved=False)
    check("a2" not in st.sessions and sorted(pool.freed) == [21, 22, 23, 24, 25],
          "store: carried on under vLLM's own hit, the session's references all go back "
          "(freed %s)" % sorted(pool.freed))
    holed = st.sessions["t"]
    # vLLM's longer hit over the session's first two blocks (the ones before the hole
    # to come): the request would carry the session's daemon sequence on
    hit = type("Hit", (), {"blocks": (list(holed.blocks[0][:2]) + [_Block(30), _Block(31)],)})()
    check(sessions.extends(holed, hit, 8, bs), "store: before any eviction the session extends")
    check(st.apply_evicted("t", 3) == (1, None) and holed.blocks[0][3].is_null,
          "store: the daemon evicts one of its blocks: a hole")
    check(not sessions.extends(holed, hit, 8, bs), "store: a session with a hole is never "
          "extended, even over its blocks before the hole")
    st, pool = store(MEMDECAY_VLLM_SESSION_IDS="require")
    mgr = _Mgr()
    check(not finish(st, mgr, "a", toks, [5, 6, 7, 8, 9, 10]) and not st.sessions,
          "store: with ids required, a request without one is not retained")
    st, pool = store()
    mgr = _Mgr()
    check(finish(st, mgr, "ab", toks, [5, 6, 7, 8, 9, 10], status="FINISHED_ABORTED")
          and "ab" in st.sessions, "store: an aborted turn (a stop string) is retained")
    check(not finish(st, mgr, "er", toks, [11, 12, 13, 14, 15, 16], status="FINISHED_ERROR")
          and "er" not in st.sessions, "store: a turn that failed is not")

    def boom(point):
        raise RuntimeError("injected in %s" % point)
    pool.freed.clear()
    try:
        finish(st, mgr, "f", toks, [41, 42, 43, 44, 45, 46], fault=boom)
        check(False, "store: a fault after the blocks were taken propagates")
    except RuntimeError:
        check(sorted(pool.freed) == [41, 42, 43, 44, 45, 46] and "f" not in st.sessions,
              "store: a fault after the blocks were taken frees every one of them (%s)"
              % sorted(pool.freed))
    st, pool = store(MEMDECAY_VLLM_SESSION_SHARE="0.25")      # 10 of the 40 usable blocks
    mgr = _Mgr()
    finish(st, mgr, "a", toks, [1, 2, 3, 4, 5, 6])
    finish(st, mgr, "b", [7] * 22, [11, 12, 13, 14, 15, 16])
    finish(st, mgr, "c", [8] * 22, [21, 22, 23, 24, 25, 26])
    check(list(st.sessions) == ["b", "c"] and st.counters["released_cap"] == 1,
          "store: past its share of the pool the least recently used session goes (%s)"
          % list(st.sessions))
    big = list(range(60))
    check(finish(st, mgr, "d", big, list(range(30, 45))) and "d" not in st.sessions
          and st.counters["refused"] == 1, "store: a session larger than the share is refused")
    st.sessions["c"].last_used -= 10 ** 6
    st.sessions["b"].last_used -= 10 ** 6
    st.match(_Request("m", [7] * 22), bs)
    st.expire()
    check("c" not in st.sessions and "b" in st.sessions and st.counters["released_expired"] == 1,
          "store: the TTL releases an idle session; a match refreshes it")
    check(sessions.common_prefix(list(range(50)), list(range(37)) + [0], 8) == 37,
          "store: the common prefix is exact to the token")



def check_idle_rule(check):
    """Pool mode's idle rule against a real memdecayd (policy memdecay): two
    sequences with the same regions and the same history, one running and one
    retained; the retained one's clock advances by the idle rate x its idle
    seconds (Mirror.idle_steps), the running one's by a step of 16 tokens.
    With an engine budget four pages short, the daemon evicts the idle
    session's pages; at an idle rate of 0 the session does not age and the
    running request's pages go instead."""
    import tempfile

    import memdecay
    from memdecay import Region
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness
    from memdecay_vllm.mirror import Mirror

    def evicted_from(rate):
        work = tempfile.mkdtemp(prefix="md-idle-")
        d = harness.Daemon(work, ["policy = memdecay"]).start()
        try:
            c = memdecay.Client(socket_path=d.sock, require_daemon=True, page_capacity=64,
                                max_seqs=4, budget_engine_pages=12, engine_name="idle-rule",
                                library=os.environ.get("MEMDECAY_LIBRARY"))
            m = Mirror(c, 4, 32, {"sessions_adopted": 0, "sessions_seeded": 0})
            reg = [int(Region.TOOL_OUT)] * 128
            run = m.start("running", reg, None, None)
            idle = m.start("idle", reg, None, None)
            c.publish(c.batch(), 0, steps=[(run.seq, 0), (idle.seq, 0)])
            for r in (run, idle):
                m.declare(r, 128)                    # 8 pages each: 16 > 12
            c.publish(c.batch(), 0, steps=[(run.seq, 128), (idle.seq, 128)])
            m.retain("idle")
            idle.idle_t -= 10.0                      # ten seconds idle
            steps = m.idle_steps(rate)
            c.publish(c.batch(), 0, steps=steps + [(run.seq, 16)])
            got = {run.seq: 0, idle.seq: 0}

            def apply(ev):
                for seq, r in ((run.seq, run), (idle.seq, idle)):
                    if any(pg[0] == ev.slot for pg in r.pages.values()):
                        got[seq] += 1
                c.page_free(ev.slot, memdecay.EVICTED)
                return True
            c.settle_engine(0, 0, 3000, apply=apply)
            c.close()
            return steps, got[run.seq], got[idle.seq]
        finally:
            d.stop()
    steps, n_run, n_idle = evicted_from(16.0)
    check(steps and steps[0][1] == 160 and n_idle >= 4 and n_run == 0,
          "idle rule: 10 s idle at 16 tokens/s advances the session's clock %s tokens; the "
          "daemon evicts %d of its pages and %d of the running request's" %
          (steps[0][1] if steps else None, n_idle, n_run))
    steps, n_run, n_idle = evicted_from(0.0)
    check(not steps and n_run > 0,
          "idle rate 0: the same state evicts from the running request too (%d of its pages, "
          "%d of the session's)" % (n_run, n_idle))


if __name__ == "__main__":
    sys.exit(main())
