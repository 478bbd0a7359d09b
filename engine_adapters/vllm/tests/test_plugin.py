#!/usr/bin/env python3
"""test_plugin.py — the plugin's switch, its version check and its regions, without an engine.

  - vLLM finds the entry point (vllm.general_plugins: memdecay);
  - with MEMDECAY_VLLM unset, register() installs nothing;
  - with MEMDECAY_VLLM=1 on a vLLM version it was not checked against, it logs
    one line and installs nothing;
  - on the checked version it installs every hook;
  - regions: roles, tool calls and explicit labels through the model's own chat
    template; the run-length form round-trips and refuses what is out of range.
Each case runs in a fresh interpreter, since a plugin installs once per process."""
import os
import subprocess
import sys

HOOKS = """
from vllm.v1.worker.gpu_model_runner import GPUModelRunner as R
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl as I, CPUAttentionMetadataBuilder as B
from vllm.v1.core.sched.scheduler import Scheduler as S
from vllm.v1.core.single_type_kv_cache_manager import SingleTypeKVCacheManager as M
from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat as C
fs = [R._update_states, R.sample_tokens, I.forward, B.build, S.update_from_output, M.cache_blocks,
      C.render_chat_request]
print("HOOKED", sum("memdecay_vllm" in f.__code__.co_filename for f in fs), "OF", len(fs))
"""


def run(code, env_extra):
    env = dict(os.environ)
    env.pop("MEMDECAY_VLLM", None)
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    return r.returncode, r.stdout + r.stderr


def main():
    if len(sys.argv) > 1:
        print(__doc__)
        return 0 if sys.argv[1] in ("-h", "--help") else 2
    fails = []

    def check(ok, what):
        print("  %-4s %s" % ("ok" if ok else "FAIL", what), flush=True)
        if not ok:
            fails.append(what)

    from importlib.metadata import entry_points
    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "memdecay"]
    check(len(eps) == 1 and eps[0].value == "memdecay_vllm:register",
          "entry point vllm.general_plugins: memdecay = memdecay_vllm:register")

    rc, out = run("import memdecay_vllm; memdecay_vllm.register()" + HOOKS, {})
    check(rc == 0 and "HOOKED 0 OF 7" in out, "switched off: no hook installed")

    rc, out = run("import vllm; vllm.__version__ = '0.31.9'\n"
                  "import memdecay_vllm; memdecay_vllm.register()" + HOOKS, {"MEMDECAY_VLLM": "1"})
    lines = [x for x in out.splitlines() if "memdecay_vllm" in x and "0.31.9" in x]
    check(rc == 0 and "HOOKED 0 OF 7" in out and len(lines) == 1,
          "unknown vLLM version: one line (%r) and no hook" % (lines[0][-90:] if lines else ""))

    rc, out = run("import memdecay_vllm; memdecay_vllm.register(); memdecay_vllm.register()" + HOOKS,
                  {"MEMDECAY_VLLM": "1"})
    check(rc == 0 and "HOOKED 7 OF 7" in out, "switched on: all 7 hooks installed, once")

    from transformers import AutoTokenizer
    from memdecay import Region
    from memdecay_vllm import regions
    tok = AutoTokenizer.from_pretrained(os.environ.get("MEMDECAY_VLLM_MODEL") or
                                        os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                     ".deps", "models", "smollm2-hf"))
    msgs = [{"role": "system", "content": "You plan trips."},
            {"role": "user", "content": "Book Lisbon."},
            {"role": "assistant", "content": "search(LIS)", "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "content": "TP1357 at 10:40", "tool_call_id": "1"},
            {"role": "assistant", "content": "Step 1: book TP1357.", "region": "plan"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                  return_dict=False)
    reg = regions.prompt_regions(tok, msgs, ids)
    seq = [r for k, r in enumerate(reg) if k == 0 or reg[k - 1] != r]
    want = [Region.SYSTEM, Region.USER, Region.TOOL_IN, Region.TOOL_OUT, Region.PLAN,
            Region.ASSISTANT]
    check(reg is not None and len(reg) == len(ids) and seq == [int(x) for x in want],
          "regions in prompt order: %s" % [Region(x).name.lower() for x in seq])
    text = tok.decode([i for i, r in zip(ids, reg) if r == Region.TOOL_OUT])
    check("TP1357" in text and "tool" in text, "the tool answer's tokens, header included: %r"
          % text)
    check(regions.unrle(regions.rle(reg), len(reg)) == reg, "run-length form round-trips")
    for bad in ([16, 3], [0, 5000], [1]):
        try:
            regions.unrle(bad, 100)
            check(False, "unrle refuses %r" % bad)
        except ValueError:
            check(True, "unrle refuses %r" % bad)
    print("test_plugin:", "PASS" if not fails else "FAIL (%d)" % len(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
