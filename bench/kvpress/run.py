#!/usr/bin/env python3
"""run.py — MemDecay beside kvpress's presses on one transformers model, same traces, same budgets.

Every row is a policy in a mode at a budget (a fraction of each trace's tokens):
  - kvpress presses (StreamingLLM, TOVA, SnapKV, ObservedAttention, Knorm, ExpectedAttention,
    Random), and memdecayd's policies through the transformers adapter (memdecay,
    memdecay-norm, memdecay-turn, memdecay with λ calibrated on other traces, h2o, recency,
    random);
  - mode `oneshot`: kvpress's own, the whole trace compressed to the budget once, before the
    probes; mode `online`: the cache held at the budget while the trace is fed message by
    message (kvpress's presses inside DecodingPress(compression_interval=1), memdecayd's through
    MemDecayOnline).
Traces come from bench/probes/gen_traces.py (facts planted in every region, a probe per fact).
A reference pass at full cache gives each probe's pass/fail, gold log-probability, next-token
distributions and attention; only probes that pass there are scored.  Per run and probe it
records pass/fail, Δ log-prob of the gold answer, KL(full ‖ policy) over the answer's positions,
and the share of the full cache's attention (the question's queries, per layer and KV head) that
falls on the tokens the policy kept; per online run, KL over the trace's own assistant tokens.
Method and reading: docs/kvpress.md.

    run.py --quick                      # CI smoke: 1 trace, budget 50%, both modes, all rows
    run.py --full --shard 0/2 & run.py --full --shard 1/2   # the committed run, on two cores
                                        # (resumable: finished runs are kept)
    run.py --traces N --seed S --budgets 0.25,0.5 --rows memdecay,kv:snapkv --out DIR

Writes OUT/runs.jsonl (one line per run), OUT/reference.jsonl (full cache, one line per trace),
OUT/calibration.json, OUT/traces/.  Progress on stderr.  Needs the kvpress venv
(scripts/setup_kvpress.sh) and the built daemon (MEMDECAY_BIN, MEMDECAY_LIBRARY)."""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GEN = os.path.join(ROOT, "bench", "probes", "gen_traces.py")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
import kvpress  # noqa: E402
import logging  # noqa: E402
# kvpress warns on every press context for a model class it has not tested (Gemma3ForCausalLM)
logging.getLogger("kvpress").setLevel(logging.ERROR)
from kvpress import DecodingPress  # noqa: E402

from memdecay_transformers import (GEMMA, Feeder, MemDecayOnline, MemDecayPress, chat_format,  # noqa: E402
                                   encode_messages, end_of_turn_id, kv_cache, sliding_window)
from memdecay_transformers.chat import question_ids  # noqa: E402
from memdecay_transformers.daemon import Daemon  # noqa: E402
from memdecay.regions import region_of  # noqa: E402
import fair  # noqa: E402  (bench/kvpress/fair.py)
import jsonl  # noqa: E402  (bench/kvpress/jsonl.py)

MAX_NEW = 16          # greedy answer length, as memdecay-agent's default
TRACE_SEED = 11       # evaluation traces short-s11000…: never used for tuning
CALIB_SEED = 12       # short-s12000…: the traces memdecay-cal's λ is calibrated on
CALIB_TRACES = 4
# --quick, the CI smoke: every row and mode still runs and is scored, on fewer probes
# (each costs a teacher-forced answer per run) and one calibration trace
QUICK_PROBES = 3
QUICK_CALIB_TRACES = 1

KV_PRESSES = {
    "streaming_llm": lambda: kvpress.StreamingLLMPress(),
    "tova": lambda: kvpress.TOVAPress(),
    "snapkv": lambda: kvpress.SnapKVPress(),
    "observed_attention": lambda: kvpress.ObservedAttentionPress(),
    "knorm": lambda: kvpress.KnormPress(),
    "expected_attention": lambda: kvpress.ExpectedAttentionPress(),
    "random": lambda: fair.FreshRandomPress(seed=0),
}
# Presses whose scores assume one prefill over the whole context: ObservedAttention divides by
# arange(k_len, 0, -1) (square prefill attention), ExpectedAttention takes the chunk's length as
# the position its future queries start from.  They run one-shot only (docs/kvpress.md).
ONESHOT_ONLY = {"observed_attention", "expected_attention"}
# a press row is kv:NAME, kv:NAME+pin (system and newest pages kept by maximal score) or
# kv:NAME+pin+page (that, and pages pooled over layers and heads: fair.py)
VARIANTS = ("", "+pin", "+pin+page", "+page")
# row name -> (memdecayd policy, daemon)
MD_ROWS = {
    "memdecay": ("memdecay", "default"),
    "memdecay-norm": ("memdecay-norm", "default"),
    "memdecay-turn": ("memdecay-turn", "default"),
    "memdecay-cal": ("memdecay", "calibrated"),
    "md-h2o": ("h2o", "default"),
    "md-recency": ("recency", "default"),
    "md-random": ("random", "default"),
}
# daemon -> memdecayctl set KEY VALUE pairs applied after it starts
DAEMON_SETTINGS = {"default": [], "calibrated": []}
# memdecay-turn with a recent window of NN% of the budget (memdecay-turn.recent_fraction)
for _w in (25, 50):
    MD_ROWS["memdecay-turn+w%d" % _w] = ("memdecay-turn", "w%d" % _w)
    DAEMON_SETTINGS["w%d" % _w] = [("memdecay-turn.recent_fraction", "%.2f" % (_w / 100))]
# memdecay-turn candidates tuned on the seed-13 traces (docs/kvpress.md, "Tuning"):
#   +dens: region bases ordered by facts per token in the generated traces (scratchpad and
#          tool results dense, retrieved documents sparse) instead of the defaults;
#   +s1:   ages count ten times faster (lambda_scale 1.0 instead of 0.1), so age can move a
#          page across the bases' tiers within a trace.
for _name, _set in {
        "dens": [("memdecay.region.scratchpad.base", "0.8"),
                 ("memdecay.region.retrieval.base", "0.45"),
                 ("memdecay.region.tool_out.base", "0.9")],
        "s1": [("memdecay-turn.lambda_scale", "1.0")]}.items():
    MD_ROWS["memdecay-turn+" + _name] = ("memdecay-turn", _name)
    DAEMON_SETTINGS[_name] = _set
# each MemDecay row also runs unpinned: nothing pinned, protect_recent 0 (the page being
# filled is still kept: an engine cannot free the page it writes into)
NOPIN = [("memdecay.region.system.pinned", "false"), ("protect_recent", "0")]
for _r, (_p, _d) in list(MD_ROWS.items()):
    if _d != "calibrated":
        MD_ROWS[_r + "+nopin"] = (_p, _d + "-nopin")
        DAEMON_SETTINGS[_d + "-nopin"] = DAEMON_SETTINGS[_d] + NOPIN
OLD_ROWS = ["kv:" + k for k in KV_PRESSES] + [r for r in MD_ROWS if "+" not in r]
ALL_ROWS = ["kv:" + k + v for k in KV_PRESSES for v in VARIANTS] + list(MD_ROWS)
# the fair comparison (docs/kvpress.md): every press plain, pinned, and pinned and paged
# (StreamingLLM also paged unpinned, the match of MemDecay's unpinned rows), MemDecay's rows
# pinned and unpinned
FAIR_ROWS = (["kv:" + k + v for k in KV_PRESSES for v in VARIANTS[:3]] + ["kv:streaming_llm+page"]
             + ["memdecay-turn", "memdecay-turn+nopin", "memdecay", "memdecay+nopin",
                "md-recency", "md-recency+nopin", "memdecay-cal", "memdecay-turn+w50"])
# Rows with a host tier and recall (docs/tier.md; docs/kvpress.md, "Recall"): row -> the
# MemDecay row whose policy and daemon it runs.  Every evicted page stays in the tier (it is
# sized for the whole trace, so nothing is dropped), and each probe's question is fed through
# the engine like a turn, so its queries can recall pages before the answer is scored.
#   arkvale-style: the ArkVale-like baseline: recency eviction, no regions, nothing pinned, the
#                  same tier, exact-key estimates and recall rule as MemDecay's row.
#   ROW+tier:      MemDecay's row ROW (any of MD_ROWS) with the tier.
TIER_ROWS = {r + "+tier": r for r in MD_ROWS if MD_ROWS[r][1] != "calibrated"}
TIER_ROWS["arkvale-style"] = "md-recency+nopin"
ALL_ROWS += list(TIER_ROWS)
# the recall comparison (run_fair.sh, step 4) at the resident budgets the issue names: the tier
# rows beside the strongest press and the same MemDecay row without a tier
RECALL_ROWS = ["memdecay-turn+dens+tier", "arkvale-style"]
RECALL_BUDGETS = "0.25,0.5"
ROW_SETS = {"fair": FAIR_ROWS, "old": OLD_ROWS, "all": ALL_ROWS, "recall": RECALL_ROWS}
MODES = ("oneshot", "online")


def log(msg):
    print("kvpress-bench: " + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- traces

def make_traces(out, seed, n):
    """gen_traces.py short tier, deterministic by seed; returns the trace paths."""
    os.makedirs(out, exist_ok=True)
    man = os.path.join(out, "manifest.json")
    if not os.path.exists(man) or json.load(open(man)).get("seed") != seed or \
            len(json.load(open(man))["traces"]) < n:
        subprocess.run([sys.executable, GEN, "--out", out, "--seed", str(seed), "--short", str(n),
                        "--long", "0"], check=True, stdout=subprocess.DEVNULL)
    names = sorted(json.load(open(man))["traces"])[:n]
    return [os.path.join(out, x) for x in names], json.load(open(man))


def load_trace(path):
    msgs, probes = [], []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            o = json.loads(line)
            (probes.append(o["probe"]) if "probe" in o else msgs.append(o))
    return msgs, probes


# ---------------------------------------------------------------- model helpers

class Model:
    def __init__(self, path):
        self.name = os.path.basename(os.path.normpath(path))
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                          attn_implementation="eager")
        self.model.eval()
        cfg = self.model.config
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.fmt = chat_format(self.tok)
        # greedy answers stop at the end of the turn; the pretrained Gemma rarely writes
        # <end_of_turn>, so its end of text stops them too
        self.stop = {end_of_turn_id(self.tok)}
        if self.fmt is GEMMA and self.tok.eos_token_id is not None:
            self.stop.add(self.tok.eos_token_id)
        self.window = sliding_window(self.model.config)

    def feeder(self, tr, probes=True):
        """A Feeder for trace tr.  Sliding-window layers (Gemma 3) are left to the model: every
        position of a trace and its probes is inside the window, so they attend to the whole
        cache like global layers and a press may drop entries per head (Feeder's true-position
        window mask is per layer)."""
        f = Feeder(self.model)
        if self.window:
            longest = self.positions(tr, probes)
            if longest > self.window:
                raise ValueError("%s: %d positions do not fit %s's sliding window of %d"
                                 % (tr.name, longest, self.name, self.window))
            f.window = None
        return f

    def positions(self, tr, probes=True):
        """The most positions a run of tr uses: the trace, then a probe that teacher-forces
        its answer or decodes up to MAX_NEW tokens."""
        return tr.n + (max(len(q) + max(len(a), MAX_NEW) for q, a in zip(tr.q, tr.a))
                       if probes else 0)


def log_softmax(logits):
    return torch.log_softmax(logits.float(), dim=-1)


def kl_rows(ref_lp, lp):
    """Mean over rows of KL(ref ‖ p), both log-probabilities (n, V)."""
    return float((ref_lp.exp() * (ref_lp - lp)).sum(-1).mean())


def contains(text, answer):
    return answer.lower() in text.lower()


class Trace:
    """A trace tokenised once: ids, regions, message spans, and its probes' token ids."""

    def __init__(self, m, path, max_probes=None):
        self.path = path
        self.name = os.path.basename(path)
        msgs, self.probes = load_trace(path)
        if max_probes is not None:      # --quick: the first probes only; the trace is whole
            self.probes = self.probes[:max_probes]
        self.ids, self.regions, self.spans = encode_messages(m.tok, msgs)
        self.n = len(self.ids)
        self.q = [question_ids(m.tok, p["question"]) for p in self.probes]
        self.a = [m.tok(p["answer"], add_special_tokens=False).input_ids for p in self.probes]
        # the trace's own assistant tokens: every message the agent wrote (role assistant)
        self.assistant_spans = [(a, b) for a, b, msg in self.spans if msg["role"] == "assistant"]

    def chunks(self):
        for a, b, _ in self.spans:
            yield a, b


def ask(m, feeder, q, a, want_attention=False):
    """One probe on the feeder's cache, which is left as it was.  Returns (passed, gold_lp,
    answer log-softmax rows (len(a), V), attention (layers, kv heads, cache entries) or None)."""
    phys, pos = feeder.phys_len(), feeder.next_pos
    out = feeder.forward(q + a, output_attentions=want_attention)
    lp = log_softmax(out.logits[0, len(q) - 1:len(q) - 1 + len(a)])
    gold = float(sum(lp[i, t] for i, t in enumerate(a)))
    att = None
    if want_attention:
        per = []
        g = m.n_heads // m.n_kv
        for layer in out.attentions:   # (1, H, q+a, K)
            x = layer[0, :, :len(q), :phys].float().mean(1)          # (H, phys)
            per.append(x.view(m.n_kv, g, phys).mean(1))
        att = torch.stack(per)                                        # (L, KV, phys)
    passed = lp.argmax(-1).tolist() == a  # the greedy answer starts with the gold answer
    if not passed:
        feeder.crop(phys + len(q), pos + len(q))
        passed = greedy_contains(m, feeder, int(out.logits[0, len(q) - 1].argmax()), a)
    feeder.crop(phys, pos)
    return passed, gold, lp, att


def greedy_contains(m, feeder, t, a):
    """Greedy decoding from token t (the first answer token) on the feeder's cache, up to
    MAX_NEW tokens or the end of the turn: whether the text contains the gold answer a."""
    text_ids = []
    while len(text_ids) < MAX_NEW and t not in m.stop:
        text_ids.append(t)
        if contains(m.tok.decode(text_ids), m.tok.decode(a)):
            return True
        t = int(feeder.forward([t]).logits[0, -1].argmax())
    return False


def answer_after(m, feeder, first, a):
    """A probe whose question is already in the feeder's cache (fed through the engine, as the
    tier rows do); first: the logits at the question's last position.  The same scoring as
    ask(): teacher-forced gold answer, then greedy decoding if it does not come first.  The
    cache is left as it was.  Returns (passed, gold_lp, answer log-softmax rows)."""
    phys, pos = feeder.phys_len(), feeder.next_pos
    rows = [first.reshape(1, -1)]
    if len(a) > 1:
        rows.append(feeder.forward(a[:-1]).logits[0])
    lp = log_softmax(torch.cat(rows))
    gold = float(sum(lp[i, t] for i, t in enumerate(a)))
    passed = lp.argmax(-1).tolist() == a
    if not passed:
        feeder.crop(phys, pos)
        passed = greedy_contains(m, feeder, int(first.argmax()), a)
    feeder.crop(phys, pos)
    return passed, gold, lp


def _batched_cache(m, cache, n):
    """A DynamicCache holding `cache`'s entries repeated for n batch rows."""
    c = kv_cache(m.model)
    for li, lay in enumerate(cache.layers):
        c.update(lay.keys.expand(n, -1, -1, -1).contiguous(),
                 lay.values.expand(n, -1, -1, -1).contiguous(), li)
    return c


def _padded_forward(m, cache, pos, rows, left):
    """One batched forward of token lists `rows` after the shared `cache` (true next position
    pos), padded to one length on the left or the right, masked.  Returns (logits, batched
    cache, attention mask, per-row next position)."""
    phys = cache.get_seq_length()
    n, width = len(rows), max(len(r) for r in rows)
    ids = torch.zeros(n, width, dtype=torch.long)
    mask = torch.zeros(n, phys + width, dtype=torch.long)
    mask[:, :phys] = 1
    position = torch.full((n, width), pos, dtype=torch.long)
    for i, r in enumerate(rows):
        off = width - len(r) if left else 0
        ids[i, off:off + len(r)] = torch.tensor(r)
        mask[i, phys + off:phys + off + len(r)] = 1
        position[i, off:off + len(r)] = torch.arange(pos, pos + len(r))
    bc = _batched_cache(m, cache, n)
    out = m.model(input_ids=ids, attention_mask=mask, past_key_values=bc, position_ids=position,
                  cache_position=torch.arange(phys, phys + width), use_cache=True)
    return out.logits, bc, mask, torch.tensor([pos + len(r) for r in rows])


@torch.no_grad()
def ask_all(m, feeder, qs, ans):
    """Every probe (questions qs, gold answers ans) on the feeder's cache, batched: one
    teacher-forced forward of all question+answer rows, then greedy decoding of the rows whose
    answer did not come first, one batched forward per token.  Same results as ask() per
    probe (checked by --check-batch).  Returns [(passed, gold_lp, answer log-softmax)]."""
    pos = feeder.next_pos
    logits, _, _, _ = _padded_forward(m, feeder.cache, pos, [q + a for q, a in zip(qs, ans)],
                                      left=False)
    res = []
    for i, (q, a) in enumerate(zip(qs, ans)):
        lp = log_softmax(logits[i, len(q) - 1:len(q) - 1 + len(a)])
        gold = float(sum(lp[j, t] for j, t in enumerate(a)))
        res.append([lp.argmax(-1).tolist() == a, gold, lp])
    todo = [i for i, r in enumerate(res) if not r[0]]
    if todo:
        logits, bc, mask, nxt = _padded_forward(m, feeder.cache, pos, [qs[i] for i in todo],
                                                left=True)
        phys = mask.shape[1]
        tok = logits[:, -1].argmax(-1)
        gen = [[] for _ in todo]
        live = [True] * len(todo)
        want = [m.tok.decode(ans[i]).lower() for i in todo]
        for step in range(MAX_NEW):
            for k, t in enumerate(tok.tolist()):
                if not live[k]:
                    continue
                if t in m.stop:
                    live[k] = False
                    continue
                gen[k].append(t)
                if want[k] in m.tok.decode(gen[k]).lower():
                    res[todo[k]][0] = True
                    live[k] = False
            if not any(live) or step == MAX_NEW - 1:
                break
            mask = torch.cat([mask, torch.ones(len(todo), 1, dtype=torch.long)], 1)
            out = m.model(input_ids=tok.unsqueeze(1), attention_mask=mask, past_key_values=bc,
                          position_ids=(nxt + step).unsqueeze(1),
                          cache_position=torch.tensor([phys + step]), use_cache=True)
            tok = out.logits[:, -1].argmax(-1)
    return [tuple(r) for r in res]


# ---------------------------------------------------------------- kept-token tracking

class KeptMap:
    """True positions of each layer's and KV head's cache entries, in physical order, for a
    kvpress press (which keeps a different set per head).  Wraps the press's score() to see
    each compression's scores (raised first where `protect` keeps an entry: the +pin rows) and
    repeats the ordered top-k of fair.ordered() on them."""

    def __init__(self, m, press, protect=None, ordered=True):
        self.ordered = ordered
        self.pos = [[[] for _ in range(m.n_kv)] for _ in range(m.n_layers)]
        self.scores = {}
        self.n_fed = 0
        base = press.base_press if isinstance(press, DecodingPress) else press
        orig = base.score

        def score(module, *args, **kw):
            s = orig(module, *args, **kw)
            if protect is not None:
                li = module.layer_idx
                s = torch.stack([fair.pin_scores(s[:, h:h + 1],
                                                 protect.positions(self.pos[li][h], self.n_fed))
                                 for h in range(s.shape[1])], dim=1).squeeze(2)
            self.scores[module.layer_idx] = s.detach()
            return s
        base.score = score

    def append(self, new):
        new = list(new)
        self.n_fed = max(self.n_fed, new[-1] + 1)
        for layer in self.pos:
            for h in layer:
                h.extend(new)

    def settle(self, cache):
        """After a forward: apply every layer's compression seen during it."""
        for li, s in self.scores.items():
            n_kept = cache.layers[li].keys.shape[2]
            idx = s[0].topk(n_kept, dim=-1).indices
            if self.ordered:                                               # fair.ordered()
                idx = idx.sort(dim=-1).values
            self.pos[li] = [[self.pos[li][h][i] for i in idx[h].tolist()]
                            for h in range(len(self.pos[li]))]
        self.scores.clear()

    def phys_count(self):
        return len(self.pos[0][0])


def uniform_map(m, positions):
    return [[list(positions) for _ in range(m.n_kv)] for _ in range(m.n_layers)]


def attention_share(att_full, kept):
    """att_full (L, KV, n_trace) from the full cache; kept[l][h] = positions kept there."""
    tot = att_full.sum(-1)                                             # (L, KV)
    s = 0.0
    n = 0
    for li, layer in enumerate(kept):
        for h, pos in enumerate(layer):
            p = [x for x in pos if x < att_full.shape[-1]]
            s += float(att_full[li, h, p].sum() / tot[li, h]) if p else 0.0
            n += 1
    return s / n


# ---------------------------------------------------------------- reference (full cache)

def reference(m, tr):
    f = m.feeder(tr)
    ref_lp = {}
    for a, b in tr.chunks():
        out = f.forward(tr.ids[a:b], logits_to_keep=ltk(a, b, tr.assistant_spans))
        if (a, b) in tr.assistant_spans:
            ref_lp[(a, b)] = log_softmax(out.logits[0, :-1])
    probes = []
    for i, p in enumerate(tr.probes):
        passed, gold, lp, att = ask(m, f, tr.q[i], tr.a[i], want_attention=True)
        probes.append({"passed": passed, "gold_lp": gold, "lp": lp, "att": att[..., :tr.n]})
    return ref_lp, probes


# ---------------------------------------------------------------- one run

def ltk(a, b, wanted):
    """logits_to_keep for the forward of chunk (a, b): every position's logits where the
    chunk's KL is measured (wanted), else the last one's (a large vocabulary's head is as
    costly as the rest of a small model)."""
    return 0 if (a, b) in wanted else 1


def parse_kv_row(row):
    """kv:NAME[+pin][+page] -> (press name, pinned, paged)."""
    name, *var = row[3:].split("+")
    return name, "pin" in var, "page" in var


def runs_in(row, mode):
    """Whether a row runs in a mode: the presses in ONESHOT_ONLY have no online row, the tier
    rows no one-shot one."""
    if row in TIER_ROWS:
        return mode == "online"
    return not (row.startswith("kv:") and mode == "online"
                and parse_kv_row(row)[0] in ONESHOT_ONLY)


def budget_tokens(n, frac):
    return max(1, int(round(n * frac)))


def feed_press(m, tr, f, row, mode, B, ref_lp=None, ordered=True):
    """Feeds trace tr into feeder f under kvpress row `row` (kv:NAME[+pin][+page]) at budget B
    tokens, one-shot or online.  Returns (kept, kls): the true positions kept per layer and KV
    head, physical order, and the online KL per assistant message of ref_lp.  ordered=False
    runs kvpress's own compress (kept entries in top-k order), for the test that shows why
    fair.ordered() is needed."""
    ref_lp = ref_lp or {}
    wrap = fair.ordered if ordered else (lambda press: press)
    kls = []
    name, pin, paged = parse_kv_row(row)
    make = KV_PRESSES[name]
    needs_att = name == "observed_attention"
    protect = fair.Protect(tr.regions) if pin else None

    def fit_window(base, a, b):
        if name == "snapkv":   # its observation window must fit in the chunk
            base.window_size = max(1, min(64, b - a - 1))
    if paged:
        base = wrap(make())
        runner = fair.PagedRunner(m.model, f, base, B, protect)
        for a, b in ([(0, tr.n)] if mode == "oneshot" else tr.chunks()):
            fit_window(base, a, b)
            out = runner.forward(tr.ids[a:b], output_attentions=needs_att,
                                 logits_to_keep=ltk(a, b, ref_lp))
            if mode == "online" and (a, b) in ref_lp:
                kls.append(kl_rows(ref_lp[(a, b)], log_softmax(out.logits[0, :-1])))
        kept = uniform_map(m, runner.pos)
    elif mode == "oneshot":
        press = wrap(make())
        press.compression_ratio = 1.0 - (B + 0.5) / tr.n
        km = KeptMap(m, press, protect, ordered)
        km.append(range(tr.n))
        with torch.no_grad(), press(m.model):
            f.forward(tr.ids, output_attentions=needs_att, logits_to_keep=1)
        km.settle(f.cache)
        kept = km.pos
    else:
        base = wrap(make())
        press = DecodingPress(base_press=base, compression_interval=1, target_size=B)
        km = KeptMap(m, press, protect, ordered)
        with torch.no_grad(), press(m.model):
            for a, b in tr.chunks():
                fit_window(base, a, b)
                km.append(range(a, b))
                out = f.forward(tr.ids[a:b], output_attentions=needs_att,
                                logits_to_keep=ltk(a, b, ref_lp))
                km.settle(f.cache)
                if (a, b) in ref_lp:
                    kls.append(kl_rows(ref_lp[(a, b)], log_softmax(out.logits[0, :-1])))
        kept = km.pos
    return kept, kls


def feed_online(m, tr, f, policy, d, B, ref_lp, tier_pages=0):
    """Feeds trace tr into feeder f message by message through MemDecayOnline (policy, daemon
    d, budget B tokens, tier_pages of host tier).  Returns (online, KL per assistant message of
    ref_lp)."""
    online = MemDecayOnline(f, policy=policy, budget_tokens=B, socket=d.sock,
                            tier_pages=tier_pages)
    kls = []
    for a, b in tr.chunks():
        out = online.forward(tr.ids[a:b], tr.regions[a:b], logits_to_keep=ltk(a, b, ref_lp))
        if (a, b) in ref_lp:
            kls.append(kl_rows(ref_lp[(a, b)], log_softmax(out.logits[0, :-1])))
    return online, kls


def run_tier(m, tr, ref, row, frac, daemons):
    """A tier row (TIER_ROWS) online at budget frac.  Each scored probe runs on its own copy of
    the trace's run, as every other row's probes do: the trace is fed again (the daemon's
    decisions are deterministic: every copy evicts the same pages), then the question goes
    through the engine as a user turn, under a budget raised by the question's own length (so
    the trace keeps exactly B resident tokens, as in the other rows, whose questions are not
    charged).  Its queries estimate the tier's attention; memdecayd's recall decisions are
    applied before the answer is scored."""
    ref_lp, ref_probes = ref
    B = budget_tokens(tr.n, frac)
    policy, which = MD_ROWS[TIER_ROWS[row]]
    d = daemons[which]
    tier_pages = -(-m.positions(tr) // 16) + 1     # the whole run fits: nothing is dropped
    user = [int(region_of({"role": "user"}))]
    t0 = time.monotonic()
    f = m.feeder(tr)
    online, kls = feed_online(m, tr, f, policy, d, B, ref_lp, tier_pages)
    kept_tokens = f.phys_len()
    feed_stats = dict(online.seq.stats, tier_bytes=online.tier_bytes(),
                      tier_pages=len(online.seq.tier))
    probes = []
    tier_max = feed_stats["tier_bytes"]
    for k, i in enumerate(i for i, rp in enumerate(ref_probes) if rp["passed"]):
        if k:
            f = m.feeder(tr)
            online, _ = feed_online(m, tr, f, policy, d, B, {}, tier_pages)
        q, a = tr.q[i], tr.a[i]
        before = dict(online.seq.stats)
        online.set_budget(B + len(q))
        out = online.forward(q, user * len(q), logits_to_keep=1)
        passed, gold, lp = answer_after(m, f, out.logits[0, -1], a)
        after = online.seq.stats
        tier_max = max(tier_max, online.tier_bytes())
        kept = [x for x in online.kept_positions() if x < tr.n]
        p, rp = tr.probes[i], ref_probes[i]
        probes.append({"question": p["question"], "region": p["region"], "passed": passed,
                       "gold_lp": gold, "full_gold_lp": rp["gold_lp"],
                       "dlp": gold - rp["gold_lp"], "kl_answer": kl_rows(rp["lp"], lp),
                       "att_share": attention_share(rp["att"], uniform_map(m, kept)),
                       "resident_trace_tokens": len(kept),
                       "recalled": after["restores"] - before["restores"],
                       "recall_timeouts": after["recall_timeouts"] - before["recall_timeouts"]})
        online.close()
    return {"trace": tr.name, "model": m.name, "row": row, "mode": "online", "budget": frac,
            "budget_tokens": B, "trace_tokens": tr.n, "kept_tokens": kept_tokens,
            "kl_trace": (sum(kls) / len(kls)) if kls else None,
            "tier_pages_capacity": tier_pages, "tier_bytes_max": tier_max,
            "feed": feed_stats, "wall_s": round(time.monotonic() - t0, 3), "probes": probes}


def run_one(m, tr, ref, row, mode, frac, daemons, ctl):
    if row in TIER_ROWS:
        return run_tier(m, tr, ref, row, frac, daemons)
    ref_lp, ref_probes = ref
    B = budget_tokens(tr.n, frac)
    f = m.feeder(tr)
    kls = []
    t0 = time.monotonic()
    online = None
    if row.startswith("kv:"):
        kept, kls = feed_press(m, tr, f, row, mode, B, ref_lp)
    else:
        policy, which = MD_ROWS[row]
        d = daemons[which]
        if mode == "oneshot":
            press = MemDecayPress(compression_ratio=1.0 - (B + 0.5) / tr.n, policy=policy,
                                  socket=d.sock, memdecayctl=ctl)
            press.feed(tr.regions, list(tr.chunks()))
            with torch.no_grad(), press(m.model):
                f.forward(tr.ids, logits_to_keep=1)
            kept = uniform_map(m, press.cache_pos)
            press.close()
        else:
            online, kls = feed_online(m, tr, f, policy, d, B, ref_lp)
            kept = uniform_map(m, online.kept_positions())
    kept_tokens = f.phys_len()
    probes = []
    scored = [i for i, rp in enumerate(ref_probes) if rp["passed"]]
    answers = ask_all(m, f, [tr.q[i] for i in scored], [tr.a[i] for i in scored]) if scored else []
    for i, (passed, gold, lp) in zip(scored, answers):
        p, rp = tr.probes[i], ref_probes[i]
        probes.append({"question": p["question"], "region": p["region"], "passed": passed,
                       "gold_lp": gold, "full_gold_lp": rp["gold_lp"],
                       "dlp": gold - rp["gold_lp"], "kl_answer": kl_rows(rp["lp"], lp),
                       "att_share": attention_share(rp["att"], kept)})
    if online is not None:
        online.close()
    return {"trace": tr.name, "model": m.name, "row": row, "mode": mode, "budget": frac,
            "budget_tokens": B,
            "trace_tokens": tr.n, "kept_tokens": kept_tokens,
            "kl_trace": (sum(kls) / len(kls)) if kls else None,
            "wall_s": round(time.monotonic() - t0, 3), "probes": probes}


# ---------------------------------------------------------------- calibration (memdecay-cal)

def calibrate(m, d, traces, ctl):
    """Feeds the calibration traces at full cache through d, then `memdecayctl calibrate
    --apply`: d's λ per region from those traces' attention lifetimes (docs/calibration.md)."""
    for path in traces:
        tr = Trace(m, path)
        f = m.feeder(tr, probes=False)
        online = MemDecayOnline(f, policy="memdecay", budget_tokens=0, socket=d.sock)
        for a, b in tr.chunks():
            online.forward(tr.ids[a:b], tr.regions[a:b], logits_to_keep=1)
        online.close()
    r = subprocess.run([ctl, "--socket", d.sock, "--json", "calibrate", "--apply"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode:
        raise RuntimeError("memdecayctl calibrate --apply failed: " + r.stderr.strip())
    return json.loads(r.stdout)


# ---------------------------------------------------------------- main

def check_batch(m, tr):
    """ask_all() against ask() one probe at a time, on a cache a policy shrank (kvpress's
    StreamingLLM at 40%, one-shot): the same pass/fail, gold log-probabilities within 1e-3."""
    f = m.feeder(tr)
    press = kvpress.StreamingLLMPress(compression_ratio=0.6)
    with torch.no_grad(), press(m.model):
        f.forward(tr.ids)
    one = [ask(m, f, q, a)[:2] for q, a in zip(tr.q, tr.a)]
    many = [r[:2] for r in ask_all(m, f, tr.q, tr.a)]
    worst = max(abs(x[1] - y[1]) for x, y in zip(one, many))
    same = [x[0] for x in one] == [y[0] for y in many]
    log("check-batch %s: pass/fail %s (%d of %d pass), largest gold log-prob difference %.2e"
        % (tr.name, "identical" if same else "DIFFERENT", sum(x[0] for x in one), len(one),
           worst))
    return 0 if same and worst < 1e-3 else 1


def start_daemon(bindir, which):
    """A private memdecayd with DAEMON_SETTINGS[which] applied."""
    d = Daemon(bindir)
    for key, value in DAEMON_SETTINGS[which]:
        d.ctl("set", "%s=%s" % (key, value))
    return d


def done_keys(path):
    """Finished runs; a line cut off by a stop is skipped, so that run is redone."""
    return {(o["trace"], o["row"], o["mode"], o["budget"]) for o in jsonl.records(path)}


def screened_out(path, min_pass):
    """Traces an earlier run screened out at this --min-pass (reference.jsonl)."""
    if not min_pass:
        return set()
    return {o["trace"] for o in jsonl.records(path)
            if sum(p["passed"] for p in o["probes"]) < min_pass}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="CI smoke: 1 trace, budget 0.5, %d probes a trace, %d calibration trace"
                    % (QUICK_PROBES, QUICK_CALIB_TRACES))
    ap.add_argument("--full", action="store_true", help="the full run: 3 budgets, 10 traces unless --traces "
                    "(run_full.sh: --traces 19 --min-pass 5)")
    ap.add_argument("--shard", default="0/1", help="K/N: run traces K, K+N, ... (N processes "
                    "share one --out; each starts its own daemons)")
    ap.add_argument("--traces", type=int, help="number of evaluation traces")
    ap.add_argument("--seed", type=int, default=TRACE_SEED)
    ap.add_argument("--min-pass", type=int, default=0, metavar="K",
                    help="screen: run a trace only if at least K of its probes pass at full cache "
                    "(only those are scored anyway; the screen saves the runs of traces the model "
                    "cannot answer).  Traces with finished runs are kept whatever K is")
    ap.add_argument("--budgets", help="comma-separated fractions of each trace (0.25,0.5,0.75)")
    ap.add_argument("--rows", default="fair",
                    help="comma-separated rows, or a set: fair (the default: %s), old (the rows "
                    "of the first run, results/runs.jsonl), all (%s)"
                    % (",".join(FAIR_ROWS), ",".join(ALL_ROWS)))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", help="output directory (default bench/kvpress/results, "
                    "or a temporary one with --quick)")
    ap.add_argument("--check-batch", action="store_true",
                    help="check batched probe scoring against one probe at a time, and exit")
    ap.add_argument("--prepare", action="store_true", help="write the traces and exit")
    ap.add_argument("--model", default=os.environ.get("MEMDECAY_HF_MODEL"))
    ap.add_argument("--bin", default=os.environ.get("MEMDECAY_BIN"))
    a = ap.parse_args()
    if not a.model or not os.path.isdir(a.model):
        ap.error("no model directory: pass --model or set MEMDECAY_HF_MODEL "
                 "(scripts/setup_kvpress.sh writes it to .deps/kvpress.env)")
    if not a.bin or not os.access(os.path.join(a.bin, "memdecayd"), os.X_OK):
        ap.error("no memdecayd: pass --bin DIR or set MEMDECAY_BIN to the build's bin directory")
    n_traces = a.traces or (1 if a.quick else 10)
    budgets = [float(x) for x in (a.budgets or ("0.5" if a.quick else "0.25,0.5,0.75")).split(",")]
    rows = []
    for r in a.rows.split(","):     # a set's name stands for its rows
        rows += [x for x in ROW_SETS.get(r, [r]) if x not in rows]
    for r in rows:
        if r not in ALL_ROWS:
            ap.error("unknown row %r (rows: %s)" % (r, ", ".join(ALL_ROWS)))
    try:
        shard, n_shards = (int(x) for x in a.shard.split("/"))
        assert 0 <= shard < n_shards
    except (ValueError, AssertionError):
        ap.error("--shard wants K/N with 0 <= K < N, not %r" % a.shard)
    modes = a.modes.split(",")
    for mo in modes:
        if mo not in MODES:
            ap.error("unknown mode %r (modes: %s)" % (mo, ", ".join(MODES)))
    out = a.out
    if not out:
        if a.quick:
            import tempfile
            out = tempfile.mkdtemp(prefix="kvpress-quick-")
        else:
            out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("MEMDECAY_TORCH_THREADS", "1" if n_shards > 1 else "2")))

    traces, manifest = make_traces(os.path.join(out, "traces"), a.seed, n_traces)
    ages = {(name, f["question"]): f["age_fraction"]
            for name, t in manifest["traces"].items() for f in t["facts"]}
    traces = traces[shard::n_shards]
    calib, _ = make_traces(os.path.join(out, "calib-traces"), CALIB_SEED,
                           QUICK_CALIB_TRACES if a.quick else CALIB_TRACES)
    max_probes = QUICK_PROBES if a.quick else None
    if a.prepare:
        log("traces in %s" % os.path.join(out, "traces"))
        return
    m = Model(a.model)
    if m.fmt is GEMMA:   # kvpress's ExpectedAttention fails on Gemma 3's rotary embedding
        gone = [r for r in rows if r.startswith("kv:expected_attention")]
        rows = [r for r in rows if r not in gone]
        if gone:
            log("%s: no %s (kvpress's ExpectedAttention does not run on Gemma 3)"
                % (m.name, ", ".join(gone)))
    if a.check_batch:
        sys.exit(max(check_batch(m, Trace(m, p)) for p in traces[:2]))
    ctl = os.path.join(a.bin, "memdecayctl")
    runs_path = os.path.join(out, "runs.jsonl")
    done = done_keys(runs_path)
    names = {os.path.basename(p) for p in traces}
    done = {k for k in done if k[0] in names and k[1] in rows and k[2] in modes and k[3] in budgets}
    screened = screened_out(os.path.join(out, "reference.jsonl"), a.min_pass)
    todo_total = len(traces) * len(budgets) * sum(runs_in(r, mo) for r in rows for mo in modes)
    log("%d traces x %d rows x %d modes x %d budgets = %d runs (%d already in %s)"
        % (len(traces), len(rows), len(modes), len(budgets), todo_total, len(done), runs_path))
    daemons = {}
    try:
        md_rows = [TIER_ROWS.get(r, r) for r in rows]
        for which in sorted({MD_ROWS[r][1] for r in md_rows if r in MD_ROWS} - {"calibrated"}):
            daemons[which] = start_daemon(a.bin, which)
        if any(MD_ROWS.get(r, (None, None))[1] == "calibrated" for r in rows):
            daemons["calibrated"] = Daemon(a.bin)
            cal_path = os.path.join(out, "calibration.json" if shard == 0 else
                                    "calibration.%d.json" % shard)
            t0 = time.monotonic()
            cal = calibrate(m, daemons["calibrated"], calib, ctl)
            cal["traces"] = [os.path.relpath(p, out) for p in calib]
            with open(cal_path, "w") as fh:
                json.dump(cal, fh, indent=1)
            applied = {e["region"]: e["lambda"] for e in cal["regions"] if e.get("applied")}
            log("memdecay-cal: λ from %d calibration traces in %.0f s: %s"
                % (len(calib), time.monotonic() - t0,
                   ", ".join("%s %.4f" % kv for kv in sorted(applied.items())) or "none applied"))
        n_done = 0
        t_start = time.monotonic()
        with open(os.path.join(out, "reference.jsonl"), "a") as refs, open(runs_path, "a") as fo:
            for ti, path in enumerate(traces):
                tr = Trace(m, path, max_probes)
                pending = [(r, mo, b) for r in rows for mo in modes for b in budgets
                           if runs_in(r, mo) and (tr.name, r, mo, b) not in done]
                if not pending:
                    continue
                started = any(k[0] == tr.name for k in done)
                if m.window and m.positions(tr) > m.window:
                    log("trace %d/%d %s: left out, %d positions do not fit %s's sliding window "
                        "of %d" % (ti + 1, len(traces), tr.name, m.positions(tr), m.name,
                                   m.window))
                    todo_total -= len(pending)
                    continue
                if tr.name in screened and not started:
                    log("trace %d/%d %s: screened out earlier (fewer than %d probes pass at full "
                        "cache)" % (ti + 1, len(traces), tr.name, a.min_pass))
                    todo_total -= len(pending)
                    continue
                t0 = time.monotonic()
                ref = reference(m, tr)
                n_pass = sum(p["passed"] for p in ref[1])
                out_screen = n_pass < a.min_pass and not started
                refs.write(json.dumps({"trace": tr.name, "tokens": tr.n,
                                       "screened_out": out_screen, "min_pass": a.min_pass,
                                       "probes": [{"question": p["question"],
                                                   "region": p["region"], "passed": rp["passed"],
                                                   "gold_lp": rp["gold_lp"]}
                                                  for p, rp in zip(tr.probes, ref[1])]}) + "\n")
                refs.flush()
                log("trace %d/%d %s: %d tokens, %d/%d probes pass at full cache (%.1f s)%s"
                    % (ti + 1, len(traces), tr.name, tr.n, n_pass, len(tr.probes),
                       time.monotonic() - t0,
                       "; screened out (--min-pass %d)" % a.min_pass if out_screen else ""))
                if out_screen:
                    todo_total -= len(pending)
                    continue
                for r, mo, b in pending:
                    res = run_one(m, tr, ref, r, mo, b, daemons, ctl)
                    for p in res["probes"]:
                        p["age_fraction"] = ages.get((tr.name, p["question"]))
                    fo.write(json.dumps(res) + "\n")
                    fo.flush()
                    n_done += 1
                    el = time.monotonic() - t_start
                    left = todo_total - len(done) - n_done
                    log("  %-22s %-7s %.2f kept %4d/%d  passed %d/%d  %.1f s  [%d left, ~%.0f min]"
                        % (r, mo, b, res["kept_tokens"], tr.n,
                           sum(p["passed"] for p in res["probes"]), len(res["probes"]),
                           res["wall_s"], left, left * el / n_done / 60))
    finally:
        for d in daemons.values():
            d.stop()
    log("done: %s" % runs_path)
    print(out)


if __name__ == "__main__":
    main()
