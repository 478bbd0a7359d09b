"""A request's MemDecay fields, checked where the client can be told.

Every `memdecay_*` field of a request is checked in the process that can still
answer the client: the API server (api.py turns a FieldError into a 400 that
names the field, the value and what is allowed) and the offline helpers
(offline.py raises it before anything runs).  docs/vllm.md "Bad requests" lists
what each field accepts.  The engine only ever sees fields that passed here,
and still fails open on anything it cannot use (worker.py).

What the daemon decides, the checks ask the daemon: the policy names are its
policy table and the pinned regions its parameters (`memdecayctl policy`,
`memdecayctl get`), read over the control socket by a background thread and
cached (DaemonView), so a request never waits on the daemon.  While no daemon
has answered, a policy name is only checked for its form and system is taken
as the one pinned region (the daemon's default)."""
import json
import secrets
import threading
import time

import memdecay
from memdecay import Region, checks
from memdecay.regions import REGION_NAMES

from . import regions, settings

PREFIX = "memdecay_"
# the API server's own region labels carry this process's nonce, so that a client's
# memdecay_regions can be told from them when MEMDECAY_VLLM_CLIENT_REGIONS=deny
LABEL_KEY = "memdecay_labelled_by"
NONCE = secrets.token_hex(16)
KNOWN = (regions.BUDGET_KEY, regions.POLICY_KEY, regions.REGIONS_KEY, LABEL_KEY)
ID_MAX = 256                                                # sessions.py's
REGION_IDS = {int(r): r.name.lower() for r in Region}


class FieldError(ValueError):
    """A request field the server refuses: `field` names it, the message says
    what was sent and what is allowed."""

    def __init__(self, field, msg):
        super().__init__(msg)
        self.field = field


class DaemonView:
    """The daemon's policy table and pinned regions, refreshed every `period`
    seconds by a thread of its own; `snapshot()` never blocks past the first call
    (one bounded request then)."""

    def __init__(self, socket_path=None, library=None, period=2.0, timeout_ms=300):
        self.socket_path = socket_path
        self.library = library
        self.period = period
        self.timeout_ms = timeout_ms
        self.policies = None           # None: no daemon has answered yet
        self.default_policy = None
        self.pinned = {int(Region.SYSTEM)}
        self._lock = threading.Lock()
        self._thread = None

    def _fetch(self):
        try:
            pol = json.loads(memdecay.control("policy --json", self.socket_path, self.timeout_ms,
                                              1 << 16, self.library))
            keys = json.loads(memdecay.control("get --json", self.socket_path, self.timeout_ms,
                                               1 << 16, self.library))
        except (OSError, ValueError):
            return False
        pinned = {int(r) for name, r in REGION_NAMES.items()
                  if keys.get("memdecay.region.%s.pinned" % name) is True}
        with self._lock:
            self.policies = tuple(pol.get("policies") or ())
            self.default_policy = pol.get("policy")
            self.pinned = pinned
        return True

    def _run(self):
        while True:
            time.sleep(self.period)
            self._fetch()

    def snapshot(self):
        """(policy names or None, pinned region ids)."""
        if self._thread is None:
            self._fetch()
            self._thread = threading.Thread(target=self._run, name="memdecay-daemon-view",
                                            daemon=True)
            self._thread.start()
        with self._lock:
            return self.policies, frozenset(self.pinned)


_view = None


def daemon_view():
    global _view
    if _view is None:
        s = settings.get()
        _view = DaemonView(s.socket, s.library)
    return _view


def _budget(v):
    if v is None:
        return None
    try:
        return checks.budget_tokens(v, regions.BUDGET_KEY)
    except ValueError as e:
        raise FieldError(regions.BUDGET_KEY, "%s (leave it out for the server's default)"
                         % e) from None


def _policy(v, known):
    if v is None:
        return None
    try:
        return checks.policy(v, regions.POLICY_KEY, known)
    except ValueError as e:
        raise FieldError(regions.POLICY_KEY, str(e)) from None


def _regions(runs, n_prompt):
    """The run-length list, checked whole: [region, count, ...], region one of
    the built-in ids, every count >= 1, the counts summing to the prompt's
    length exactly.  Returns the per-token list."""
    key = regions.REGIONS_KEY
    names = ", ".join("%d (%s)" % kv for kv in REGION_IDS.items())
    if not isinstance(runs, (list, tuple)) or not runs or len(runs) % 2:
        raise FieldError(key, "%s=%s: want a flat list of [region, count] pairs covering the "
                         "prompt's %d tokens" % (key, checks.show(runs), n_prompt))
    if len(runs) > 2 * n_prompt:
        raise FieldError(key, "%s: %d runs for a prompt of %d tokens (a run holds at least one "
                         "token)" % (key, len(runs) // 2, n_prompt))
    out = []
    for k in range(0, len(runs), 2):
        r, n = runs[k], runs[k + 1]
        if isinstance(r, bool) or not isinstance(r, int) or r not in REGION_IDS:
            raise FieldError(key, "%s: run %d has region %s; regions are %s"
                             % (key, k // 2, checks.show(r), names))
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise FieldError(key, "%s: run %d has count %s; want an integer >= 1"
                             % (key, k // 2, checks.show(n)))
        if len(out) + n > n_prompt:
            break
        out.extend([r] * n)
    total = sum(c for c in runs[1::2] if isinstance(c, int))
    if len(out) != n_prompt or total != n_prompt:
        raise FieldError(key, "%s: the runs cover %d tokens; the prompt has %d"
                         % (key, total, n_prompt))
    return out


def check_session_id(v, field="session_id"):
    """vLLM's session id (the body's session_id, X-Session-ID, vllm_xargs.session_id)
    names a MemDecay session (sessions.py): a non-empty string of at most ID_MAX
    characters."""
    if v is None:
        return
    if not isinstance(v, str) or not 0 < len(v) <= ID_MAX:
        raise FieldError(field, "%s=%s: want a non-empty string of at most %d characters"
                         % (field, checks.show(v), ID_MAX))


def pinned_cap(budget, s=None):
    """The most tokens a request of this effective budget may pin, or None."""
    s = s or settings.get()
    caps = []
    if s.max_pinned_tokens >= 0:
        caps.append(s.max_pinned_tokens)
    if budget is not None and budget > 0:
        caps.append(int(s.max_pinned_share * budget))
    return min(caps) if caps else None


def check(args, n_prompt, labelled_here=False, view=None, s=None):
    """Checks a request's extra arguments (vllm_xargs / SamplingParams.extra_args)
    against a prompt of n_prompt tokens; raises FieldError.  labelled_here: its
    memdecay_regions were made by this server from the messages, not sent by
    the client.  Returns the per-token regions (None when the request has none)."""
    s = s or settings.get()
    if args is None:
        return None
    if not isinstance(args, dict):
        raise FieldError("vllm_xargs", "vllm_xargs must be an object")
    for key in args:
        if isinstance(key, str) and key.startswith(PREFIX) and key not in KNOWN:
            raise FieldError(key, "unknown field %s (MemDecay's fields: %s)"
                             % (checks.show(key), ", ".join(KNOWN[:3])))
    if "session_id" in args:
        check_session_id(args["session_id"], "vllm_xargs.session_id")
    view = view or daemon_view()
    known, pinned = view.snapshot()
    budget = _budget(args.get(regions.BUDGET_KEY))
    _policy(args.get(regions.POLICY_KEY), known)
    runs = args.get(regions.REGIONS_KEY)
    if runs is None:
        return None
    if (not labelled_here and args.get(LABEL_KEY) != NONCE
            and s.client_regions == "deny"):
        raise FieldError(regions.REGIONS_KEY,
                         "%s: this server labels regions itself from the messages "
                         "(MEMDECAY_VLLM_CLIENT_REGIONS=deny); give a message a \"region\" "
                         "key instead" % regions.REGIONS_KEY)
    reg = _regions(runs, n_prompt)
    budget = budget if budget is not None else s.budget_tokens
    cap = pinned_cap(budget, s)
    if cap is not None:
        n_pinned = sum(1 for r in reg if r in pinned)
        if n_pinned > cap:
            why = []
            if s.max_pinned_tokens >= 0:
                why.append("MEMDECAY_VLLM_MAX_PINNED_TOKENS=%d" % s.max_pinned_tokens)
            if budget is not None and budget > 0:
                why.append("MEMDECAY_VLLM_MAX_PINNED_SHARE=%g of its budget of %d tokens"
                           % (s.max_pinned_share, budget))
            field = "messages" if labelled_here else regions.REGIONS_KEY
            raise FieldError(field, "%s: the request pins %d tokens (pinned regions: %s) and the "
                             "server allows at most %d pinned tokens a request (%s)"
                             % (field, n_pinned,
                                ", ".join(REGION_IDS[r] for r in sorted(pinned)), cap,
                                "; ".join(why)))
    return reg
