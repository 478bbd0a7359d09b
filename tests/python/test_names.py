"""test_names.py — the built-in region and policy names reach Python from
libmemdecay and equal the ABI header's one list (MD_REGION_BUILTIN_NAMES,
MD_POLICY_NAMES in shm_layout/memdecay_abi.h): Region's members, the chat-role
table's names and policy ids, with md_policy_from_name refusing what is not a
built-in policy.

Environment (set by ctest): MEMDECAY_LIBRARY (libmemdecay.so)."""
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "engine_adapters", "python"))
import memdecay  # noqa: E402
from memdecay import regions  # noqa: E402


def abi_list(macro):
    """The quoted names of a #define in the ABI header, in order."""
    text = open(os.path.join(ROOT, "shm_layout", "memdecay_abi.h")).read()
    m = re.search(r"#define %s \\\n(.*?)\n" % macro, text)
    if not m:
        raise AssertionError("%s not found in memdecay_abi.h" % macro)
    return re.findall(r'"([^"]+)"', m.group(1))


class Names(unittest.TestCase):
    def test_regions_are_the_abi_list(self):
        abi = abi_list("MD_REGION_BUILTIN_NAMES")
        self.assertEqual(len(abi), 8)
        self.assertEqual(memdecay.region_names(), abi)
        self.assertEqual([r.name.lower() for r in memdecay.Region], abi)
        self.assertEqual([int(r) for r in memdecay.Region], list(range(len(abi))))
        self.assertEqual(sorted(regions.REGION_NAMES), sorted(abi))
        self.assertIsNone(memdecay.load_library().md_region_name(len(abi)))

    def test_region_members_keep_their_ids(self):
        R = memdecay.Region
        self.assertEqual((R.SYSTEM, R.USER, R.TOOL_OUT, R.SCRATCHPAD), (0, 2, 5, 7))
        self.assertIs(regions.region_named("Tool_In"), R.TOOL_IN)

    def test_policies_are_the_abi_list(self):
        abi = abi_list("MD_POLICY_NAMES")
        self.assertEqual(memdecay.policy_names(), abi)
        for i, name in enumerate(abi):
            self.assertEqual(memdecay.policy_from_name(name), i)
        self.assertIsNone(memdecay.load_library().md_policy_name(len(abi)))

    def test_unknown_policy_is_refused(self):
        lib = memdecay.load_library()
        self.assertEqual(lib.md_policy_from_name(b"lru"), -22)   # -EINVAL
        self.assertEqual(lib.md_policy_from_name(None), -22)
        with self.assertRaises(ValueError) as cm:
            memdecay.policy_from_name("lru")
        self.assertIn("memdecay-turn", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
