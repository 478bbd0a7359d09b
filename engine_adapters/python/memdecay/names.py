"""The built-in region and policy names, as libmemdecay reports them.

The ABI header holds the one list (MD_REGION_BUILTIN_NAMES, MD_POLICY_NAMES);
the library exports it (md_region_name, md_policy_name, md_policy_from_name)
and this module reads it, so no Python file spells the names again.  `Region`
is built from it when the package is imported."""
import enum

from ._lib import load_library


def _names(fn):
    out = []
    while True:
        n = fn(len(out))
        if n is None:
            return out
        out.append(n.decode())


def region_names(library=None):
    """The built-in region names in id order (Region's members, lower case)."""
    return _names(load_library(library).md_region_name)


def policy_names(library=None):
    """The built-in policy names in id order (enum md_policy_id)."""
    return _names(load_library(library).md_policy_name)


def policy_from_name(name, library=None):
    """The id of policy `name`; ValueError when it is not a built-in one."""
    rc = load_library(library).md_policy_from_name(str(name).encode())
    if rc < 0:
        raise ValueError("policy %r is not one of %s" % (name, policy_names(library)))
    return rc


Region = enum.IntEnum("Region", [(n.upper(), i) for i, n in enumerate(region_names())],
                      module="memdecay", qualname="Region")
Region.__doc__ = "The built-in regions (docs/design.md §4), as the ABI numbers them."
