"""MemDecay in an unmodified vLLM (docs/vllm.md).

vLLM loads this package's `register` through the `vllm.general_plugins` entry
point in each of its processes: the API server, the engine core and the
workers.  With MEMDECAY_VLLM=1 and the vLLM version it was checked against,
`register` installs the plugin's hooks; otherwise vLLM runs unchanged.

    pieces            process       what
    api.py            API server    regions from the chat messages, per-request fields
    worker.py         worker        the worker's hooks, joining the parts below
    attach.py         worker        the attachment to memdecayd, liveness, reattach
    mirror.py         worker        vLLM's blocks as memdecayd pages, per request
    attention.py      worker        attention statistics over the kept keys
    reduce.py         worker        token masses to page masses and refresh bits
    commands.py       worker        a step published, memdecayd's commands applied
    holes.py          worker        attention over the kept blocks only
    scheduler.py      engine core   evicted blocks back to vLLM's pool
    sessions.py       engine core   a finished request's blocks kept for its next turn
    fields.py         API server    the request fields checked, a 400 naming the bad one
    offline.py        yours         the same for the offline LLM API
"""
from . import settings

SUPPORTED_VLLM = ("0.32.0",)

_installed = False


def _logger():
    from vllm.logger import init_logger
    return init_logger("vllm.memdecay")


def register():
    global _installed
    if _installed or not settings.get().enabled:
        return
    import vllm
    if vllm.__version__ not in SUPPORTED_VLLM:
        _logger().warning("memdecay_vllm: vLLM %s is not one it was checked against (%s); "
                          "MemDecay is off and vLLM runs unchanged", vllm.__version__,
                          ", ".join(SUPPORTED_VLLM))
        return
    from . import api, scheduler, sessions, worker
    scheduler.install()
    sessions.install()
    worker.install()
    api.install()
    _installed = True
    _logger().info("memdecay_vllm: MemDecay hooks installed in vLLM %s", vllm.__version__)
