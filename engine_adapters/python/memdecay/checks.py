"""Checks of the values a caller hands an adapter (a budget, a policy name), with
errors that name the field, the value and what is allowed; shared by the vLLM
plugin's request checks (memdecay_vllm.fields) and the transformers adapter.
The policy names are memdecayd's own (`known_policies`: its policy table over
the control socket), never a copy."""
import json
import re

BUDGET_MAX = (1 << 31) - 1
POLICY_FORM = re.compile(r"^[a-z0-9][a-z0-9_-]{0,30}$")     # HELLO's policy field: 31 bytes


def show(v, limit=60):
    """A value as a client wrote it (JSON where it can be), cut to `limit` characters."""
    try:
        s = json.dumps(v)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= limit else s[:limit] + "..."


def budget_tokens(v, field="budget_tokens", minimum=1):
    """v as a token budget (an integer from `minimum` to 2^31-1), else ValueError."""
    if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= BUDGET_MAX:
        raise ValueError("%s=%s: want an integer number of tokens from %d to %d"
                         % (field, show(v), minimum, BUDGET_MAX))
    return v


def policy(v, field="policy", known=None):
    """v as a policy name: one of `known` (the daemon's table) when given, else of
    a policy name's form; ValueError naming the known names otherwise."""
    if not (isinstance(v, str) and POLICY_FORM.match(v) and (known is None or v in known)):
        allowed = ", ".join(known) if known else "a policy name memdecayd knows"
        raise ValueError("%s=%s: want one of %s (memdecayctl policy)" % (field, show(v), allowed))
    return v


def known_policies(socket_path=None, timeout_ms=300, library=None):
    """memdecayd's policy table, or None when no daemon answers."""
    from . import MemDecayError, control
    try:
        return tuple(json.loads(control("policy --json", socket_path, timeout_ms, 1 << 16,
                                        library)).get("policies") or ())
    except (MemDecayError, OSError, ValueError):
        return None
