"""Worker: the attachments to memdecayd, their liveness and reattach.

Requests that share a budget and policy share one attachment ("class"): the
daemon's budgets and policy are per engine, so a request's own budget
(memdecay_budget_tokens) is its class's per-sequence budget.  The default
class is attached at start-up under the engine name (MEMDECAY_VLLM_ENGINE).

Fail-open: a detached attachment evicts nothing; the log says once that the
daemon is gone (whichever attachment notices first) and once that it is back,
and each attachment tries the socket again every reattach_ms.  A heartbeat
thread keeps an idle server attached."""
import threading
import time

import memdecay

PAGE_TOKENS = memdecay.PAGE_TOKENS_MAX


def _log():
    from vllm.logger import init_logger
    return init_logger("vllm.memdecay")


class Attachment:
    """One attachment to memdecayd, for the requests of one (budget, policy)."""

    def __init__(self, s, budget, policy, name, page_capacity, max_seqs):
        self.key = (budget, policy)
        self.name = name
        self.budget = budget
        self.client = memdecay.Client(
            socket_path=s.socket, engine_name=name, page_tokens=PAGE_TOKENS,
            page_capacity=page_capacity, max_seqs=max_seqs, policy=policy,
            budget_sequence_tokens=budget if budget and budget > 0 else -1,
            library=s.library)
        self.batch = self.client.batch()
        self.free_seqs = list(range(max_seqs - 1, -1, -1))
        self.owner = {}            # slot -> (req, page index, gen)
        self.sibling_freed = set()  # (slot, gen) freed with a commanded page of their block
        self.was_attached = self.client.attached
        # whether the daemon may evict this class's pages (a budget of its own, the
        # daemon's per-sequence or engine budget), read every step: statistics are
        # computed only for requests it may evict
        self.may_evict = True
        self.next_reattach = 0.0


class Attachments:
    """The worker's attachments by (budget, policy), the default one first."""

    def __init__(self, s, page_capacity, max_seqs):
        self.s = s
        self.page_capacity = page_capacity
        self.max_seqs = max_seqs
        self.by_key = {}
        self.daemon_lost = False
        self.default = self.get(s.budget_tokens, s.policy, ())
        c = self.default.client
        if not c.attached:
            self.daemon_lost = True
            _log().warning("memdecay_vllm: memdecayd is not reachable (%s): vLLM serves without "
                           "eviction until it is", c.last_error or "no daemon")

    def all(self):
        return list(self.by_key.values())

    def get(self, budget, policy, busy):
        """The attachment of (budget, policy), made if need be; None when
        max_classes exist and every other one serves a request (busy: the
        attachments in use)."""
        key = (budget, policy)
        k = self.by_key.get(key)
        if k is not None:
            return k
        if len(self.by_key) >= self.s.max_classes:
            idle = [c for c in self.by_key.values() if c not in busy and c is not self.default]
            if not idle:
                return None
            idle[0].client.close()          # its engine leaves memdecayd
            del self.by_key[idle[0].key]
        name = self.s.engine_name
        if self.by_key:
            name += "/b%d" % budget if budget and budget > 0 else ""
            name += "/%s" % policy if policy else ""
        k = Attachment(self.s, budget, policy, name, self.page_capacity, self.max_seqs)
        self.by_key[key] = k
        return k

    def liveness(self, k, now):
        """True while attached; reattaches a detached attachment at most every
        reattach_ms."""
        c = k.client
        if c.attached and c.check():
            k.was_attached = True
            self._state(True, k)
            return True
        if k.was_attached:
            k.was_attached = False
            self._state(False, k)
        if now >= k.next_reattach:
            k.next_reattach = now + self.s.reattach_ms / 1000.0
            if c.reattach() and c.check():
                k.was_attached = True
                self._state(True, k)
                return True
        return False

    def _state(self, up, k):
        if up == (not self.daemon_lost):
            return
        self.daemon_lost = not up
        if up:
            _log().warning("memdecay_vllm: reattached to memdecayd at %s (engine %d, %s)",
                           k.client.socket_path, k.client.engine_id, k.name)
        else:
            _log().warning("memdecay_vllm: lost memdecayd (%s): serving without eviction, "
                           "reattaching every %d ms", k.client.last_error or "detached",
                           self.s.reattach_ms)

    def start_heartbeat(self, lock, last_step):
        """A thread that checks every attachment while no step has run for half a
        second (last_step(): the monotonic time of the last one), under lock."""
        def run():
            period = 0.5
            while True:
                time.sleep(period)
                if time.monotonic() - last_step() < period:
                    continue
                if not lock.acquire(blocking=False):
                    continue
                try:
                    now = time.monotonic()
                    for k in self.all():
                        self.liveness(k, now)
                except Exception as e:   # never take the worker down
                    _log().warning("memdecay_vllm: heartbeat: %s", e)
                finally:
                    lock.release()
        threading.Thread(target=run, name="memdecay-heartbeat", daemon=True).start()
