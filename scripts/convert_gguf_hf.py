#!/usr/bin/env python3
"""convert_gguf_hf.py — makes a Hugging Face-format model directory from a GGUF file.

transformers reads the GGUF (with the `gguf` package), dequantizes its tensors to
float32 and builds the tokenizer from the file's vocabulary.  The result is saved as
plain safetensors with the GGUF's quantization note dropped from the config, so any
engine (transformers, vLLM) loads it as an ordinary unquantized model.  Nothing is
fetched from a model hub (HF_HUB_OFFLINE=1 is set before transformers is imported).

    convert_gguf_hf.py --gguf FILE --out DIR [--check]

--check runs a greedy answer to "What is the capital of France?" on the saved model
and fails unless it contains "Paris".  Prints one JSON line: the output files and
their sha256."""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def sha256_dir(d):
    """sha256 over every file of d (names and contents, sorted)."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if not os.path.isfile(p) or name.endswith(".sha256"):
            continue
        h.update(name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def convert(gguf, out):
    import torch
    from transformers import AutoConfig, AutoTokenizer, AutoModelForCausalLM

    src_dir, name = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
    cfg = AutoConfig.from_pretrained(src_dir, gguf_file=name)
    # the GGUF loader notes the source quantization; the saved weights are plain floats
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    cfg.torch_dtype = "float32"
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in loaded.state_dict().items()}
    del loaded
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # tied embeddings share one tensor: lm_head may be absent from the GGUF's names
    missing = [k for k in missing if not (k == "lm_head.weight" and cfg.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit("convert_gguf_hf: %s: state dict mismatch: missing %s, unexpected %s"
                         % (gguf, missing[:5], unexpected[:5]))
    if cfg.tie_word_embeddings:
        model.tie_weights()
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".convert-", dir=parent)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        plain_tokenizer_config(os.path.join(tmp, "tokenizer_config.json"))
        if os.path.exists(out):
            shutil.rmtree(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# What the GGUF loader of transformers 5.2 writes for a byte-level BPE vocabulary
# ("gpt2"), beside the right tokenizer.json: a CodeLlama class with its infill tokens.
# Newer transformers (vLLM's venv has 5.19) honour the class and tokenize as
# sentencepiece, with an <|endoftext|> between every two words; older ones read
# tokenizer.json alone.  The class that reads tokenizer.json as it is, in both:
FAST_CLASS = "PreTrainedTokenizerFast"
CODELLAMA_KEYS = ("prefix_token", "middle_token", "suffix_token", "eot_token", "fill_token",
                  "legacy", "use_default_system_prompt")


def plain_tokenizer_config(path):
    with open(path) as f:
        cfg = json.load(f)
    if cfg.get("tokenizer_class") != "CodeLlamaTokenizer":
        return
    infill = {cfg.get(k) for k in CODELLAMA_KEYS}
    for k in CODELLAMA_KEYS:
        cfg.pop(k, None)
    if isinstance(cfg.get("extra_special_tokens"), list):
        cfg["extra_special_tokens"] = [t for t in cfg["extra_special_tokens"] if t not in infill]
    cfg["tokenizer_class"] = FAST_CLASS
    with open(path + ".tmp", "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    os.replace(path + ".tmp", path)


def check(out):
    import torch
    from transformers import AutoTokenizer, AutoModelForCausalLM
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    model.eval()
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    if tok.chat_template:
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt")
        if not torch.is_tensor(ids):
            ids = ids["input_ids"]
    else:
        text = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
        ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=16, do_sample=False)
    answer = tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)
    if "paris" not in answer.lower():
        raise SystemExit("convert_gguf_hf: %s: greedy answer to the check question lacks "
                         "'Paris': %r" % (out, answer))
    return answer


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, help="the .gguf file")
    ap.add_argument("--out", required=True, help="output directory (replaced)")
    ap.add_argument("--check", action="store_true", help="greedy 'capital of France' check")
    ap.add_argument("--check-only", action="store_true", help="only check an existing --out")
    a = ap.parse_args()
    if not a.check_only:
        if not os.path.isfile(a.gguf):
            raise SystemExit("convert_gguf_hf: %s: no such file" % a.gguf)
        convert(a.gguf, a.out)
    res = {"out": a.out, "sha256": sha256_dir(a.out),
           "files": sorted(f for f in os.listdir(a.out) if not f.endswith(".sha256"))}
    if a.check or a.check_only:
        res["check_answer"] = check(a.out)
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
