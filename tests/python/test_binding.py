"""test_binding.py — the Python binding (engine_adapters/python/memdecay)
against the real libmemdecay and a real memdecayd on a Unix socket in a
temporary directory: struct layouts equal the C compiler's, a step published
in one call reaches the daemon, its evict commands come back and are applied,
bad input raises with the call named, and a dead daemon is fail-open.

Environment (set by ctest): MEMDECAY_LIBRARY (libmemdecay.so), MEMDECAY_BIN
(the directory with memdecayd and memdecayctl), MEMDECAY_LAYOUT (the layout
program built from layout.c)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "engine_adapters", "python"))
import memdecay  # noqa: E402
from memdecay import _lib  # noqa: E402

BIN = os.environ.get("MEMDECAY_BIN", "")


def die_with_parent():
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


class Daemon:
    def __init__(self, sock):
        self.sock = sock
        self.log = open(sock + ".log", "ab")
        self.p = subprocess.Popen([os.path.join(BIN, "memdecayd"), "--socket", sock,
                                   "--foreground", "--log-level", "info"],
                                  stdout=self.log, stderr=self.log, preexec_fn=die_with_parent)
        t = time.monotonic() + 10
        while time.monotonic() < t:
            if self.ctl("ping", check=False).returncode == 0:
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("memdecayd did not answer on %s" % sock)

    def ctl(self, *args, check=True):
        r = subprocess.run([os.path.join(BIN, "memdecayctl"), "--socket", self.sock, *args],
                           capture_output=True, text=True, timeout=10)
        if check and r.returncode:
            raise AssertionError("memdecayctl %s: %s" % (" ".join(args), r.stderr))
        return r

    def json(self, *args):
        return json.loads(self.ctl("--json", *args).stdout)

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def wait_for(pred, timeout=10.0, what="condition"):
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    raise AssertionError("timed out waiting for " + what)


class Layout(unittest.TestCase):
    def test_structs_match_c(self):
        out = subprocess.run([os.environ["MEMDECAY_LAYOUT"]], capture_output=True, text=True,
                             check=True).stdout
        c = json.loads(out)
        import ctypes
        for name, cls in _lib.LAYOUTS.items():
            self.assertEqual(ctypes.sizeof(cls), c[name]["size"], name)
            got = {f: [getattr(cls, f).offset, getattr(cls, f).size] for f, _ in cls._fields_}
            self.assertEqual(got, c[name]["fields"], name)


class Offline(unittest.TestCase):
    def test_labels(self):
        self.assertEqual(memdecay.labels([0, 2, 5]), 0x520)
        self.assertEqual(memdecay.labels([memdecay.Region.SCRATCHPAD] * 16), 0x7777777777777777)
        with self.assertRaises(ValueError):
            memdecay.labels([0] * 17)
        with self.assertRaises(ValueError):
            memdecay.labels([16])

    def test_missing_library_names_the_variable(self):
        with self.assertRaises(OSError) as cm:
            _lib.load_library("/nonexistent/libmemdecay.so")
        self.assertIn("MEMDECAY_LIBRARY", str(cm.exception))

    def test_no_daemon_is_fail_open(self):
        with tempfile.TemporaryDirectory() as d:
            sock = os.path.join(d, "none.sock")
            with self.assertRaises(memdecay.MemDecayError) as cm:
                memdecay.Client(socket_path=sock, require_daemon=True)
            self.assertIn(sock, str(cm.exception))
            c = memdecay.Client(socket_path=sock, page_capacity=8)
            self.assertFalse(c.attached)
            slot, gen = c.page_open(0, 0, 16, 0)
            b = c.batch()
            b.slots[0], b.mass[0] = slot, 0.5
            r = c.publish(b, 1, steps=[(0, 16)])
            self.assertEqual(r.published, 0)
            self.assertEqual(c.seq_clock(0), 16)   # the clock still advances
            c.close()


    def test_tier_detached(self):
        # ABI 1.4: the tier's calls are there and fail open without a daemon
        with tempfile.TemporaryDirectory() as d:
            sock = os.path.join(d, "none.sock")
            with self.assertRaises(memdecay.MemDecayError):
                memdecay.Client(socket_path=sock, page_capacity=8, tier_pages=9)
            c = memdecay.Client(socket_path=sock, page_capacity=8, tier_pages=8,
                                page_bytes=1 << 20)
            self.assertEqual(c.tier_budget(), 0)
            self.assertEqual(c.tier_pages(), 0)
            slot, _ = c.page_open(0, 0, 16, 0)
            self.assertEqual(c.seq_tier_pages(0), [])
            self.assertEqual(c.page_info(slot)["state"], memdecay.PAGE_LIVE)
            b = c.batch()
            b.slots[0], b.mass[0] = slot, 0.5
            r = c.publish_estimates(b, 1)
            # detached: nothing goes out, and a resident page is not skipped (it takes an
            # estimate: what a restore would displace, measured alike)
            self.assertEqual((r.published, r.skipped), (0, 0))
            r = c.settle_recall(100, apply=lambda ev: memdecay.KEPT_IN_TIER)
            self.assertEqual(r.outcome, memdecay.Settle.DETACHED)
            self.assertFalse(r.waited)
            with self.assertRaises(ValueError):
                c.settle_recall(10)
            c.close()

    def test_callback_answers(self):
        # what an apply callback's value becomes for the C library
        cb, err = memdecay.Client._callback(lambda ev: ev.slot)
        ev = _lib._Evict(seq=0, slot=0, type=memdecay.CMD_EVICT)
        import ctypes
        p = ctypes.pointer(ev)
        for slot, want in ((0, 0), (1, 1), (2, memdecay.KEPT_IN_TIER), (5, 1)):
            ev.slot = slot
            self.assertEqual(cb(None, p), want, slot)
        for val, want in ((True, 1), (False, 0), (None, 0)):
            cb, err = memdecay.Client._callback(lambda ev, v=val: v)
            self.assertEqual(cb(None, p), want, val)
        self.assertEqual(err, [])


class WithDaemon(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = Daemon(os.path.join(self.dir.name, "memdecayd.sock"))

    def tearDown(self):
        self.d.stop()
        self.dir.cleanup()

    def test_control_reads_the_policy_table(self):
        """control() is one request on the control socket: the policy table,
        a refusal with the daemon's own message, and no daemon, all bounded."""
        import json
        got = json.loads(memdecay.control("policy --json", socket_path=self.d.sock))
        self.assertIn("memdecay-turn", got["policies"])
        self.assertIn(got["policy"], got["policies"])
        with self.assertRaises(memdecay.MemDecayError) as cm:
            memdecay.control("policy nosuch", socket_path=self.d.sock)
        self.assertIn("nosuch", str(cm.exception))
        self.assertIn("memdecay-turn", str(cm.exception))   # the refusal lists the names
        with self.assertRaises(memdecay.MemDecayError):
            memdecay.control("get", socket_path=self.d.sock, max_reply=64)   # over the cap
        with self.assertRaises(memdecay.MemDecayError):
            memdecay.control("ping", socket_path=self.d.sock + ".none")
        with self.assertRaises(memdecay.MemDecayError):
            memdecay.control("ping\nstats", socket_path=self.d.sock)    # one line only

    def client(self, **kw):
        return memdecay.Client(socket_path=self.d.sock, require_daemon=True, **kw)

    def test_step_and_evictions(self):
        budget = 4
        c = self.client(engine_name="py-test", page_capacity=64, max_seqs=2,
                        budget_engine_pages=budget, policy="memdecay")
        self.assertTrue(c.attached)
        eng = wait_for(lambda: [e for e in self.d.json("engines")["engines"]
                                if e["name"] == "py-test"], what="the engine in memdecayctl")
        self.assertEqual(eng[0]["id"], c.engine_id)
        system = memdecay.labels([memdecay.Region.SYSTEM] * 16)
        user = memdecay.labels([memdecay.Region.USER] * 16)
        b = c.batch()
        live = {}
        evicted = []
        for step in range(12):
            slot, _ = c.page_open(0, step * 16, 16, system if step == 0 else user)
            live[slot] = step
            n = 0
            for s in live:
                b.slots[n], b.mass[n], b.refresh[n] = s, 1.0 / len(live), 0
                n += 1
            r = c.publish(b, n, steps=[(0, 16)])
            self.assertEqual((r.steps, r.published, r.skipped, r.dropped), (1, n, 0, 0))
            self.assertTrue(c.check())
            for ev in wait_for(lambda: c.poll_commands() if len(live) > budget + 1 else [True],
                               what="evict commands at step %d" % step):
                if ev is True:
                    break
                self.assertIn(ev.slot, live)
                evicted.append(live.pop(ev.slot))
                c.page_free(ev.slot, memdecay.EVICTED)
        self.assertTrue(evicted, "no page was evicted over a budget of %d" % budget)
        self.assertNotIn(0, evicted, "the system page was evicted")
        self.assertLessEqual(c.live_pages(), budget + 1)
        self.assertEqual(c.seq_clock(0), 12 * 16)
        st = wait_for(lambda: [e for e in self.d.json("stats")["engines"]
                               if e["id"] == c.engine_id and e["records"] >= 12 * 2],
                      what="the daemon to count the records")[0]
        self.assertEqual(st["violations"], 0)
        self.assertGreaterEqual(c.counters()["cmds_applied"], len(evicted))
        c.close()

    def test_params_carry_the_whole_block(self):
        """Every field the daemon publishes reaches the engine, and a live set changes it."""
        c = self.client(engine_name="py-params")
        p = wait_for(lambda: [v for v in [c.params()] if v["seqlock"]], what="a parameter read")[0]
        got = self.d.json("get")
        self.assertAlmostEqual(p["alpha"], float(got["memdecay.alpha"]))
        self.assertAlmostEqual(p["beta"], float(got["memdecay.beta"]))
        self.assertAlmostEqual(p["low_watermark"], float(got["budget.low_watermark"]))
        tool_out = memdecay.Region.TOOL_OUT
        self.assertAlmostEqual(p["lambda"][tool_out],
                               float(got["memdecay.region.tool_out.lambda"]))
        self.assertAlmostEqual(p["base"][tool_out], float(got["memdecay.region.tool_out.base"]))
        self.d.ctl("set", "memdecay.region.tool_out.lambda=0.125")
        self.d.ctl("set", "memdecay.alpha=2.5")
        p2 = wait_for(lambda: [v for v in [c.params()] if v["alpha"] == 2.5
                               and v["lambda"][tool_out] == 0.125], what="the new parameters")[0]
        self.assertNotEqual(p2["seqlock"], p["seqlock"])
        self.assertEqual(p2["base"], p["base"])
        c.close()

    def test_bad_input_raises(self):
        c = self.client(page_capacity=8)
        b = c.batch()
        b.slots[0] = 8   # past page_capacity
        with self.assertRaises(memdecay.MemDecayError) as cm:
            c.publish(b, 1, steps=[(0, 1)])
        self.assertEqual(cm.exception.code, -22)
        self.assertIn("publish", str(cm.exception))
        self.assertEqual(c.seq_clock(0), 0)   # nothing applied
        with self.assertRaises(ValueError):
            c.publish(b, 9)
        with self.assertRaises(memdecay.MemDecayError):
            c.page_open(5, 0, 16, 0)   # sequence past max_seqs
        c.close()

    def test_daemon_death_and_reattach(self):
        c = self.client(engine_name="py-reattach", page_capacity=8)
        slot, _ = c.page_open(0, 0, 16, 0)
        self.d.stop(signal.SIGKILL)
        wait_for(lambda: not c.check(50), what="the client to notice the dead daemon")
        b = c.batch()
        b.slots[0], b.mass[0] = slot, 0.5
        r = c.publish(b, 1, steps=[(0, 1)])   # fail-open: no raise
        self.assertEqual(r.published, 0)
        self.d = Daemon(self.d.sock)
        self.assertTrue(c.reattach())
        wait_for(lambda: [e for e in self.d.json("stats")["engines"]
                          if e["id"] == c.engine_id and e["pages_live"] == 1],
                 what="the live page republished to the new daemon")
        c.close()


class Contract(unittest.TestCase):
    """The engine contract through the binding (docs/adapters.md): sequence
    options, pages in order, the floor, commands through a Python callback,
    settle and maintain."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.sock = os.path.join(self.dir.name, "memdecayd.sock")
        self.d = None

    def tearDown(self):
        if self.d:
            self.d.stop()
        self.dir.cleanup()

    def test_detached(self):
        c = memdecay.Client(socket_path=self.sock, page_capacity=16, max_seqs=2)
        none = {"policy": None, "budget": None, "retained": False, "session": None}
        self.assertEqual(c.seq_options(1), none)
        self.assertEqual(c.seq_set_options(1, policy=2, budget=48), memdecay.DETACHED)
        self.assertEqual(c.seq_options(1), dict(none, policy=2, budget=48))
        # the session keeps the options, the options keep the session
        self.assertEqual(c.seq_set_session(1, True, "conversation é 1"), memdecay.DETACHED)
        self.assertEqual(c.seq_options(1), {"policy": 2, "budget": 48, "retained": True,
                                            "session": "conversa"})
        self.assertEqual(c.seq_set_options(1, policy=2, budget=40), memdecay.DETACHED)
        self.assertEqual(c.seq_options(1)["session"], "conversa")
        self.assertTrue(c.seq_options(1)["retained"])
        c.seq_set_session(1, False, b"a b\x00\xff")
        self.assertEqual(c.seq_options(1), {"policy": 2, "budget": 40, "retained": False,
                                            "session": "a?b??"})
        c.seq_set_session(1, True, "éé")                 # UTF-8: four bytes past ASCII
        self.assertEqual(c.seq_options(1)["session"], "????")
        c.seq_set_session(1, True)
        self.assertIsNone(c.seq_options(1)["session"])
        with self.assertRaises(TypeError):
            c.seq_set_session(1, True, 42)
        with self.assertRaises(memdecay.MemDecayError):
            c.seq_set_session(2, True, "x")
        c.seq_set_options(1, policy=2, budget=48)
        self.assertEqual(c.seq_budget_tokens(1), 48)
        slots = [c.page_open(1, pos, 16, memdecay.labels([2] * 16))[0] for pos in (32, 0, 16)]
        self.assertEqual(c.seq_pages(1), [slots[1], slots[2], slots[0]])
        self.assertEqual(c.seq_live_tokens(1), 48)
        self.assertEqual(c.seq_protected_pages(1), 2)     # 1 + protect_recent
        self.assertEqual(c.seq_floor(1), 32)
        self.assertEqual(c.apply_commands(lambda ev: True), 0)
        r = c.settle([1], [1], 0, 1000, apply=lambda ev: True)
        self.assertEqual(r.outcome, memdecay.Settle.DETACHED)
        self.assertFalse(r.waited)
        self.assertFalse(c.maintain(0, 10))
        with self.assertRaises(memdecay.MemDecayError):
            c.seq_set_options(2, budget=1)
        with self.assertRaises(ValueError):
            c.settle([1], [1, 2], apply=lambda ev: True)
        c.seq_end(1)
        self.assertEqual(c.seq_options(1), none)
        c.close()

    def test_settle_and_callback_errors(self):
        self.d = Daemon(self.sock)
        c = memdecay.Client(socket_path=self.sock, require_daemon=True, page_capacity=64,
                            max_seqs=2, budget_sequence_tokens=64, engine_name="py-contract")
        system = memdecay.labels([memdecay.Region.SYSTEM] * 16)
        user = memdecay.labels([memdecay.Region.USER] * 16)
        live = {}
        for i in range(10):
            slot, _ = c.page_open(0, i * 16, 16, system if i == 0 else user)
            live[slot] = i
        b = c.batch()
        for n, slot in enumerate(live):
            b.slots[n], b.mass[n], b.refresh[n] = slot, 0.1, 0
        c.publish(b, len(live), steps=[(0, 160)])
        self.assertEqual(c.seq_budget_tokens(0), 64)
        self.assertEqual(c.seq_floor(0), 48)   # the system page and the two newest

        def boom(ev):
            raise KeyError("engine bug")
        with self.assertRaises(KeyError):
            wait_for(lambda: c.apply_commands(boom), what="a command")

        freed = []

        def apply(ev):
            freed.append(live.pop(ev.slot))
            c.page_free(ev.slot, memdecay.EVICTED)
            return True
        r = c.settle([0], [1], 16, 3000, apply=apply)
        self.assertIn(r.outcome, (memdecay.Settle.OK, memdecay.Settle.UNREACHABLE))
        self.assertNotIn(0, freed, "the system page was evicted")
        if r.outcome == memdecay.Settle.OK:
            self.assertLessEqual(c.seq_live_tokens(0) + 1, max(64, c.seq_floor(0)) + 16)
        self.assertTrue(r.waited or r.applied)
        self.assertEqual(c.seq_pages(0), sorted(live, key=live.get))
        c.close()

    def test_settle_engine_pages(self):
        """The engine's page budget: settle_engine waits for the daemon's
        decision and applies it through the callback."""
        self.d = Daemon(self.sock)
        c = memdecay.Client(socket_path=self.sock, require_daemon=True, page_capacity=64,
                            max_seqs=2, budget_engine_pages=4, engine_name="py-engine-budget")
        user = memdecay.labels([memdecay.Region.USER] * 16)
        live = set()
        for i in range(10):
            slot, _ = c.page_open(0, i * 16, 16, user)
            live.add(slot)
        b = c.batch()
        for n, slot in enumerate(live):
            b.slots[n], b.mass[n], b.refresh[n] = slot, 0.1, 0
        c.publish(b, len(live), steps=[(0, 160)])

        def apply(ev):
            live.discard(ev.slot)
            c.page_free(ev.slot, memdecay.EVICTED)
            return True
        r = c.settle_engine(1, 0, 3000, apply=apply)
        self.assertIn(r.outcome, (memdecay.Settle.OK, memdecay.Settle.UNREACHABLE))
        self.assertGreater(r.applied, 0)
        self.assertEqual(c.live_pages(), len(live))
        if r.outcome == memdecay.Settle.OK:
            self.assertLessEqual(len(live) + 1, 4)
        with self.assertRaises(ValueError):
            c.settle_engine(1)
        c.close()

    def test_tier_with_daemon(self):
        """ABI 1.4 through a real memdecayd: the tier is granted, evicts go
        into it through KEPT_IN_TIER, estimates are taken and settle_recall
        ends once the daemon has decided (restores and the evicts that make
        room for them arrive through the same callback), the sequence's end
        frees the tier, and the daemon saw no violation."""
        self.d = Daemon(self.sock)
        c = memdecay.Client(socket_path=self.sock, require_daemon=True, page_capacity=64,
                            max_seqs=2, budget_engine_pages=4, engine_name="py-engine-tier",
                            tier_pages=8, page_bytes=4096)
        self.assertEqual(c.tier_budget(), 8)
        user = memdecay.labels([memdecay.Region.USER] * 16)
        for i in range(8):
            c.page_open(0, i * 16, 16, user)
        c.seq_step(0, 128)
        types = []

        def apply(ev):
            types.append(ev.type)
            if ev.type == memdecay.CMD_EVICT:
                return memdecay.KEPT_IN_TIER
            return True
        wait_for(lambda: c.apply_commands(apply) >= 0 and c.tier_pages() >= 4,
                 what="evictions into the tier")
        self.assertEqual(c.live_pages() + c.tier_pages(), 8)
        tier = c.seq_tier_pages(0)
        self.assertEqual(len(tier), c.tier_pages())
        self.assertEqual(c.page_info(tier[0])["state"], memdecay.PAGE_TIER)
        b = c.batch()
        for n, slot in enumerate(tier):
            b.slots[n], b.mass[n], b.refresh[n] = slot, 8.0, 0xffff
        self.assertEqual(c.publish_estimates(b, len(tier)).published, len(tier))
        r = c.settle_recall(2000, apply=apply)
        self.assertEqual(r.outcome, memdecay.Settle.OK)
        self.assertEqual(c.live_pages() + c.tier_pages(), 8)
        self.assertTrue(set(types) <= {memdecay.CMD_EVICT, memdecay.CMD_RESTORE,
                                       memdecay.CMD_DROP}, types)
        c.seq_end(0)
        self.assertEqual((c.live_pages(), c.tier_pages()), (0, 0))
        st = wait_for(lambda: [e for e in self.d.json("stats")["engines"]
                               if e["id"] == c.engine_id and e["abi_minor"] == 4],
                      what="the engine in the daemon's stats")[0]
        self.assertEqual(st["violations"], 0)
        c.close()

    def test_floor_knows_the_policy_window(self):
        """h2o protects a window of newest pages that the parameter block does
        not carry: the daemon publishes the count, the library's floor uses it."""
        self.d = Daemon(self.sock)
        c = memdecay.Client(socket_path=self.sock, require_daemon=True, page_capacity=128,
                            max_seqs=2, policy="h2o", budget_sequence_tokens=512,
                            engine_name="py-h2o")
        user = memdecay.labels([memdecay.Region.USER] * 16)
        for i in range(40):
            c.page_open(0, i * 16, 16, user)
        b = c.batch()
        pages = c.seq_pages(0)
        for n, slot in enumerate(pages):
            b.slots[n], b.mass[n], b.refresh[n] = slot, 0.01, 0
        c.publish(b, len(pages), steps=[(0, 640)])
        protect = 1 + c.params()["protect_recent"]
        k = wait_for(lambda: c.seq_protected_pages(0) > protect and c.seq_protected_pages(0),
                     what="the daemon's published h2o window")
        self.assertEqual(c.seq_floor(0), 16 * k)
        # a sequence of its own policy (recency: no window) gets the plain count
        self.assertEqual(c.seq_set_options(1, policy="recency", budget=64), 0)
        self.assertEqual(c.seq_options(1), {"policy": memdecay.policy_from_name("recency"),
                                            "budget": 64, "retained": False, "session": None})
        self.assertEqual(c.seq_budget_tokens(1), 64)
        for i in range(3):
            c.page_open(1, i * 16, 16, user)
        c.publish(b, 0, steps=[(1, 48)])
        time.sleep(0.2)
        self.assertEqual(c.seq_protected_pages(1), protect)
        c.close()

    def test_session_in_sessions(self):
        """ABI 1.3: a retained sequence and its tag reach `memdecayctl
        sessions`, its policy and budget stay; the end makes it running."""
        self.d = Daemon(self.sock)
        c = memdecay.Client(socket_path=self.sock, require_daemon=True, page_capacity=16,
                            max_seqs=2, engine_name="py-session")
        user = memdecay.labels([memdecay.Region.USER] * 16)
        for q in (0, 1):
            c.page_open(q, 0, 16, user)
        self.assertEqual(c.seq_set_options(0, budget=96), 0)
        self.assertEqual(c.seq_set_session(0, True, "agent-session-42"), 0)
        self.assertEqual(c.seq_set_session(1, False, "turn 2"), 0)

        def rows():
            got = self.d.json("sessions", "--engine", "py-session")["sessions"]
            return {r["seq"]: (r["state"], r["session"], r["budget_tokens"]) for r in got}
        want = {0: ("retained", "agent-se", 96), 1: ("running", "turn?2", 0)}
        wait_for(lambda: rows() == want, what="the sessions in memdecayctl sessions")
        text = self.d.ctl("sessions", "--engine", "py-session").stdout
        self.assertIn("retained agent-se", " ".join(text.split()))
        stats = self.d.json("stats", "--engine", "py-session")["engines"][0]
        self.assertEqual(stats["seqs_retained"], 1)
        c.seq_end(0)
        c.page_open(0, 0, 16, user)
        wait_for(lambda: rows().get(0) == ("running", None, 0), what="the end to reset it")
        c.close()

    def test_maintain_reattaches(self):
        self.d = Daemon(self.sock)
        c = memdecay.Client(socket_path=self.sock, require_daemon=True, page_capacity=8,
                            engine_name="py-maintain")
        c.page_open(0, 0, 16, 0)
        self.assertEqual(c.seq_set_options(0, budget=32), 0)
        self.assertTrue(c.maintain(0, 20))
        self.d.stop(signal.SIGKILL)
        wait_for(lambda: not c.maintain(50, 20), what="the client to notice the dead daemon")
        self.d = Daemon(self.sock)
        wait_for(lambda: c.maintain(0, 20), what="maintain to reattach")
        self.assertEqual(c.counters()["reattaches"], 1)
        self.assertEqual(c.seq_options(0)["budget"], 32)
        wait_for(lambda: [e for e in self.d.json("stats")["engines"]
                          if e["id"] == c.engine_id and e["pages_live"] == 1
                          and e["seqs_own_options"] == 1],
                 what="the live page and the sequence's options republished")
        c.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
