"""Worker: the worker's one attachment to memdecayd, and staying attached.

Each vLLM worker attaches once, under the engine name (MEMDECAY_VLLM_ENGINE),
with the engine's default policy and per-sequence budget
(MEMDECAY_VLLM_POLICY, MEMDECAY_VLLM_BUDGET_TOKENS) and, in pool mode, the
engine page budget derived from vLLM's KV pool (pool.py).  A request's own budget
and policy are its sequence's options (mirror.py), not another attachment.

Fail-open: detached, the worker evicts nothing and vLLM serves as it would
without the plugin.  `live` runs libmemdecay's maintain at every step boundary
(and from a heartbeat thread while the server is idle): it checks the daemon
and, detached, reattaches at most every reattach_ms, republishing every live
page and every sequence's options.  The log says once that the daemon is gone
and once that it is back."""
import threading
import time

import memdecay

from .log import logger as _log
from .mirror import PAGE_TOKENS


class Attachment:
    def __init__(self, s, page_capacity, max_seqs, engine_pages=-1, tier_pages=0, page_bytes=0):
        """engine_pages: the engine page budget asked in HELLO (pool mode: the
        share of vLLM's pool below the watermark); -1: the daemon's setting.
        tier_pages, page_bytes: the host tier's capacity and a tier page's
        bytes (tier.py: a tier page stands for its block)."""
        self.s = s
        self.name = s.engine_name
        budget = s.budget_tokens
        self.client = memdecay.Client(
            socket_path=s.socket, engine_name=self.name, page_tokens=PAGE_TOKENS,
            page_capacity=page_capacity, max_seqs=max_seqs, policy=s.policy,
            budget_sequence_tokens=budget if budget and budget > 0 else -1,
            budget_engine_pages=engine_pages, library=s.library, tier_pages=tier_pages,
            page_bytes=page_bytes)
        self.batch = self.client.batch()
        c = self.client
        self.up = c.attached
        if self.up:
            _log().info("memdecay_vllm: attached to memdecayd at %s as engine %d (%s)",
                        c.socket_path, c.engine_id, self.name)
        else:
            _log().warning("memdecay_vllm: memdecayd is not reachable (%s): vLLM serves without "
                           "eviction until it is", c.last_error or "no daemon")

    def live(self):
        """At a step boundary: True while attached (libmemdecay's maintain checks
        the daemon and reattaches at most every reattach_ms)."""
        c = self.client
        up = c.maintain(0, self.s.reattach_ms)
        if up != self.up:
            self.up = up
            if up:
                _log().warning("memdecay_vllm: reattached to memdecayd at %s (engine %d, %s)",
                               c.socket_path, c.engine_id, self.name)
            else:
                _log().warning("memdecay_vllm: lost memdecayd (%s): serving without eviction, "
                               "reattaching every %d ms", c.last_error or "detached",
                               self.s.reattach_ms)
        return up

    def start_heartbeat(self, lock, last_step):
        """A thread that keeps an idle server attached: `live` whenever no step
        has run for half a second (last_step(): the monotonic time of the last
        one), under lock."""
        def run():
            period = 0.5
            while True:
                time.sleep(period)
                if time.monotonic() - last_step() < period:
                    continue
                if not lock.acquire(blocking=False):
                    continue
                try:
                    self.live()
                except Exception as e:   # never take the worker down
                    _log().warning("memdecay_vllm: heartbeat: %s", e)
                finally:
                    lock.release()
        threading.Thread(target=run, name="memdecay-heartbeat", daemon=True).start()
