"""Drives vLLM's real engine-core Scheduler in-process, with no model.

`Driver` builds vLLM's own `vllm.v1.core.sched.scheduler.Scheduler` (its
real KVCacheManager and BlockPool, one full-attention KV cache group, fp32)
from a VllmConfig made from the local HF model's config.json only (no
tokenizer, no weights, no workers), and steps it the way EngineCore.step does:
schedule(), a synthetic ModelRunnerOutput shaped like the model runner's, then
update_from_output().  Tests of the MemDecay plugin (which patches Scheduler
and KVCacheManager methods) use it to check block accounting step by step:
`check_refcounts()` recounts every block's references independently.

Model dir: env MEMDECAY_VLLM_MODEL, else .deps/models/smollm2-hf; when it has
no config.json yet, a tiny Llama config.json in a temporary dir stands in (the
scheduler only reads max_model_len and the KV head shape from it).

Run it directly for a self-test (plain vLLM: keep MEMDECAY_VLLM unset):
    .deps/vllm/bin/python engine_adapters/vllm/tests/core_driver.py
"""
import collections
import copy
import json
import os
import sys
import tempfile
from pathlib import Path

if __name__ == "__main__":
    os.environ.pop("MEMDECAY_VLLM", None)     # the self-test runs plain vLLM

import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import (get_request_block_hasher, init_none_hash,
                                         resolve_kv_cache_block_sizes)
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

ROOT = Path(__file__).resolve().parents[3]
TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 49152,
               "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
               "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}


_tiny_dir = []


def model_dir():
    """The model dir to read config.json from (see the module docstring)."""
    d = Path(os.environ.get("MEMDECAY_VLLM_MODEL") or ROOT / ".deps/models/smollm2-hf")
    if (d / "config.json").is_file():
        return str(d)
    if not _tiny_dir:
        _tiny_dir.append(tempfile.mkdtemp(prefix="core_driver_model_"))
        (Path(_tiny_dir[0]) / "config.json").write_text(json.dumps(TINY_CONFIG))
    return _tiny_dir[0]


class Driver:
    def __init__(self, num_blocks, block_size=32, max_num_seqs=8, max_num_batched_tokens=64,
                 max_model_len=2048, enable_prefix_caching=True, model=None, load_plugins=True,
                 adjust=None):
        if load_plugins:      # as EngineCore.__init__ does (the MemDecay plugin: MEMDECAY_VLLM=1)
            from vllm.plugins import load_general_plugins
            load_general_plugins()
        mc = ModelConfig(model=model or model_dir(), skip_tokenizer_init=True,
                         max_model_len=max_model_len, dtype="float32")
        cc = CacheConfig(block_size=block_size, enable_prefix_caching=enable_prefix_caching)
        sc = SchedulerConfig(max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=max_num_batched_tokens,
                             max_model_len=max_model_len, is_encoder_decoder=False,
                             enable_chunked_prefill=True, async_scheduling=False)
        self.config = vc = VllmConfig(model_config=mc, cache_config=cc, scheduler_config=sc)
        # What EngineCore._initialize_kv_caches settles after profiling:
        vc.cache_config.block_size = block_size
        vc.cache_config.num_gpu_blocks = num_blocks
        sc = vc.scheduler_config
        assert sc.enable_chunked_prefill and not sc.async_scheduling, "CPU platform changed them"
        if adjust is not None:      # a test's change to the final config (test_hooks.py)
            adjust(vc)
        layers = ["model.layers.%d.self_attn.attn" % i
                  for i in range(mc.get_num_layers(vc.parallel_config))]
        spec = FullAttentionSpec(block_size=block_size, dtype=torch.float32,
                                 num_kv_heads=mc.get_num_kv_heads(vc.parallel_config),
                                 head_size=mc.get_head_size())
        self.kv_cache_config = kcc = KVCacheConfig(
            num_blocks=num_blocks, kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(layers, spec)])
        sched_bs, hash_bs = resolve_kv_cache_block_sizes(kcc, vc)
        kcc.hash_block_size = hash_bs
        self.scheduler = Scheduler(vllm_config=vc, kv_cache_config=kcc,
                                   structured_output_manager=StructuredOutputManager(vc),
                                   block_size=sched_bs, hash_block_size=hash_bs, log_stats=True)
        self.kv = self.scheduler.kv_cache_manager
        self.pool = self.kv.block_pool
        # The engine core's block hasher (EngineCore.__init__).
        self.block_hasher = None
        if enable_prefix_caching:
            hash_fn = get_hash_fn_by_name(vc.cache_config.prefix_caching_hash_algo)
            init_none_hash(hash_fn)
            self.block_hasher = get_request_block_hasher(hash_bs, hash_fn)
        self.steps = 0
        self.requests = {}       # req_id -> Request, kept after it finishes
        self.cached_tokens = {}  # req_id -> prefill_stats.num_cached_tokens

    # ---- requests -----------------------------------------------------------------
    def add(self, req_id, prompt_token_ids, max_tokens, *, session_id=None, cache_salt=None,
            extra_args=None, stop_token_ids=None, lora_request=None, n=1):
        """Adds a request; n > 1 fans out into child requests "<i>_<req_id>" as the
        frontend does (vLLM refuses n > 1 with temperature 0, so those sample at 1.0).
        Returns the request ids added."""
        params = SamplingParams(n=n, temperature=0.0 if n == 1 else 1.0, max_tokens=max_tokens,
                                stop_token_ids=stop_token_ids,
                                extra_args=dict(extra_args) if extra_args else None)
        ids = [req_id] if n == 1 else ["%d_%s" % (i, req_id) for i in range(n)]
        for rid in ids:
            p = params if n == 1 else copy.copy(params)
            p.n = 1
            r = Request(request_id=rid, prompt_token_ids=list(prompt_token_ids),
                        sampling_params=p, pooling_params=None, lora_request=lora_request,
                        cache_salt=cache_salt, session_id=session_id,
                        block_hasher=self.block_hasher)
            self.requests[rid] = r
            self.scheduler.add_request(r)
        return ids

    def abort(self, req_ids):
        """EngineCore.abort_requests."""
        ids = [req_ids] if isinstance(req_ids, str) else list(req_ids)
        return self.scheduler.finish_requests(ids, RequestStatus.FINISHED_ABORTED)

    def finish_status(self, req_id):
        """The request's RequestStatus once finished, else None."""
        r = self.requests.get(req_id)
        return r.status if r is not None and r.is_finished() else None

    def num_cached_tokens(self, req_id):
        """Prompt tokens the first schedule found cached (None before its first output)."""
        return self.cached_tokens.get(req_id)

    # ---- stepping -----------------------------------------------------------------
    def step(self, tokens=None, extra=None):
        """One EngineCore.step: schedule, a synthetic model output, update_from_output.
        tokens: req_id -> sampled token (or list of them); default 1000 + step number.
        extra: attributes to set on the ModelRunnerOutput.  Unlike EngineCore, it also
        schedules when the scheduler holds no request.  Returns (SchedulerOutput,
        {client_index: EngineCoreOutputs})."""
        self.steps += 1
        tokens = tokens or {}
        so = self.scheduler.schedule()
        if so.total_num_scheduled_tokens == 0:
            # The model runner's answer to an empty step (copied: it is shared).
            mro = copy.copy(EMPTY_MODEL_RUNNER_OUTPUT) if extra else EMPTY_MODEL_RUNNER_OUTPUT
        else:
            ids = list(so.num_scheduled_tokens)
            sampled = []
            for rid in ids:
                r = self.scheduler.requests.get(rid)
                if r is None or r.is_prefill_chunk:   # mid-prefill: nothing sampled
                    sampled.append([])
                else:
                    t = tokens.get(rid, 1000 + self.steps)
                    sampled.append(list(t) if isinstance(t, (list, tuple)) else [t])
            mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                    sampled_token_ids=sampled)
        for k, v in (extra or {}).items():
            setattr(mro, k, v)
        eco = self.scheduler.update_from_output(so, mro)
        for outs in eco.values():
            for o in outs.outputs:
                if o.prefill_stats is not None:
                    self.cached_tokens[o.request_id] = o.prefill_stats.num_cached_tokens
        return so, eco

    def run_until_done(self, max_steps=10000, check=False):
        """Steps while the scheduler holds requests; returns the number of steps.
        check=True: raises AssertionError on the first check_refcounts() problem."""
        n = 0
        while self.scheduler.has_requests():
            if n >= max_steps:
                raise RuntimeError("not done after %d steps" % max_steps)
            self.step()
            n += 1
            if check:
                problems = self.check_refcounts()
                assert not problems, "step %d: %s" % (self.steps, problems)
        return n

    # ---- block accounting ---------------------------------------------------------
    def free_blocks(self):
        return self.pool.get_num_free_blocks()

    def usable_blocks(self):
        return self.pool.num_gpu_blocks - 1       # less the null block

    def managers(self):
        return self.kv.coordinator.single_type_managers

    def blocks_of(self, req_id):
        """The request's block list per KV cache group (copies, nulls included)."""
        return [list(m.req_to_blocks.get(req_id, ())) for m in self.managers()]

    def held_by(self, req_id):
        """(real blocks, null blocks) in the request's block lists."""
        blocks = [b for g in self.blocks_of(req_id) for b in g]
        nulls = sum(1 for b in blocks if b.is_null)
        return len(blocks) - nulls, nulls

    def check_refcounts(self, extra_refs=()):
        """Recounts references and returns a list of problems (empty when fine).
        Each block's ref_cnt must equal its references from requests' block lists
        (null block excluded), the scheduler's deferred frees and `extra_refs`
        (blocks the caller holds, e.g. a plugin's); a free-queue block must have
        ref_cnt 0 and no reference, an unreferenced block must be in the free queue."""
        problems = []
        expected = collections.Counter()
        live = self.scheduler.requests
        for gi, m in enumerate(self.managers()):
            for rid, blocks in m.req_to_blocks.items():
                if blocks and (rid not in live or live[rid].is_finished()):
                    problems.append("group %d: finished/unknown request %r still holds %d blocks"
                                    % (gi, rid, len(blocks)))
                expected.update(b.block_id for b in blocks if not b.is_null)
        for _, blocks in getattr(self.scheduler, "deferred_frees", ()):
            expected.update(b.block_id for b in blocks if not b.is_null)
        expected.update(b.block_id for b in extra_refs if not b.is_null)
        queue = self.pool.free_block_queue
        free = [b.block_id for b in queue.get_all_free_blocks()]
        free_set = set(free)
        if len(free) != len(free_set):
            dups = sorted(i for i, c in collections.Counter(free).items() if c > 1)
            problems.append("blocks in the free queue twice: %s" % dups)
        if len(free) != queue.num_free_blocks:
            problems.append("free queue holds %d blocks, num_free_blocks says %d"
                            % (len(free), queue.num_free_blocks))
        for b in self.pool.blocks:
            if b.is_null:
                if b.block_id in free_set:
                    problems.append("the null block %d is in the free queue" % b.block_id)
                continue
            want = expected.get(b.block_id, 0)
            if b.ref_cnt != want:
                problems.append("block %d: ref_cnt %d, references %d"
                                % (b.block_id, b.ref_cnt, want))
            if b.block_id in free_set and (b.ref_cnt > 0 or want > 0):
                problems.append("block %d is free but referenced (ref_cnt %d, references %d)"
                                % (b.block_id, b.ref_cnt, want))
            if b.block_id not in free_set and b.ref_cnt == 0 and want == 0:
                problems.append("block %d leaked: unreferenced and not free" % b.block_id)
        return problems


def _self_test():
    fails = []

    def check(ok, what):
        print(("ok " if ok else "FAIL ") + what)
        if not ok:
            fails.append(what)

    d = Driver(num_blocks=9)          # 8 usable blocks of 32: three requests need 11
    start = d.free_blocks()
    so, eco = d.step()
    check(so.total_num_scheduled_tokens == 0 and d.check_refcounts() == []
          and not any(o.outputs for o in eco.values()), "empty step (EMPTY_MODEL_RUNNER_OUTPUT)")

    prefix = list(range(100, 164))                       # two shared blocks
    prompts = {"r%d" % i: prefix + [200 + i] * 32 for i in range(3)}
    for rid, p in prompts.items():
        d.add(rid, p, 64, extra_args={"k": rid})
    problems, n = [], 0
    while d.scheduler.has_requests() and n < 1000:
        d.step()
        n += 1
        problems += ["step %d: %s" % (d.steps, p) for p in d.check_refcounts()]
    check(not problems, "check_refcounts() clean at each of %d steps %s" % (n, problems[:3]))
    preempted = {r: d.requests[r].num_preemptions for r in prompts}
    check(sum(preempted.values()) > 0, "preemption forced %s" % preempted)
    done = all(d.finish_status(r) == RequestStatus.FINISHED_LENGTH_CAPPED
               and len(d.requests[r].output_token_ids) == 64 for r in prompts)
    check(done, "all 3 finished LENGTH_CAPPED with 64 tokens each")
    check(d.free_blocks() == start, "free blocks back to the start count (%d/%d)"
          % (d.free_blocks(), start))

    d.add("again", prompts["r0"], 4)
    d.run_until_done(check=True)
    hit = d.num_cached_tokens("again")
    check(bool(hit), "same prompt again: prefix-cache hit of %s tokens" % hit)
    check(d.free_blocks() == start, "free blocks back to the start count after it")

    d.add("gone", list(range(300, 460)), 32)
    for _ in range(2):
        d.step(extra={"memdecay_evicted": []})
    held = d.held_by("gone")
    d.abort(["gone"])
    check(held[0] > 0 and d.held_by("gone") == (0, 0)
          and d.finish_status("gone") == RequestStatus.FINISHED_ABORTED
          and d.free_blocks() == start and d.check_refcounts() == [],
          "aborted request's %d blocks came back" % held[0])

    cached = next(b for b in d.pool.blocks if b.block_hash is not None and b.ref_cnt == 0)
    d.pool.touch([cached])                                 # a reference the caller holds
    clean = d.check_refcounts(extra_refs=[cached])
    flagged = d.check_refcounts()
    d.pool.free_blocks([cached])
    check(clean == [] and flagged and d.check_refcounts() == [],
          "check_refcounts() counts extra_refs and flags an undeclared one: %s" % flagged[:1])
    print("core_driver: PASS" if not fails else "core_driver: FAIL (%d)" % len(fails))
    return not fails


if __name__ == "__main__":
    sys.exit(0 if _self_test() else 1)
