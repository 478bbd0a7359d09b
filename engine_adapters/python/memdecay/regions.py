"""Chat roles to regions (docs/design.md §5), shared by the Python adapters.

A message's region is its explicit "region" key when it has one, else the one
its role implies; an assistant message that calls tools is tool_in, a tool's
answer tool_out."""
from . import Region

ROLE_REGION = {"system": Region.SYSTEM, "user": Region.USER, "assistant": Region.ASSISTANT,
               "tool": Region.TOOL_OUT, "ipython": Region.TOOL_OUT, "function": Region.TOOL_OUT}
REGION_NAMES = {r.name.lower(): r for r in Region}


def region_named(name):
    try:
        return REGION_NAMES[str(name).lower()]
    except KeyError:
        raise ValueError("region %r is not one of %s" % (name, sorted(REGION_NAMES))) from None


def region_of(msg):
    """The message's region: its explicit "region", else its role's."""
    name = msg.get("region")
    if name:
        return region_named(name)
    role = msg.get("role")
    if role == "assistant" and msg.get("tool_calls"):
        return Region.TOOL_IN
    if role not in ROLE_REGION:
        raise ValueError("message role %r has no region (expected one of %s, or a 'region' key)"
                         % (role, sorted(ROLE_REGION)))
    return ROLE_REGION[role]
