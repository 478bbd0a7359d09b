"""The plugin's one logger ("vllm.memdecay", vLLM's own logging setup) and its
rate-limited warning for faults that repeat: a fault that happens every step
is logged the 1st, 2nd, 4th, 8th ... time, so the log stays readable."""
import collections

_counts = collections.Counter()


def logger():
    from vllm.logger import init_logger
    return init_logger("vllm.memdecay")


def failed(where, err):
    """Counts a fault at `where` and logs it at powers of two; returns the count."""
    _counts[where] += 1
    n = _counts[where]
    if n & (n - 1) == 0:
        logger().warning("memdecay_vllm: %s failed (%d times so far; failing open): %s: %s",
                         where, n, type(err).__name__, err)
    return n


def failures():
    """{where: count} of every fault logged through `failed`."""
    return dict(_counts)
