#!/usr/bin/env python3
"""convert_gguf_hf.py — makes a Hugging Face-format model directory from a GGUF file.

transformers reads the GGUF (with the `gguf` package), dequantizes its tensors to
float32 and builds the tokenizer from the file's vocabulary.  The result is saved as
plain safetensors with the GGUF's quantization note dropped from the config, so any
engine (transformers, vLLM) loads it as an ordinary unquantized model.  Nothing is
fetched from a model hub (HF_HUB_OFFLINE=1 is set before transformers is imported).

Gemma 3 (general.architecture gemma3): transformers 5.2 maps the weights and the
config (gemma3_text, sliding-window layer types), but its GGUF tokenizer for Gemma is
a Unigram model over the vocabulary's scores, which splits words unlike the model
(and llama.cpp) does ("user" -> two pieces).  The tokenizer is built here instead,
as llama.cpp reads the vocabulary (gemma_tokenizer below): a byte-fallback BPE whose
merges are ranked by the score of the piece they make, spaces as U+2581, control
and user-defined tokens matched whole, <bos> prepended by the post-processor.  It
tokenizes the repository's traces exactly as llama.cpp 0.3.36 does (checked on 1,541
texts, 41,487 tokens).  The saved tokenizer carries the adapters' Gemma chat format
as its chat template (each message a turn of its own; docs/transformers.md).

    convert_gguf_hf.py --gguf FILE --out DIR [--check] [--check-shots N]

--check runs a greedy answer to "What is the capital of France?" on the saved model
and fails unless it contains "Paris".  --check-shots 1 puts one answered question
(the capital of Italy) before it: the pretrained Gemma 3 270M, which is not
instruction-tuned, answers a chat turn only after an example.  Prints one JSON line:
the output files and their sha256."""
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


def gguf_architecture(gguf):
    from gguf import GGUFReader
    return str(GGUFReader(gguf).fields["general.architecture"].contents())


# The adapters' Gemma chat format (engine_adapters/transformers/memdecay_transformers/chat.py,
# engine_adapters/llama/md_llama_chat.c): <bos>, then every message a turn of its own,
# assistant as "model", every other role (system, user, tool) as "user".
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n'"
    " + message['content'] + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}")

# llama.cpp's token types (llama_token_type)
TT_NORMAL, TT_CONTROL, TT_USER_DEFINED = 1, 3, 4


def gemma_tokenizer(gguf):
    """The GGUF's SentencePiece-style vocabulary (tokenizer.ggml.model "llama") as a
    tokenizers BPE that segments as llama.cpp's SPM tokenizer does: llama.cpp merges
    the adjacent pair whose concatenation is the vocabulary's highest-scored piece
    first, so every split (left, right) of a normal piece is a merge, ranked by the
    piece's score (the scores of normal pieces are distinct).  Control tokens (<bos>,
    <start_of_turn>, ...) and user-defined ones (newline runs, space runs, tabs) are
    matched whole before the BPE, as llama.cpp partitions the text by them."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    from transformers import PreTrainedTokenizerFast

    f = GGUFReader(gguf).fields
    model = str(f["tokenizer.ggml.model"].contents())
    if model != "llama":
        raise SystemExit("convert_gguf_hf: %s: tokenizer.ggml.model %r, expected 'llama'" % (gguf, model))
    toks = f["tokenizer.ggml.tokens"].contents()
    scores = f["tokenizer.ggml.scores"].contents()
    types = f["tokenizer.ggml.token_type"].contents()
    special = {k: toks[int(f["tokenizer.ggml.%s_token_id" % k].contents())]
               for k in ("bos", "eos", "unknown", "padding")}
    vocab = {t: i for i, t in enumerate(toks)}
    ranked = []
    for t, sc, ty in zip(toks, scores, types):
        if ty != TT_NORMAL:
            continue
        for k in range(1, len(t)):
            left, right = t[:k], t[k:]
            if left in vocab and right in vocab:
                ranked.append((-sc, vocab[left], vocab[right], left, right))
    ranked.sort()
    bpe = models.BPE(vocab=vocab, merges=[(a, b) for _, _, _, a, b in ranked],
                     unk_token=special["unknown"], fuse_unk=True, byte_fallback=True)
    tk = Tokenizer(bpe)
    tk.normalizer = normalizers.Replace(" ", "\u2581")
    tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                    decoders.Fuse()])
    tk.add_tokens([AddedToken(t, special=False, normalized=False)
                   for t, ty in zip(toks, types) if ty == TT_USER_DEFINED])
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(toks, types) if ty == TT_CONTROL])
    bos = special["bos"]
    tk.post_processor = processors.TemplateProcessing(
        single="%s $A" % bos, pair="%s $A %s $B" % (bos, bos), special_tokens=[(bos, vocab[bos])])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=bos, eos_token=special["eos"],
                                   unk_token=special["unknown"], pad_token=special["padding"],
                                   chat_template=GEMMA_CHAT_TEMPLATE)


def convert(gguf, out):
    import torch
    from transformers import AutoConfig, AutoTokenizer, AutoModelForCausalLM

    src_dir, name = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
    arch = gguf_architecture(gguf)
    cfg = AutoConfig.from_pretrained(src_dir, gguf_file=name)
    # the GGUF loader notes the source quantization; the saved weights are plain floats
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    cfg.torch_dtype = "float32"
    if arch == "gemma3":
        tok = gemma_tokenizer(gguf)
    else:
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
    if arch == "gemma3":
        # a turn ends with <end_of_turn>, the text with <eos> (as Google's Gemma 3 configs)
        model.generation_config.eos_token_id = [tok.convert_tokens_to_ids(tok.eos_token),
                                                tok.convert_tokens_to_ids("<end_of_turn>")]
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
    if cfg.get("tokenizer_class") == "TokenizersBackend":
        # what 5.2 writes for a tokenizer built here (Gemma): the same class name as above
        cfg["tokenizer_class"] = FAST_CLASS
        with open(path + ".tmp", "w") as f:
            json.dump(cfg, f, indent=2, ensure_ascii=False)
        os.replace(path + ".tmp", path)
        return
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


def check(out, shots=0):
    import torch
    from transformers import AutoTokenizer, AutoModelForCausalLM
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    msgs = [{"role": "user", "content": "What is the capital of Italy?"},
            {"role": "assistant", "content": "Rome"}][:2 * shots]
    msgs.append({"role": "user", "content": "What is the capital of France?"})
    if tok.chat_template:
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt")
        if not torch.is_tensor(ids):
            ids = ids["input_ids"]
    else:
        text = "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in msgs)
        text += "<|im_start|>assistant\n"
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
    ap.add_argument("--check-shots", type=int, default=0, choices=(0, 1),
                    help="answered example questions before the check's (1 for a pretrained model)")
    a = ap.parse_args()
    if not a.check_only:
        if not os.path.isfile(a.gguf):
            raise SystemExit("convert_gguf_hf: %s: no such file" % a.gguf)
        convert(a.gguf, a.out)
    res = {"out": a.out, "sha256": sha256_dir(a.out),
           "files": sorted(f for f in os.listdir(a.out) if not f.endswith(".sha256"))}
    if a.check or a.check_only:
        res["check_answer"] = check(a.out, a.check_shots)
    print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
