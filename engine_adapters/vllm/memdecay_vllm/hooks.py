"""Every vLLM method the plugin wraps, in one table, and their installation.

vLLM has no API for freeing the blocks of a running request or keeping a
finished one's, so the plugin wraps internal methods, and internal methods
change between releases.  Each row names the method, the parameters it must
have (names, in order, as inspect.signature reads them), and the factory of
its wrapper.  `check` reads every row against the installed vLLM before
anything is patched; `install` refuses to start (raises, naming the method
and the version) when a row does not hold, because a vLLM that starts with
half the hooks, or none, would ignore every budget a client sends.
docs/vllm.md "What in vLLM is patched, and why" explains each row.

One table per supported version: HOOKS lists every row with its parameters in
the oldest supported version, and CHANGED records, per later version, the rows
whose parameters differ there.  `table(version)` is that version's table.
Besides the methods, the worker's hooks fire only on the paths they wrap (the
V1 model runner, the CPU attention backend, synchronous scheduling):
guard.py refuses the rest at start-up."""
import importlib
import inspect

SUPPORTED_VLLM = ("0.32.0", "0.33.0")
MARK = "_memdecay"


class Hook:
    __slots__ = ("module", "cls", "method", "params", "factory", "process", "why")

    def __init__(self, module, cls, method, params, factory, process, why):
        self.module, self.cls, self.method = module, cls, method
        self.params, self.factory, self.process, self.why = params, factory, process, why

    @property
    def name(self):
        return "%s.%s" % (self.cls, self.method)

    def target(self):
        return getattr(importlib.import_module(self.module), self.cls)


def _f(module, name):
    """The wrapper factory `name` of the plugin's `module`, imported when needed."""
    def factory(orig):
        return getattr(importlib.import_module("memdecay_vllm." + module), name)(orig)
    return factory


_SCHED = "vllm.v1.core.sched.scheduler"
_KVM = "vllm.v1.core.kv_cache_manager"
_STM = "vllm.v1.core.single_type_kv_cache_manager"
_RUNNER = "vllm.v1.worker.gpu_model_runner"
_CPU_ATTN = "vllm.v1.attention.backends.cpu_attn"

HOOKS = (
    # engine core: the configuration the worker's hooks need (guard.py)
    Hook(_SCHED, "Scheduler", "__init__",
         ("self", "vllm_config", "kv_cache_config", "structured_output_manager", "block_size",
          "hash_block_size", "mm_registry", "include_finished_set", "log_stats"),
         _f("guard", "wrap_scheduler_init"), "engine core",
         "refuse a configuration whose worker hooks would not fire (V2 runner, async "
         "scheduling, MLA attention)"),
    # engine core: evicted blocks and the prefix-cache guard (scheduler.py)
    Hook(_SCHED, "Scheduler", "update_from_output",
         ("self", "scheduler_output", "model_runner_output"),
         _f("scheduler", "wrap_update_from_output"), "engine core",
         "free the step's evicted blocks (null block in, block to the pool)"),
    Hook(_STM, "SingleTypeKVCacheManager", "cache_blocks",
         ("self", "request", "num_tokens", "retention_interval", "replay_boundaries"),
         _f("scheduler", "wrap_cache_blocks"), "engine core",
         "no block computed over a hole enters the prefix cache"),
    # engine core: sessions (scheduler.py over sessions.py)
    Hook(_SCHED, "Scheduler", "_free_blocks", ("self", "request"),
         _f("scheduler", "wrap_free_blocks"), "engine core",
         "a finished request's blocks become a session"),
    Hook(_SCHED, "Scheduler", "schedule", ("self", "throttle_prefills"),
         _f("scheduler", "wrap_schedule"), "engine core",
         "the TTL; the step's session events for the worker; the metrics snapshot"),
    Hook(_KVM, "KVCacheManager", "get_computed_blocks", ("self", "request"),
         _f("scheduler", "wrap_get_computed_blocks"), "engine core",
         "a session is returned as an ordinary prefix hit"),
    Hook(_KVM, "KVCacheManager", "allocate_slots",
         ("self", "request", "num_new_tokens", "num_new_computed_tokens", "new_computed_blocks",
          "num_lookahead_tokens", "num_external_computed_tokens", "delay_cache_blocks",
          "num_encoder_tokens", "full_sequence_must_fit", "reserved_blocks",
          "has_scheduled_reqs", "skip_zeroing_group_ids"),
         _f("scheduler", "wrap_allocate_slots"), "engine core",
         "adoption completes; sessions give way before vLLM preempts"),
    Hook(_SCHED, "Scheduler", "_request_blocks_can_be_freed", ("self", "request"),
         _f("scheduler", "wrap_request_blocks_can_be_freed"), "engine core",
         "pool mode: a request held for memdecayd's eviction is not preempted"),
    Hook(_KVM, "KVCacheManager", "reset_prefix_cache", ("self",),
         _f("scheduler", "wrap_reset_prefix_cache"), "engine core",
         "every session is released first (vLLM refuses while blocks are held)"),
    # worker (worker.py)
    Hook(_RUNNER, "GPUModelRunner", "_update_states", ("self", "scheduler_output"),
         _f("worker", "wrap_update_states"), "worker", "declare the step's tokens"),
    Hook(_RUNNER, "GPUModelRunner", "execute_model",
         ("self", "scheduler_output", "intermediate_tensors"),
         _f("worker", "wrap_execute_model"), "worker",
         "pool mode: a step with no token still applies and reports the daemon's commands"),
    Hook(_RUNNER, "GPUModelRunner", "sample_tokens", ("self", "grammar_output"),
         _f("worker", "wrap_sample_tokens"), "worker",
         "publish the step, apply commands, report evicted blocks"),
    Hook(_CPU_ATTN, "CPUAttentionMetadataBuilder", "build",
         ("self", "common_prefix_len", "common_attn_metadata", "fast_build"),
         _f("worker", "wrap_build"), "worker", "compact every null block out of the block table"),
    Hook(_CPU_ATTN, "CPUAttentionBackendImpl", "forward",
         ("self", "layer", "query", "key", "value", "kv_cache", "attn_metadata", "output",
          "output_scale", "output_block_scale"),
         _f("worker", "wrap_forward"), "worker", "attention statistics, after the kernel"),
    # API server (api.py)
    Hook("vllm.entrypoints.openai.chat_completion.serving", "OpenAIServingChat",
         "render_chat_request", ("self", "request"),
         _f("api", "wrap_render_chat_request"), "API server",
         "regions from the rendered messages; the fields checked"),
    Hook("vllm.entrypoints.openai.completion.serving", "OpenAIServingCompletion",
         "render_completion_request", ("self", "request"),
         _f("api", "wrap_render_completion_request"), "API server", "the fields checked"),
    Hook("vllm.v1.engine.input_processor", "InputProcessor", "process_inputs",
         ("self", "request_id", "prompt", "params", "supported_tasks", "arrival_time",
          "lora_request", "tokenization_kwargs", "trace_headers", "priority",
          "data_parallel_rank", "resumable", "session_id", "kv_hints"),
         _f("api", "wrap_process_inputs"), "API server, offline LLM",
         "the fields checked on every other path"),
)


# The rows whose parameters differ from the first supported version's, per
# version; every other row holds as HOOKS lists it.  The wrappers take both
# forms (scheduler.wrap_get_computed_blocks passes max_cache_hit_length on).
CHANGED = {
    "0.32.0": {},
    # vLLM 0.33's scheduler passes max_cache_hit_length positionally
    "0.33.0": {"KVCacheManager.get_computed_blocks": ("self", "request", "max_cache_hit_length")},
}
assert set(CHANGED) == set(SUPPORTED_VLLM)


def table(version):
    """vLLM `version`'s hook table: {method name: the parameters it must have}."""
    changed = CHANGED[version]
    assert set(changed) <= {h.name for h in HOOKS}, "CHANGED names a method HOOKS lacks"
    return {h.name: changed.get(h.name, h.params) for h in HOOKS}


TABLES = {v: table(v) for v in SUPPORTED_VLLM}


class Unsupported(RuntimeError):
    """The installed vLLM is not one the plugin can run in."""


def params_of(fn):
    return tuple(inspect.signature(fn).parameters)


def check(version, rows=None):
    """Raises Unsupported naming the version, or the first method that is
    missing or whose parameters differ from `rows` (default: the version's
    table, TABLES[version])."""
    if rows is None:
        if version not in SUPPORTED_VLLM:
            raise Unsupported(
                "memdecay_vllm: MEMDECAY_VLLM=1, but vLLM %s is not a version the plugin "
                "supports (%s); it wraps internal methods of vLLM and would ignore every "
                "budget. Install a supported vLLM or unset MEMDECAY_VLLM."
                % (version, ", ".join(SUPPORTED_VLLM)))
        rows = TABLES[version]
    for h in HOOKS:
        want = rows[h.name]
        try:
            fn = getattr(h.target(), h.method)
        except (ImportError, AttributeError) as e:
            raise Unsupported("memdecay_vllm: vLLM %s has no %s (%s: %s); the plugin cannot "
                              "run in it" % (version, h.name, type(e).__name__, e)) from None
        got = params_of(getattr(fn, "__wrapped__", fn))
        if got != want:
            raise Unsupported(
                "memdecay_vllm: vLLM %s's %s takes (%s), the plugin expects (%s); the plugin "
                "cannot run in it" % (version, h.name, ", ".join(got), ", ".join(want)))


def install(version):
    """Checks every row of the version's table, then wraps every method once.
    Returns how many were wrapped by this call (0 when already installed)."""
    check(version)
    n = 0
    for h in HOOKS:
        cls = h.target()
        orig = getattr(cls, h.method)
        if getattr(orig, MARK, False):
            continue
        w = h.factory(orig)
        w.__wrapped__ = orig
        w.__name__ = orig.__name__
        w.__qualname__ = orig.__qualname__
        w.__doc__ = orig.__doc__
        setattr(w, MARK, True)
        setattr(cls, h.method, w)
        n += 1
    return n


def installed():
    """Names of the rows whose method carries the plugin's wrapper now."""
    return [h.name for h in HOOKS if getattr(getattr(h.target(), h.method), MARK, False)]
