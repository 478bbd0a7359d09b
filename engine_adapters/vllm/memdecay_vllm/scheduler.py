"""Engine core: memdecayd's evictions become free blocks in vLLM's pool.

The worker decides nothing either: it relays the daemon's commands as
(request id, block index) pairs on the step's ModelRunnerOutput
(`memdecay_evicted`).  Before vLLM's own update_from_output runs, each such
block of a still-running request is replaced by vLLM's null block in the
request's block list and freed to the pool, the way vLLM itself drops the
middle of a sliding window: through that very method,
SingleTypeKVCacheManager._remove_blocks_in_range.
The request's block count, and with it vLLM's token arithmetic, stay as they
were; only the memory goes back.

Prefix caching: a block computed after a request's first eviction holds keys
and values of a context with holes, so from then on none of the request's
blocks is entered in the prefix cache.  Blocks cached before stay valid, the
evicted ones included (their contents are what the prefix computes)."""
import functools
import json
import os
import time

from . import settings

EVICTED_ATTR = "memdecay_evicted"
_FLAG = "_memdecay_evicted"


def _managers(scheduler):
    return scheduler.kv_cache_manager.coordinator.single_type_managers


def free_evicted(scheduler, evicted):
    """Frees the (request id, block index) pairs; returns how many blocks went back."""
    by_id = scheduler.requests
    store = getattr(scheduler.kv_cache_manager, "_memdecay_store", None)
    n = 0
    for req_id, idx in evicted:
        req = by_id.get(req_id)
        if req is None or req.is_finished():
            if store is not None:       # a retained session's block (sessions.py)
                n += store.apply_evicted(req_id, idx)
            continue
        setattr(req, _FLAG, True)
        for mgr in _managers(scheduler):
            blocks = mgr.req_to_blocks.get(req_id)
            if blocks is None or not 0 <= idx < len(blocks) - 1:
                continue            # the block being written is never freed
            if blocks[idx].is_null:
                continue
            mgr._remove_blocks_in_range(req_id, idx, idx + 1)   # null block in, block freed
            n += 1
    return n


def held_blocks(scheduler, req_id):
    """(blocks held, holes) of a request in vLLM's own block lists."""
    held = holes = 0
    for mgr in _managers(scheduler):
        for b in mgr.req_to_blocks.get(req_id, ()):
            if b.is_null:
                holes += 1
            else:
                held += 1
    return held, holes


class _Trace:
    """One JSON line per running request and step: vLLM's block accounting."""

    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.step = 0

    def write(self, scheduler, freed):
        self.step += 1
        pool = scheduler.kv_cache_manager.block_pool
        for req in scheduler.running:
            held, holes = held_blocks(scheduler, req.request_id)
            self.f.write(json.dumps({"pid": os.getpid(), "step": self.step, "t": time.time(),
                                     "req": req.request_id, "held": held, "holes": holes,
                                     "tokens": req.num_computed_tokens, "freed": freed,
                                     "pool_free": pool.get_num_free_blocks()}) + "\n")


_failures = {"n": 0}


def _failed(err):
    _failures["n"] += 1
    n = _failures["n"]
    if n & (n - 1) == 0:            # the 1st, 2nd, 4th, 8th ... time: the log stays short
        from vllm.logger import init_logger
        init_logger("vllm.memdecay").warning(
            "memdecay_vllm: returning evicted blocks to vLLM's pool failed (%d times so far; "
            "they are freed with their requests): %s: %s", n, type(err).__name__, err)


def install():
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import SingleTypeKVCacheManager

    if getattr(Scheduler.update_from_output, "_memdecay", False):
        return
    orig_update = Scheduler.update_from_output
    orig_cache = SingleTypeKVCacheManager.cache_blocks
    trace_path = settings.get().trace

    faults = settings.get().test_faults

    @functools.wraps(orig_update)
    def update_from_output(self, scheduler_output, model_runner_output):
        try:
            if "scheduler" in faults:
                raise RuntimeError("memdecay_vllm: injected fault in scheduler "
                                   "(MEMDECAY_VLLM_TEST_FAULT)")
            evicted = getattr(model_runner_output, EVICTED_ATTR, None)
            freed = free_evicted(self, evicted) if evicted else 0
            if trace_path:
                if not hasattr(self, "_memdecay_trace"):
                    self._memdecay_trace = _Trace(trace_path)
                self._memdecay_trace.write(self, freed)
        except Exception as e:
            # the worker already reads these blocks as holes; vLLM frees them with
            # their request.  Counted and logged, never raised into the engine core.
            _failed(e)
        return orig_update(self, scheduler_output, model_runner_output)

    @functools.wraps(orig_cache)
    def cache_blocks(self, request, *args, **kwargs):
        if getattr(request, _FLAG, False):
            return None
        return orig_cache(self, request, *args, **kwargs)

    update_from_output._memdecay = True
    Scheduler.update_from_output = update_from_output
    SingleTypeKVCacheManager.cache_blocks = cache_blocks
