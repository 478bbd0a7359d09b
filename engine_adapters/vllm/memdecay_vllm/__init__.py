"""MemDecay in an unmodified vLLM (docs/vllm.md).

vLLM loads this package's `register` through the `vllm.general_plugins` entry
point in each of its processes: the API server, the engine core and the
workers.  With MEMDECAY_VLLM=1 and a vLLM version it was checked against,
`register` installs the plugin's hooks (hooks.py); on any other version, or
when a wrapped method's signature differs, or on a path where the hooks would
not fire (guard.py), vLLM refuses to start and says which.  Without
MEMDECAY_VLLM=1 vLLM runs unchanged.

    pieces            process       what
    hooks.py          all           the table of every wrapped vLLM method, one per supported
                                    version, checked and installed (vLLM refuses to start
                                    when it does not hold)
    guard.py          all           the V2 model runner, async scheduling and attention
                                    backends the hooks do not cover: refused (or the V2
                                    runner switched off) at start-up
    api.py            API server    regions from the chat messages, per-request fields
    worker.py         worker        the worker's hooks, joining the parts below
    attach.py         worker        the attachment to memdecayd, liveness, reattach
    mirror.py         worker        vLLM's blocks as memdecayd pages, per request
    attention.py      worker        attention statistics over the kept keys
    reduce.py         worker        token masses to page masses and refresh bits
    commands.py       worker        a step published, memdecayd's commands applied
    holes.py          worker        attention over the kept blocks only
    scheduler.py      engine core   evicted blocks back to vLLM's pool; the session wrappers
    sessions.py       engine core   the session store: a finished request's blocks kept
                                    for its next turn
    metrics.py        engine core,  the sessions' series on vLLM's /metrics
                      API server
    log.py            all           the one logger and its rate-limited warning
    fields.py         API server    the request fields checked, a 400 naming the bad one
    offline.py        yours         the same for the offline LLM API
"""
from . import settings

_installed = False


def register():
    """vLLM's general-plugin entry point, called in each of its processes.  Off
    unless MEMDECAY_VLLM=1.  On, it installs every hook of hooks.HOOKS or
    raises (vLLM then does not start), naming the variable, the vLLM version or
    the method that stops it."""
    global _installed
    if _installed or not settings.get().enabled:
        return
    import vllm

    from . import guard, hooks, log, metrics
    # paths on which the hooks would not fire: refused, or the V2 runner switched off;
    # the platform first (another platform's runner module may not even import here)
    from vllm.platforms import current_platform
    guard.platform(current_platform)
    hooks.check(vllm.__version__)
    guard.environment()
    n = hooks.install(vllm.__version__)
    metrics.setup_dir()
    metrics.register_collector()
    _installed = True
    log.logger().info("memdecay_vllm: %d hooks installed in vLLM %s", n, vllm.__version__)
