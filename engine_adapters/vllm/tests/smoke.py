#!/usr/bin/env python3
"""smoke.py MODEL_DIR — vLLM's CPU build answers one chat greedily on the model.

scripts/setup_vllm.sh runs it once after installing vLLM: the install is good when
vLLM starts on this machine and says "Paris" to "What is the capital of France?".
A file, not stdin: vLLM spawns its workers with multiprocessing's spawn method.
On the CPU backend gpu_memory_utilization is the share of host memory vLLM
reserves for its KV cache (its default, 0.92, refuses to start on 24 GiB)."""
import sys
import time


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    from vllm import LLM, SamplingParams
    t0 = time.monotonic()
    llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=2048, enforce_eager=True,
              gpu_memory_utilization=0.15)
    started = time.monotonic() - t0
    out = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                   SamplingParams(temperature=0.0, max_tokens=16))
    text = out[0].outputs[0].text
    print("vllm smoke: started in %.1f s; answer %r" % (started, text))
    if "Paris" not in text:
        print("vllm smoke: FAIL: no 'Paris' in the answer", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
