"""memdecay — Python binding to libmemdecay, the engine side of memdecayd.

A thin ctypes layer (docs/python.md): every call is one call into the C
library, and one scheduler step is published with one call
(`Client.publish`, libmemdecay's md_publish_batch: one tail store and at most
one doorbell however many pages).  Errors are raised as `MemDecayError`, except
the fail-open answers (`DETACHED`, `FULL`), which are returned.

    from memdecay import Client, Region, labels
    c = Client(engine_name="my-engine", page_capacity=4096, max_seqs=8)
    slot, gen = c.page_open(seq=0, first_pos=0, n_tokens=16,
                            labels=labels([Region.SYSTEM] * 16))
    b = c.batch()                       # preallocated step buffers
    b.slots[0] = slot; b.mass[0] = 0.4; b.refresh[0] = 0xffff
    c.publish(b, n_pages=1, steps=[(0, 1)])
    for ev in c.poll_commands():
        ...free the page in the engine...
        c.page_free(ev.slot, EVICTED)
    c.check()                           # every step: heartbeat, liveness

The engine contract (docs/adapters.md) is the library's too: per-sequence
options (`seq_set_options`), the tokens the daemon never evicts (`seq_floor`),
commands applied through a callback (`apply_commands`), the bounded wait when a
sequence is over budget (`settle`) and reattach (`maintain`).

The host tier (ABI 1.4, docs/tier.md): an engine that keeps evicted pages' K/V
in host memory creates its client with `tier_pages` (and `page_bytes`), returns
KEPT_IN_TIER from its apply callback for an evict it kept there, applies the
daemon's restores and drops through the same callback (`ev.type`), publishes
its estimates for tier pages (`publish_estimates`) and waits for the recall
decision at the end of a prefill (`settle_recall`).
"""
import collections
import ctypes
import enum

from ._lib import (APPLY_FN, CMD_DROP, CMD_EVICT, CMD_RESTORE, DETACHED, DROPPED, EVICTED,
                   KEPT_IN_TIER, NOTSUP, PAGE_FREE, PAGE_LIVE, PAGE_TIER, REFUSED, FINISHED,
                   FULL, SEQ_ENGINE, SEQ_RETAINED, SEQ_RUNNING, SESSION_LEN, MemDecayError,
                   load_library,
                   strerror, _BatchResult, _Config, _Counters, _Evict, _PageEntry, _ParamsView,
                   _SeqOptions, _SettleResult)
from .names import Region, policy_from_name, policy_names, region_names

__all__ = ["Client", "Batch", "Region", "Settle", "SettleResult", "labels", "MemDecayError",
           "DETACHED", "FULL", "NOTSUP", "FINISHED", "EVICTED", "DROPPED", "CMD_EVICT",
           "CMD_RESTORE", "CMD_DROP", "KEPT_IN_TIER", "PAGE_FREE", "PAGE_LIVE", "PAGE_TIER",
           "PAGE_TOKENS_MAX",
           "load_library", "strerror", "control", "region_names", "policy_names",
           "policy_from_name"]

PAGE_TOKENS_MAX = 16


class Settle(enum.IntEnum):
    """How `Client.settle` ended (enum md_settle_outcome)."""
    OK = 0              # every sequence within its limit
    UNREACHABLE = 1     # the daemon evicted what it could; still over (pinned, protected)
    TIMEOUT = 2         # no decision within timeout_ms
    SUPPRESSED = 3      # timed out before and the daemon has not evicted since: no wait
    DETACHED = 4        # no daemon: fail-open, keep serving


SettleResult = collections.namedtuple("SettleResult", "outcome applied waited wait_ns")
SettleResult.__doc__ = """Result of `Client.settle` (and settle_engine, settle_recall):
outcome (a `Settle`), applied (commands the callback applied), waited (True if
it waited at all), wait_ns."""


def labels(regions):
    """Packs up to 16 per-token region ids into a page's 64-bit label word
    (4 bits a token, token k in bits 4k..4k+3)."""
    regions = list(regions)
    if len(regions) > PAGE_TOKENS_MAX:
        raise ValueError("a page holds at most %d tokens, got %d labels"
                         % (PAGE_TOKENS_MAX, len(regions)))
    word = 0
    for k, r in enumerate(regions):
        r = int(r)
        if not 0 <= r < 16:
            raise ValueError("region id %d at token %d is outside 0..15" % (r, k))
        word |= r << (4 * k)
    return word


def control(request, socket_path=None, timeout_ms=1000, max_reply=1 << 20, library=None):
    """One operator request on memdecayd's control socket (libmemdecay's
    md_control; docs/operations.md "Control protocol"), without attaching:
    control("policy --json") is the daemon's policy table.  Returns the reply's
    body as text; raises MemDecayError (the daemon's refusal in its message, or
    no daemon, a timeout, a reply over max_reply bytes)."""
    lib = load_library(library)
    buf = ctypes.create_string_buffer(max_reply)
    path = socket_path.encode() if socket_path else None
    rc = lib.md_control(path, request.encode(), buf, max_reply, int(timeout_ms))
    if rc < 0:
        detail = buf.value.decode(errors="replace") if rc == REFUSED else None
        raise MemDecayError(rc, "control %r" % request.split(" ")[0], detail)
    return buf.raw[:rc].decode(errors="replace")


class Batch:
    """One step's attention, in buffers the C library reads directly.

    `slots` (uint32), `mass` (float32) and `refresh` (uint16) are writable
    memoryviews of `capacity` entries: fill the first n and pass n to
    `Client.publish`.  numpy wraps them without a copy
    (`numpy.frombuffer(b.mass, dtype=numpy.float32)`), and a memoryview slice
    assignment from an `array.array` is one memcpy."""

    def __init__(self, capacity, max_steps=64):
        self.capacity = capacity
        self._slots = (ctypes.c_uint32 * capacity)()
        self._mass = (ctypes.c_float * capacity)()
        self._refresh = (ctypes.c_uint16 * capacity)()
        self.max_steps = max_steps
        self._step_seqs = (ctypes.c_uint32 * max_steps)()
        self._step_tokens = (ctypes.c_uint32 * max_steps)()
        self.slots = memoryview(self._slots).cast("B").cast("I")
        self.mass = memoryview(self._mass).cast("B").cast("f")
        self.refresh = memoryview(self._refresh).cast("B").cast("H")
        self.result = _BatchResult()


class Client:
    """One engine's attachment to memdecayd (libmemdecay's md_client).

    Like the C client it is used by one thread.  With no daemon it is created
    detached (`attached` False) unless `require_daemon` is set, and every call
    still keeps the page mirror, so `reattach()` later republishes it."""

    def __init__(self, socket_path=None, engine_name="python", page_tokens=16,
                 page_capacity=1024, max_seqs=4, policy=None, budget_engine_pages=-1,
                 budget_sequence_tokens=-1, weight=0.0, tp_rank=0, tp_size=0,
                 require_daemon=False, library=None, tier_pages=0, page_bytes=0):
        self._lib = load_library(library)
        self._lib_path = library
        self._c = None
        cfg = _Config()
        self._lib.md_client_config_init(ctypes.byref(cfg))
        # keep the encoded strings alive for the create call
        self._strs = [s.encode() if s is not None else None
                      for s in (socket_path, engine_name, policy)]
        cfg.socket_path, cfg.engine_name, cfg.policy = self._strs
        cfg.page_tokens = page_tokens
        cfg.page_capacity = page_capacity
        cfg.max_seqs = max_seqs
        cfg.tp_rank, cfg.tp_size = tp_rank, tp_size
        cfg.budget_engine_pages = budget_engine_pages
        cfg.budget_sequence_tokens = budget_sequence_tokens
        cfg.weight = weight
        cfg.tier_pages = tier_pages
        cfg.page_bytes = page_bytes
        out = ctypes.c_void_p()
        create = (self._lib.md_client_create_attached if require_daemon
                  else self._lib.md_client_create)
        rc = create(ctypes.byref(cfg), ctypes.byref(out))
        if rc < 0:
            where = socket_path or "the default socket"
            raise MemDecayError(rc, "attach to memdecayd at %s" % where)
        self._c = out
        self.page_capacity = page_capacity
        self.max_seqs = max_seqs
        self._evicts = (_Evict * 256)()
        self._slot = ctypes.c_uint32()
        self._gen = ctypes.c_uint32()

    # ---- lifetime ----
    def close(self):
        if self._c:
            self._lib.md_client_destroy(self._c)
            self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _check(self, rc, what):
        if rc < 0 and rc not in (DETACHED, FULL):
            detail = self._lib.md_client_last_error(self._c) if self._c else None
            raise MemDecayError(rc, what, detail.decode(errors="replace") if detail else None)
        return rc

    # ---- state ----
    @property
    def attached(self):
        return bool(self._lib.md_client_attached(self._c))

    @property
    def engine_id(self):
        return self._lib.md_client_engine_id(self._c)

    @property
    def socket_path(self):
        return self._lib.md_client_socket_path(self._c).decode()

    @property
    def last_error(self):
        e = self._lib.md_client_last_error(self._c)
        return e.decode(errors="replace") if e else ""

    def check(self, timeout_ms=0):
        """Liveness at a step boundary: True while attached and the daemon alive."""
        return bool(self._lib.md_client_check(self._c, timeout_ms))

    def reattach(self):
        rc = self._lib.md_client_reattach(self._c)
        return rc == 0

    def live_pages(self):
        return self._lib.md_client_live_pages(self._c)

    def counters(self):
        c = _Counters()
        self._lib.md_client_counters(self._c, ctypes.byref(c))
        return {k: getattr(c, k) for k, _ in _Counters._fields_}

    def params(self):
        v = _ParamsView()
        self._check(self._lib.md_client_params(self._c, ctypes.byref(v)), "read parameters")
        out = {k: getattr(v, k) for k, _ in _ParamsView._fields_}
        for k in ("base", "lambda"):
            out[k] = list(out[k])   # per region id
        return out

    def page_info(self, slot):
        e = _PageEntry()
        self._check(self._lib.md_page_info(self._c, slot, ctypes.byref(e)), "page %d" % slot)
        return {k: getattr(e, k) for k, _ in _PageEntry._fields_}

    # ---- pages ----
    def page_open(self, seq, first_pos, n_tokens, labels=0):
        """Declares a page; returns (slot, generation)."""
        self._check(self._lib.md_page_open(self._c, seq, first_pos, n_tokens, labels,
                                           ctypes.byref(self._slot), ctypes.byref(self._gen)),
                    "open a page of sequence %d at %d" % (seq, first_pos))
        return self._slot.value, self._gen.value

    def page_grow(self, slot, n_tokens, labels):
        return self._check(self._lib.md_page_grow(self._c, slot, n_tokens, labels),
                           "grow page %d" % slot)

    def page_free(self, slot, reason=FINISHED):
        return self._check(self._lib.md_page_free(self._c, slot, reason), "free page %d" % slot)

    def seq_step(self, seq, n_tokens):
        return self._check(self._lib.md_seq_step(self._c, seq, n_tokens),
                           "step sequence %d" % seq)

    def seq_end(self, seq):
        return self._check(self._lib.md_seq_end(self._c, seq), "end sequence %d" % seq)

    def seq_clock(self, seq):
        return self._lib.md_seq_clock(self._c, seq)

    def relabel(self, seq, pos0, pos1, region):
        return self._check(self._lib.md_relabel(self._c, seq, pos0, pos1, int(region)),
                           "relabel %d..%d of sequence %d" % (pos0, pos1, seq))

    # ---- one step ----
    def batch(self, capacity=None, max_steps=64):
        return Batch(capacity or self.page_capacity, max_steps)

    def publish(self, batch, n_pages, steps=(), refresh=True):
        """Publishes a step: the clock advances in `steps` ((seq, n_tokens)
        pairs, in order) and batch's first n_pages (slot, mass, refresh)
        entries, in one call.  Returns the batch's result (steps, published,
        skipped, dropped); a full ring drops the attention whole and a detached
        client advances its clocks only (both are counted, not raised)."""
        n_steps = len(steps)
        if n_steps > batch.max_steps:
            raise ValueError("%d steps in one publish, the batch holds %d"
                             % (n_steps, batch.max_steps))
        if not 0 <= n_pages <= batch.capacity:
            raise ValueError("n_pages %d outside 0..%d" % (n_pages, batch.capacity))
        for i, (q, n) in enumerate(steps):
            batch._step_seqs[i] = q
            batch._step_tokens[i] = n
        self._check(self._lib.md_publish_batch(
            self._c, batch._step_seqs, batch._step_tokens, n_steps, batch._slots,
            batch._mass, batch._refresh if refresh else None, n_pages,
            ctypes.byref(batch.result)), "publish a step of %d pages" % n_pages)
        return batch.result

    def attn_page(self, slot, mass, refresh_bitmap=0):
        """One page's attention record (publish() does a whole step at once)."""
        return self._check(self._lib.md_attn_page(self._c, slot, mass, refresh_bitmap),
                           "attention for page %d" % slot)

    # ---- commands ----
    def poll_commands(self):
        """Pending evict commands whose generation still matches; the engine
        frees each page and reports it with page_free(slot, EVICTED)."""
        n = self._check(self._lib.md_poll_commands(self._c, self._evicts, len(self._evicts)),
                        "poll commands")
        return [_Evict.from_buffer_copy(self._evicts[i]) for i in range(max(n, 0))]

    def wait_commands(self, timeout_ms):
        return self._check(self._lib.md_wait_commands(self._c, timeout_ms), "wait for commands")

    def apply_commands(self, fn):
        """Hands every pending command to fn(ev) (an `Evict` with type, seq,
        slot, gen, reason, decided_ns); returns the commands applied.  For an
        evict (CMD_EVICT, the only type without a host tier) fn frees the page
        in the engine and returns True, returns KEPT_IN_TIER when it kept the
        page's K/V in its host tier (ABI 1.4; NOTSUP is raised without a
        tier), or returns False to keep it resident (the daemon may command it
        again).  For a restore (CMD_RESTORE) True when the page is back on the
        device, False when refused; for a drop (CMD_DROP) True when its host
        copy is released, False to keep it.  A page fn freed but did not
        report with page_free(slot, EVICTED) is reported by the library.  An
        exception in fn stops the loop and is raised here."""
        cb, err = self._callback(fn)
        rc = self._lib.md_apply_commands(self._c, cb, None)
        return self._after_callback(rc, err, "apply commands")

    # ---- the engine contract: sequences ----
    def _policy_id(self, policy):
        if policy is None:
            return SEQ_ENGINE
        if isinstance(policy, int):
            return policy
        return policy_from_name(policy, self._lib_path)

    def _seq_get(self, seq, what):
        o = _SeqOptions()
        self._check(self._lib.md_seq_get_options(self._c, seq, ctypes.byref(o)), what)
        return o

    def _seq_set(self, seq, o, what):
        rc = self._lib.md_seq_set_options(self._c, seq, ctypes.byref(o))
        if rc == NOTSUP:
            return rc
        return self._check(rc, what)

    def seq_set_options(self, seq, policy=None, budget=None):
        """A sequence's own options: policy (a name or id; None: the engine's)
        and budget (tokens; 0: none; None: the engine's).  Its session state
        and tag (seq_set_session) stay as they are.  The daemon sees them at
        once and again after every resync and reattach; seq_end resets them.
        Returns 0, DETACHED (kept, the next daemon gets them) or NOTSUP (the
        daemon is older than ABI 1.2: kept in the library, whose floor and
        settle use them)."""
        what = "set the options of sequence %d" % seq
        o = self._seq_get(seq, what)
        o.policy = self._policy_id(policy)
        o.budget_sequence_tokens = -1 if budget is None else int(budget)
        return self._seq_set(seq, o, what)

    def seq_set_session(self, seq, retained, session_id=None):
        """A sequence's session (ABI 1.3), shown by `memdecayctl sessions`:
        retained True when its request finished and the engine keeps its KV
        for the session's next turn, False while a request runs on it; and
        session_id (str, UTF-8 encoded, or bytes; None or empty: no tag),
        whose first 8 bytes tag it, each byte outside printable ASCII as '?'.
        Its policy and budget stay as they are; seq_end resets it to running
        with no tag.  Returns 0 (a 1.2 daemon too: it has no words for them,
        the library keeps them for a later 1.3 daemon), DETACHED (kept) or
        NOTSUP (a 1.0/1.1 daemon: kept in the library), as seq_set_options."""
        what = "set the session of sequence %d" % seq
        o = self._seq_get(seq, what)
        o.state = SEQ_RETAINED if retained else SEQ_RUNNING
        if isinstance(session_id, str):
            session_id = session_id.encode("utf-8")
        elif session_id is not None and not isinstance(session_id, (bytes, bytearray)):
            raise TypeError("session_id: str, bytes or None, not %s" % type(session_id).__name__)
        raw = bytes(session_id or b"")
        tag = ctypes.create_string_buffer(SESSION_LEN)
        self._lib.md_seq_session_tag(raw, len(raw), tag)
        o.session[:] = list(tag.raw)
        return self._seq_set(seq, o, what)

    def seq_options(self, seq):
        """{"policy": id or None, "budget": tokens or None (None: the
        engine's), "retained": bool, "session": the tag (str) or None}."""
        o = self._seq_get(seq, "options of sequence %d" % seq)
        tag = bytes(o.session).rstrip(b"\0")
        return {"policy": None if o.policy == SEQ_ENGINE else o.policy,
                "budget": None if o.budget_sequence_tokens < 0 else o.budget_sequence_tokens,
                "retained": o.state == SEQ_RETAINED,
                "session": tag.decode("ascii") if tag else None}

    def seq_budget_tokens(self, seq):
        """The budget in effect for seq: its own, else the engine's (0: none)."""
        return self._lib.md_seq_budget_tokens(self._c, seq)

    def seq_live_tokens(self, seq):
        return self._lib.md_seq_live_tokens(self._c, seq)

    def seq_pages(self, seq):
        """seq's live slots, first position ascending (the daemon's order)."""
        n = self._check(self._lib.md_seq_pages(self._c, seq, None, 0), "pages of %d" % seq)
        buf = (ctypes.c_uint32 * max(n, 1))()
        n = self._check(self._lib.md_seq_pages(self._c, seq, buf, n), "pages of %d" % seq)
        return list(buf[:n])

    def seq_floor(self, seq):
        """Tokens of seq the daemon never evicts: pinned pages and its newest
        protected pages (the daemon's published count, policy window included)."""
        return self._lib.md_seq_floor(self._c, seq)

    def seq_protected_pages(self, seq):
        """How many of seq's newest pages the daemon protects."""
        return self._lib.md_seq_protected_pages(self._c, seq)

    # ---- the engine contract: waiting and staying attached ----
    def settle(self, seqs, n_next=None, slack_tokens=0, timeout_ms=250, apply=None):
        """Before a step that appends n_next[i] tokens to seqs[i]: applies
        pending commands through apply (as apply_commands) and, while a
        sequence holds more than max(budget, floor) + slack_tokens, waits up
        to timeout_ms for the daemon's decision.  Returns a SettleResult;
        outcome is a `Settle`.  Never waits when no sequence has a budget."""
        if apply is None:
            raise ValueError("settle needs apply, the engine's way to free a page")
        seqs = list(seqs)
        n = len(seqs)
        qs = (ctypes.c_uint32 * max(n, 1))(*seqs)
        nx = None
        if n_next is not None:
            n_next = list(n_next)
            if len(n_next) != n:
                raise ValueError("%d sequences, %d n_next" % (n, len(n_next)))
            nx = (ctypes.c_uint32 * max(n, 1))(*n_next)
        res = _SettleResult()
        cb, err = self._callback(apply)
        rc = self._lib.md_settle(self._c, qs, nx, n, slack_tokens, int(timeout_ms), cb, None,
                                 ctypes.byref(res))
        self._after_callback(rc, err, "settle sequences %s" % seqs)
        return SettleResult(Settle(res.outcome), res.applied, bool(res.waited), res.wait_ns)

    def settle_engine(self, n_next_pages=1, slack_pages=0, timeout_ms=250, apply=None):
        """The same wait for the engine's page budget: before a step that
        opens n_next_pages pages, while the engine holds more than its page
        budget + slack_pages (md_settle_engine).  Returns a SettleResult."""
        if apply is None:
            raise ValueError("settle_engine needs apply, the engine's way to free a page")
        res = _SettleResult()
        cb, err = self._callback(apply)
        rc = self._lib.md_settle_engine(self._c, n_next_pages, slack_pages, int(timeout_ms),
                                        cb, None, ctypes.byref(res))
        self._after_callback(rc, err, "settle the engine's pages")
        return SettleResult(Settle(res.outcome), res.applied, bool(res.waited), res.wait_ns)

    # ---- the host tier and recall (ABI 1.4, docs/tier.md) ----
    def tier_budget(self):
        """Pages the daemon lets this engine keep in its host tier (0: no
        tier: none asked for, or a daemon older than ABI 1.4)."""
        return self._lib.md_client_tier_budget(self._c)

    def tier_pages(self):
        """Pages in the host tier now."""
        return self._lib.md_client_tier_pages(self._c)

    def seq_tier_pages(self, seq):
        """seq's tier slots, first position ascending."""
        n = self._check(self._lib.md_seq_tier_pages(self._c, seq, None, 0),
                        "tier pages of %d" % seq)
        buf = (ctypes.c_uint32 * max(n, 1))()
        n = self._check(self._lib.md_seq_tier_pages(self._c, seq, buf, n),
                        "tier pages of %d" % seq)
        return list(buf[:n])

    def publish_estimates(self, batch, n_pages, refresh=True):
        """The estimated attention of tier pages: batch's first n_pages
        (slot, mass, refresh) entries as ATTN_PAGE records flagged estimates
        (slots not in the tier are skipped).  Returns the batch's result, as
        publish."""
        if not 0 <= n_pages <= batch.capacity:
            raise ValueError("n_pages %d outside 0..%d" % (n_pages, batch.capacity))
        self._check(self._lib.md_publish_estimates(
            self._c, batch._slots, batch._mass, batch._refresh if refresh else None, n_pages,
            ctypes.byref(batch.result)), "publish estimates for %d pages" % n_pages)
        return batch.result

    def settle_recall(self, timeout_ms=20, apply=None):
        """At the end of a prefill: applies commands through apply (restores
        among them) until the daemon has consumed and decided on every record
        published so far, for at most timeout_ms (md_settle_recall).  Returns
        a SettleResult (OK, TIMEOUT or DETACHED: go on without the recall)."""
        if apply is None:
            raise ValueError("settle_recall needs apply, the engine's way to apply a command")
        res = _SettleResult()
        cb, err = self._callback(apply)
        rc = self._lib.md_settle_recall(self._c, int(timeout_ms), cb, None, ctypes.byref(res))
        self._after_callback(rc, err, "wait for the recall decision")
        return SettleResult(Settle(res.outcome), res.applied, bool(res.waited), res.wait_ns)

    def maintain(self, heartbeat_timeout_ms=0, retry_ms=0):
        """At every step boundary: checks the daemon and, detached, tries to
        reattach (at most every retry_ms, 0: 1000, backing off to 2 s),
        republishing every page and every sequence's options.  True while
        attached."""
        return bool(self._lib.md_client_maintain(self._c, heartbeat_timeout_ms, retry_ms))

    @staticmethod
    def _callback(fn):
        """A C callback around fn: an exception never unwinds through C, it
        is kept and raised after the call (the C side sees -1 and stops)."""
        err = []

        def cb(_ctx, evp):
            if err:
                return -1
            try:
                r = fn(_Evict.from_buffer_copy(evp.contents))
                # KEPT_IN_TIER as itself, anything else as a truth value
                return KEPT_IN_TIER if r == KEPT_IN_TIER else (1 if r else 0)
            except BaseException as e:   # noqa: B902 (re-raised after the C call)
                err.append(e)
                return -1
        return APPLY_FN(cb), err

    def _after_callback(self, rc, err, what):
        if err:
            raise err[0]
        return self._check(rc, what)

