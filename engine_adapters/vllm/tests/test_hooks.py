#!/usr/bin/env python3
"""test_hooks.py — the hook table of the installed vLLM, and the start-up refusals
where the hooks would not fire (docs/vllm.md "Switching it on").  Runs on every
supported vLLM (the 0.32 CPU build, and 0.33's engine core: tests/vllm.cmake).

  table       the installed vLLM's version is supported and its table holds:
              every wrapped method exists with the parameters that version's
              table lists; the other supported versions' tables do not hold
              here, naming the method that differs (get_computed_blocks);
  mutated     a copy of vLLM whose KVCacheManager.get_computed_blocks has the
              other version's parameters: register() refuses, naming the method,
              and installs nothing;
  on          register() installs every row once, and, VLLM_USE_V2_MODEL_RUNNER
              being unset, sets it to 0 and logs it: the configuration selects
              the V1 runner the plugin hooks;
  V2 runner   VLLM_USE_V2_MODEL_RUNNER=1: register() refuses, naming it; the
              same variable set after start-up reaches the engine core's
              check (Scheduler.__init__), which refuses naming the V2 runner;
  async       a configuration with async scheduling on: vLLM's Scheduler is not
              built, the refusal names --async-scheduling;
  platform    vLLM on another platform (a CUDA platform object in place of the
              CPU one): register() refuses, naming it and the attention backends;
  serve       (--serve) `vllm serve` with VLLM_USE_V2_MODEL_RUNNER=1 exits before
              loading the model, naming the variable.

Each case that installs hooks runs in a fresh interpreter (a plugin installs
once per process).

  test_hooks.py [--serve]"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402

check = harness.Checks()

# prints the number of wrapped methods that carry the plugin's wrapper
COUNT = """
from memdecay_vllm import hooks
print("HOOKED", len(hooks.installed()), "OF", len(hooks.HOOKS))
"""
REFUSE = """
import memdecay_vllm
try:
    memdecay_vllm.register()
    print("STARTED")
except RuntimeError as e:
    print("REFUSED", e)
"""


def run(code, env_extra, unset=("MEMDECAY_VLLM", "VLLM_USE_V2_MODEL_RUNNER")):
    env = dict(os.environ)
    for k in unset:
        env.pop(k, None)
    env.update(env_extra)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)
    return r.returncode, r.stdout + r.stderr


def line_of(out, mark):
    return next((x for x in out.splitlines() if x.startswith(mark)), "")


def part_table(version):
    from memdecay_vllm import hooks
    print("table: vLLM %s" % version, flush=True)
    check(version in hooks.SUPPORTED_VLLM and set(hooks.TABLES) == set(hooks.SUPPORTED_VLLM),
          "vLLM %s is supported; tables for %s" % (version, ", ".join(sorted(hooks.TABLES))))
    try:
        hooks.check(version)
        check(True, "every one of the %d rows of %s's table holds in the installed vLLM"
              % (len(hooks.HOOKS), version))
    except hooks.Unsupported as e:
        check(False, "%s's table holds in the installed vLLM: %s" % (version, e))
    for other in hooks.SUPPORTED_VLLM:
        if other == version:
            continue
        diff = sorted(k for k in hooks.TABLES[other]
                      if hooks.TABLES[other][k] != hooks.TABLES[version][k])
        try:
            hooks.check(version, hooks.TABLES[other])
            check(False, "%s's table refused here (differs in %s)" % (other, diff))
        except hooks.Unsupported as e:
            check(diff and all(d in str(e) for d in diff),
                  "%s's table refused here, naming %s: %s" % (other, ", ".join(diff), e))


def part_mutated(version):
    print("mutated: get_computed_blocks with another version's parameters", flush=True)
    from memdecay_vllm import hooks
    name = "KVCacheManager.get_computed_blocks"
    want = hooks.TABLES[version][name]
    # the other form: 0.32's (self, request) where 0.33's takes max_cache_hit_length,
    # and the other way round
    other = next(p for v, t in hooks.TABLES.items() for p in [t[name]] if p != want)
    mutate = ("from vllm.v1.core.kv_cache_manager import KVCacheManager as K\n"
              "exec('def get_computed_blocks(%s): pass')\n"
              "K.get_computed_blocks = get_computed_blocks\n" % ", ".join(other))
    rc, out = run(mutate + REFUSE + COUNT, {"MEMDECAY_VLLM": "1"})
    line = line_of(out, "REFUSED")
    check(rc == 0 and name in line and "(%s)" % ", ".join(other) in line
          and "HOOKED 0 OF" in out,
          "takes (%s): refused, naming the method, no hook: %r"
          % (", ".join(other), line[:200] or out[-300:]))


def part_on():
    print("on: every hook installed; the V2 runner switched off", flush=True)
    code = ("import memdecay_vllm, os\nmemdecay_vllm.register(); memdecay_vllm.register()\n"
            "print('V2ENV', os.environ.get('VLLM_USE_V2_MODEL_RUNNER'))\n"
            "from core_driver import Driver\n"
            "d = Driver(num_blocks=8)\n"
            "print('V2RUNNER', d.config.use_v2_model_runner)\n" + COUNT)
    rc, out = run(code, {"MEMDECAY_VLLM": "1"})
    from memdecay_vllm import hooks
    n = len(hooks.HOOKS)
    logged = [x for x in out.splitlines() if "set VLLM_USE_V2_MODEL_RUNNER=0" in x]
    check(rc == 0 and "HOOKED %d OF %d" % (n, n) in out, "all %d hooks installed, once%s"
          % (n, "" if rc == 0 else ": " + out[-400:]))
    check("V2ENV 0" in out and "V2RUNNER False" in out and len(logged) == 1,
          "VLLM_USE_V2_MODEL_RUNNER unset: set to 0, logged once (%r); the config selects the "
          "V1 runner" % (logged[0].strip()[-120:] if logged else None))


def part_v2():
    print("V2 runner: refused by name", flush=True)
    rc, out = run(REFUSE + COUNT, {"MEMDECAY_VLLM": "1", "VLLM_USE_V2_MODEL_RUNNER": "1"})
    line = line_of(out, "REFUSED")
    check(rc == 0 and "VLLM_USE_V2_MODEL_RUNNER=1" in line and "V2 model runner" in line
          and "HOOKED 0 OF" in out,
          "VLLM_USE_V2_MODEL_RUNNER=1: register() refuses, no hook: %r"
          % (line[:220] or out[-300:]))
    # set once the configuration is built (vLLM refuses to build one that selects the
    # V2 runner where Triton has no backend, as on the CPU build): the engine core's
    # check reads the same property the worker does
    code = ("import memdecay_vllm, os\nmemdecay_vllm.register()\n"
            "from core_driver import Driver\n"
            "def v2(vc):\n    os.environ['VLLM_USE_V2_MODEL_RUNNER'] = '1'\n"
            "    print('V2RUNNER', vc.use_v2_model_runner)\n"
            "try:\n    Driver(num_blocks=8, load_plugins=False, adjust=v2)\n    print('BUILT')\n"
            "except RuntimeError as e:\n    print('REFUSED', e)\n")
    rc, out = run(code, {"MEMDECAY_VLLM": "1"})
    line = line_of(out, "REFUSED")
    check(rc == 0 and "V2RUNNER True" in out and "V2 model runner" in line
          and "BUILT" not in out,
          "a configuration that selects the V2 runner: the engine core's scheduler is not "
          "built: %r" % (line[:220] or out[-300:]))


def part_async():
    print("async scheduling: refused by name", flush=True)
    code = ("import memdecay_vllm\nmemdecay_vllm.register()\n"
            "from core_driver import Driver\n"
            "def on(vc):\n    vc.scheduler_config.async_scheduling = True\n"
            "try:\n    Driver(num_blocks=8, load_plugins=False, adjust=on)\n    print('BUILT')\n"
            "except RuntimeError as e:\n    print('REFUSED', e)\n"
            "Driver(num_blocks=8, load_plugins=False)\nprint('PLAIN BUILT')\n")
    rc, out = run(code, {"MEMDECAY_VLLM": "1"})
    line = line_of(out, "REFUSED")
    check(rc == 0 and "--async-scheduling" in line and "--no-async-scheduling" in line
          and "\nBUILT" not in out and "PLAIN BUILT" in out,
          "async_scheduling on: vLLM's Scheduler refused, naming it (%r); off: built"
          % (line[:220] or out[-300:]))


def part_platform():
    print("platform: a GPU platform refused by name", flush=True)
    code = ("import vllm.platforms as P\n"
            "from vllm.platforms.interface import Platform, PlatformEnum\n"
            "class Cuda(Platform):\n    _enum = PlatformEnum.CUDA\n"
            "    device_name = 'cuda'\n    device_type = 'cuda'\n"
            "P.current_platform = Cuda()\n" + REFUSE +
            # (vLLM's GPU runner module does not import under this stand-in: the
            # engine core's classes tell whether anything was wrapped)
            "from vllm.v1.core.sched.scheduler import Scheduler as S\n"
            "from vllm.v1.core.kv_cache_manager import KVCacheManager as K\n"
            "print('WRAPPED', sum(hasattr(f, '_memdecay') for f in (S.__init__, S.schedule, "
            "K.get_computed_blocks)), memdecay_vllm._installed)\n")
    rc, out = run(code, {"MEMDECAY_VLLM": "1"})
    line = line_of(out, "REFUSED")
    check(rc == 0 and "cuda platform" in line and "attention backends" in line
          and "WRAPPED 0 False" in out,
          "vLLM on a cuda platform: refused, naming it, no hook: %r" % (line[:220] or out[-300:]))


def part_serve():
    """`vllm serve` with VLLM_USE_V2_MODEL_RUNNER=1 and the plugin on: it exits
    before it loads the model, naming the variable."""
    print("serve: vllm serve with the V2 runner selected", flush=True)
    vllm_bin = os.path.join(os.path.dirname(sys.executable), "vllm")
    env = dict(os.environ, MEMDECAY_VLLM="1", VLLM_USE_V2_MODEL_RUNNER="1")
    model = os.environ.get("MEMDECAY_VLLM_MODEL") or "unused"
    t0 = time.monotonic()
    r = subprocess.run([vllm_bin, "serve", model, "--port", "1"], env=env, capture_output=True,
                       text=True, timeout=300)
    out = r.stdout + r.stderr
    line = next((x for x in out.splitlines() if "memdecay_vllm:" in x and "V2" in x), "")
    check(r.returncode != 0 and "VLLM_USE_V2_MODEL_RUNNER=1" in line,
          "exits %d in %.0f s, naming it: %r" % (r.returncode, time.monotonic() - t0,
                                                 line.strip()[-200:] or out[-300:]))


def main():
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        return 0
    os.environ.pop("MEMDECAY_VLLM", None)       # this process installs nothing
    import vllm
    version = vllm.__version__
    print("vLLM %s (%s)" % (version, os.path.dirname(vllm.__file__)), flush=True)
    parts = [lambda: part_table(version), lambda: part_mutated(version), part_on, part_v2,
             part_async, part_platform]
    if "--serve" in sys.argv[1:]:
        parts.append(part_serve)
    for part in parts:
        try:
            part()
        except Exception as e:
            import traceback
            traceback.print_exc()
            check(False, "%s: %s" % (type(e).__name__, e))
    return check.verdict("test_hooks")


if __name__ == "__main__":
    sys.exit(main())
