"""The plugin's switches, read from the environment (docs/vllm.md, "Switching it on").

vLLM starts its engine core and its workers as new processes that inherit the
environment, so one place configures all of them."""
import os

ENV_ON = "MEMDECAY_VLLM"


def _int(name, default):
    v = os.environ.get(name, "")
    if v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError("%s=%r is not an integer" % (name, v)) from None


def _float(name, default):
    v = os.environ.get(name, "")
    if v == "":
        return default
    try:
        x = float(v)
    except ValueError:
        x = float("nan")
    if not x == x or x in (float("inf"), float("-inf")):
        raise ValueError("%s=%r is not a finite number" % (name, v))
    return x


def _choice(name, default, allowed):
    v = os.environ.get(name, "").strip().lower() or default
    if v not in allowed:
        raise ValueError("%s=%r: want one of %s" % (name, v, ", ".join(allowed)))
    return v


# hooks a test may make raise (MEMDECAY_VLLM_TEST_FAULT), to show they fail open: the
# worker's (track ... step_end, sessions: its session events) and the engine core's
# (scheduler: evicted blocks; cache: the prefix-cache guard; retain, match, adopt,
# expire: the session store's wrappers)
FAULT_POINTS = ("track", "update", "build", "forward", "step_end", "sessions",
                "scheduler", "cache", "retain", "match", "adopt", "expire")


def _writable(name):
    """A file the plugin appends to: refused at start-up when it cannot be opened."""
    v = os.environ.get(name) or None
    if v is None:
        return None
    try:
        with open(v, "a"):
            pass
    except OSError as e:
        raise ValueError("%s=%r: cannot append to it: %s" % (name, v, e.strerror)) from None
    return v


class Settings:
    def __init__(self):
        self.enabled = os.environ.get(ENV_ON, "").lower() in ("1", "on", "yes", "true")
        self.socket = os.environ.get("MEMDECAY_SOCKET") or None
        self.engine_name = os.environ.get("MEMDECAY_VLLM_ENGINE", "vllm")
        self.layer_stride = max(1, _int("MEMDECAY_VLLM_LAYER_STRIDE", 8))
        self.prefill_queries = max(1, _int("MEMDECAY_VLLM_PREFILL_QUERIES", 4))
        self.budget_tokens = _int("MEMDECAY_VLLM_BUDGET_TOKENS", -1)
        self.policy = os.environ.get("MEMDECAY_VLLM_POLICY") or None
        self.settle_ms = max(0, _int("MEMDECAY_VLLM_SETTLE_MS", 200))
        self.reattach_ms = max(100, _int("MEMDECAY_VLLM_REATTACH_MS", 1000))
        self.trace = _writable("MEMDECAY_VLLM_TRACE")
        self.library = os.environ.get("MEMDECAY_LIBRARY") or None
        # every N steps one log line of the hooks' cost (0 or less: the default)
        self.cost_every = _int("MEMDECAY_VLLM_COST_EVERY", 0)
        if self.cost_every <= 0:
            self.cost_every = 2000
        # what a request may pin (docs/vllm.md "Bad requests"): at most this many tokens
        # (-1: no absolute cap) and at most this share of its budget
        self.max_pinned_tokens = _int("MEMDECAY_VLLM_MAX_PINNED_TOKENS", -1)
        self.max_pinned_share = _float("MEMDECAY_VLLM_MAX_PINNED_SHARE", 1.0)
        if self.max_pinned_share < 0:
            raise ValueError("MEMDECAY_VLLM_MAX_PINNED_SHARE=%r: want a share >= 0"
                             % os.environ.get("MEMDECAY_VLLM_MAX_PINNED_SHARE"))
        # whether a client may send its own memdecay_regions run-length list
        self.client_regions = _choice("MEMDECAY_VLLM_CLIENT_REGIONS", "allow", ("allow", "deny"))
        # sessions (sessions.py, docs/vllm.md "Sessions")
        self.sessions = _choice("MEMDECAY_VLLM_SESSIONS", "on", ("on", "off")) == "on"
        self.session_ids = _choice("MEMDECAY_VLLM_SESSION_IDS", "any", ("any", "require"))
        self.session_share = _float("MEMDECAY_VLLM_SESSION_SHARE", 0.5)
        if not 0 <= self.session_share <= 1:
            raise ValueError("MEMDECAY_VLLM_SESSION_SHARE=%r: want a share from 0 to 1"
                             % os.environ.get("MEMDECAY_VLLM_SESSION_SHARE"))
        self.session_ttl_s = _float("MEMDECAY_VLLM_SESSION_TTL_S", 600.0)
        # pool mode (docs/vllm.md "Pool mode"): memdecayd manages vLLM's whole KV pool
        self.pool = _choice("MEMDECAY_VLLM_POOL", "off", ("on", "off")) == "on"
        self.pool_watermark = _float("MEMDECAY_VLLM_POOL_WATERMARK", 0.9)
        if not 0 < self.pool_watermark <= 1:
            raise ValueError("MEMDECAY_VLLM_POOL_WATERMARK=%r: want a share of the pool in (0, 1]"
                             % os.environ.get("MEMDECAY_VLLM_POOL_WATERMARK"))
        self.pool_idle_tokens_s = _float("MEMDECAY_VLLM_POOL_IDLE_TOKENS_S", 16.0)
        if self.pool_idle_tokens_s < 0:
            raise ValueError("MEMDECAY_VLLM_POOL_IDLE_TOKENS_S=%r: want a rate >= 0"
                             % os.environ.get("MEMDECAY_VLLM_POOL_IDLE_TOKENS_S"))
        self.pool_hold_steps = _int("MEMDECAY_VLLM_POOL_HOLD_STEPS", 8)
        if self.pool_hold_steps < 0:
            raise ValueError("MEMDECAY_VLLM_POOL_HOLD_STEPS=%r: want a count >= 0"
                             % os.environ.get("MEMDECAY_VLLM_POOL_HOLD_STEPS"))
        # the host tier (tier.py, docs/vllm.md "Host tier and recall"): MiB of evicted
        # blocks kept in host memory (0: none), the tier scored every N decoded tokens,
        # the bounded wait for recall decisions at a prefill's end, spare blocks the
        # engine core allocates ahead for restores
        self.tier_mb = _float("MEMDECAY_VLLM_TIER_MB", 0.0)
        if self.tier_mb < 0:
            raise ValueError("MEMDECAY_VLLM_TIER_MB=%r: want MiB >= 0 (0: no tier)"
                             % os.environ.get("MEMDECAY_VLLM_TIER_MB"))
        self.recall_every = _int("MEMDECAY_VLLM_RECALL_EVERY", 16)
        if self.recall_every < 1:
            raise ValueError("MEMDECAY_VLLM_RECALL_EVERY=%r: want a count of tokens >= 1"
                             % os.environ.get("MEMDECAY_VLLM_RECALL_EVERY"))
        self.recall_wait_ms = _int("MEMDECAY_VLLM_RECALL_WAIT_MS", 50)
        if not 0 <= self.recall_wait_ms <= 10000:
            raise ValueError("MEMDECAY_VLLM_RECALL_WAIT_MS=%r: want milliseconds in 0..10000"
                             % os.environ.get("MEMDECAY_VLLM_RECALL_WAIT_MS"))
        self.tier_spares = _int("MEMDECAY_VLLM_TIER_SPARES", 4)
        if not 1 <= self.tier_spares <= 256:
            raise ValueError("MEMDECAY_VLLM_TIER_SPARES=%r: want a count of blocks in 1..256"
                             % os.environ.get("MEMDECAY_VLLM_TIER_SPARES"))
        # daemon sequences a worker may hold: pool mode tracks every request and every
        # retained session, so it asks room for both by default
        self.max_seqs = max(1, _int("MEMDECAY_VLLM_MAX_SEQS", 256 if self.pool else 64))
        # tests only: a JSON Lines file where each worker counts the null blocks left in
        # the attention metadata it hands to vLLM's kernel (worker.py, Audit)
        self.test_audit = _writable("MEMDECAY_VLLM_TEST_AUDIT")
        faults = os.environ.get("MEMDECAY_VLLM_TEST_FAULT", "")
        self.test_faults = {f.strip() for f in faults.split(",") if f.strip()}
        bad = self.test_faults - set(FAULT_POINTS)
        if bad:
            raise ValueError("MEMDECAY_VLLM_TEST_FAULT=%r: unknown hook %s (known: %s)"
                             % (faults, ", ".join(sorted(bad)), ", ".join(FAULT_POINTS)))


_settings = None


def fault(point):
    """Raises where a test asked for it (MEMDECAY_VLLM_TEST_FAULT, FAULT_POINTS)."""
    if point in get().test_faults:
        raise RuntimeError("memdecay_vllm: injected fault in %s (MEMDECAY_VLLM_TEST_FAULT)"
                           % point)


def get():
    global _settings
    if _settings is None:
        _settings = Settings()
    return _settings
