#!/usr/bin/env python3
"""gen_traces.py — synthetic agent traces with planted facts, for the eviction-probe benchmark.

Each trace is one JSON Lines file in the docs/design.md §5 format: a system message, a plan, then
agent "episodes" (user turn, scratchpad, tool call, tool result, retrieved document, reply) with
one short fact planted in every region, filler and look-alike distractor facts around them, and
one probe per planted fact at the end.  Values are random codes, names and numbers, so a probe can
only pass when the fact's tokens are still in the KV cache.  Deterministic by --seed.

    gen_traces.py --out DIR [--seed S] [--short N] [--long N]   write DIR/*.jsonl + manifest.json
    gen_traces.py --self-check                                 the generator's own invariants
"""
import argparse
import hashlib
import json
import os
import random
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probelib import REGIONS  # noqa: E402  (the ABI header's one list)

# Tier → (episodes, facts per region, target estimated tokens).  The estimate is rough (see
# estimate_tokens); memdecay-agent reports the real count, and the runner budgets from that.
TIERS = {
    "short": {"episodes": 2, "facts_per_region": 1, "target_tokens": 450},
    "long": {"episodes": 9, "facts_per_region": 2, "target_tokens": 1700},
}

# Per-message template overhead of a ChatML-style template (<|im_start|>role\n … <|im_end|>\n).
MESSAGE_OVERHEAD_TOKENS = 5
# Tokens the engine keeps as attention sinks under `recency` (one page): a system fact inside them
# would survive every policy and prove nothing, so the first fact sits behind a preamble.
SINK_PAGE_TOKENS = 16

# Keys of planted facts.  Each key is used at most once per trace (facts and distractors share
# the pool), so a question names exactly one value in the whole trace.
KEYS = {
    "code": ["access code", "vault code", "ticket code", "gate code", "batch code", "locker code",
             "permit code", "voucher code", "badge code", "pallet code", "route code", "seal code",
             "door code", "parcel code", "license code", "crate code", "manifest code", "alarm code"],
    "name": ["escalation contact", "account manager", "night supervisor", "driver", "inspector",
             "billing contact", "site lead", "courier", "auditor", "dispatcher", "buyer",
             "safety officer", "duty engineer", "receiving clerk", "vendor contact", "pilot"],
    "number": ["dock number", "invoice total", "room number", "order quantity", "shelf number",
               "pallet count", "trailer number", "budget limit", "bay number", "unit price",
               "case number", "flight number", "weight limit", "box count", "lane number",
               "cabinet number", "batch size"],
    "word": ["password", "project name", "safe word", "product name", "team mascot",
             "radio call sign", "campaign name", "boat name", "server name", "menu item"],
    "place": ["backup warehouse", "meeting city", "origin port", "destination depot",
              "transfer hub", "storage site", "pickup town", "return center"],
}

FIRST = ["Orla", "Tobin", "Marek", "Ilse", "Quinn", "Darya", "Severin", "Nell", "Caspian", "Wren",
         "Bastien", "Yara", "Ottilie", "Rafe", "Linnea", "Corwin", "Mirela", "Anselm", "Theda",
         "Jory", "Elska", "Fenwick", "Greer", "Hollis"]
LAST = ["Venn", "Marsh", "Okafor", "Lindqvist", "Brandt", "Castellan", "Pryce", "Halloran",
        "Vasko", "Tremaine", "Achterberg", "Dunmore", "Reyes", "Kovalenko", "Ashby", "Ferrante",
        "Gallow", "Sutter", "Imhoff", "Quarles", "Rooke", "Delacroix", "Nakashima", "Thorne"]
PLACES = ["Bellmere", "Quarrow", "Dunhollow", "Castorby", "Wexmoor", "Ravensfold", "Tillbury",
          "Marrowick", "Ostvale", "Pendrake", "Harlowe", "Kestrelton", "Voslin", "Ambergate"]
# Codes are a spelling word and two digits: a 135M model copies whole word tokens far more
# reliably than letter-digit jumbles (measured: "F5J-18" came back as "12A-12A").
CODE_WORDS = ["ZULU", "KILO", "TANGO", "OSCAR", "DELTA", "VICTOR", "SIERRA", "ROMEO", "HOTEL",
              "LIMA", "BRAVO", "ECHO", "FOXTROT", "INDIA", "JULIET", "MIKE", "PAPA", "QUEBEC",
              "UNIFORM", "WHISKEY", "YANKEE", "XRAY", "GOLF", "NOVEMBER"]
WORDS = ["marmalade", "lighthouse", "cinnamon", "porcupine", "velvet", "thunderbolt", "saffron",
         "pelican", "quartz", "juniper", "walrus", "lantern", "meadowlark", "tamarind", "glacier",
         "harpoon", "nutmeg", "sandpiper", "obsidian", "pinwheel", "buttercup", "kettledrum",
         "mongoose", "parsnip"]


def value_for(kind, rng):
    if kind == "code":
        return f"{rng.choice(CODE_WORDS)}-{rng.randint(10, 99)}"
    if kind == "word":
        return rng.choice(WORDS)
    if kind == "name":
        return f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    if kind == "number":
        return str(rng.randint(1000, 9899))
    return rng.choice(PLACES)


# Region wrappers: how a fact "The <key> is <value>." sits in each kind of message.  Facts are kept
# short and stated in the same words the probe asks with, so that a 135M model can copy them.
# Names get "'s name" on both sides: asked "Who is the pilot?", the model defines the word.
FACT_SENTENCE = {"name": "The {key}'s name is {value}."}
QUESTION = {"name": "What is the {key}'s name?"}
FACT_DEFAULT, QUESTION_DEFAULT = "The {key} is {value}.", "What is the {key}?"
# Distractors name other keys without a value ("The gate code changes every month."): they pull
# attention towards look-alike sentences, but no probe can be answered from them.  Distractors
# that carried random values of the same kinds cut the full-cache ceiling of the long tier from
# 10/16 to 6/16 on SmolLM2-135M, leaving almost nothing to score, so they carry none.
DISTRACTORS = ["Note that the {key} changes every month.",
               "Nobody has asked about the {key} yet.",
               "The {key} was checked twice last week.",
               "The old {key} is no longer valid."]


FILLER = {
    "user": ["Thanks for the quick help earlier.", "The customer called again this morning.",
             "We are a bit behind schedule this week.", 
             "Our team meets on Thursdays.", "The weather delayed two trucks yesterday.",
             "I am working from the north office today.", "My manager asked for an update.",
             "This is for the quarterly review.", "Sorry for the long message."],
    "assistant": ["I can help with that.", "Let me check the records.", "That is noted.",
                  "Everything else looks in order.",
                  "The request is complete.", "Tell me if anything else comes up.",
                  "I checked the latest entries."],
    "scratchpad": ["Check the request against the records.", "Nothing unusual so far.",
                   "The numbers need to match the order.", "Next, confirm the details.",
                   "The tool result looks consistent."],
    "tool_out": ["status: ok.", "source: records database.", "latency_ms: 41.",
                 "records_found: 3.", "cache: miss.", "format: text."],
    "retrieval": ["This document describes standard handling procedures.",
                  "Shipments are checked on arrival and logged by the receiving team.",
                  "Damaged goods are set aside for inspection.",
                  "The policy applies to all regional depots.",
                  "Staff must sign the transfer sheet at each handover.",
                  "Refrigerated items have priority at every dock.",
                  "Questions about this procedure go to the operations desk."],
}
TOOLS = ["lookup_order", "check_inventory", "get_schedule", "find_contact", "track_shipment",
         "read_ledger"]
REQUESTS = ["Can you check the status of my order?", "I need to reschedule a delivery.",
            "Please look up the inventory for the spring batch.", "Who should I contact about a "
            "damaged crate?", "Can you confirm the pickup details?", "I want to update the "
            "shipping address.", "Please check the invoice for last week.", "Can you find the "
            "schedule for the next transfer?"]


def estimate_tokens(text):
    """Rough BPE token count: word pieces and punctuation, codes split per character class."""
    pieces = re.findall(r"[A-Za-z]+|[0-9]+|[^\sA-Za-z0-9]", text)
    return int(len(pieces) * 1.1) + 1


class Trace:
    def __init__(self, rng):
        self.rng = rng
        self.messages = []          # §5 lines, probes excluded
        self.facts = []             # planted facts, probed at the end
        self.used_keys = set()
        self.used_values = set()
        self.est_tokens = 0

    def take_key(self, kind=None):
        kinds = [kind] if kind else list(KEYS)
        while True:
            if all(key in self.used_keys for ks in KEYS.values() for key in ks):
                raise RuntimeError("key pool exhausted: add keys or shorten the tier")
            k = self.rng.choice(kinds)
            free = [key for key in KEYS[k] if key not in self.used_keys]
            if free:
                key = self.rng.choice(free)
                self.used_keys.add(key)
                return key, k
            kinds = [x for x in kinds if x != k] or list(KEYS)

    def new_value(self, kind):
        # Unique in the trace, so a probe's answer can come from one place only.
        for _ in range(10000):
            v = value_for(kind, self.rng)
            # Names share no first or last name, codes no prefix, with any other value.
            parts = set(re.split(r"[ -]", v))
            if not any(parts & set(re.split(r"[ -]", u)) for u in self.used_values):
                self.used_values.add(v)
                return v
        raise RuntimeError(f"no unused {kind} value left: add values or shorten the tier")

    def new_fact(self, region, kind=None):
        key, k = self.take_key(kind)
        value = self.new_value(k)
        fact = {"region": region, "key": key, "kind": k, "answer": value,
                "question": QUESTION.get(k, QUESTION_DEFAULT).format(key=key),
                "sentence": FACT_SENTENCE.get(k, FACT_DEFAULT).format(key=key, value=value)}
        self.facts.append(fact)
        return fact

    def distractor(self):
        key, _ = self.take_key()
        return self.rng.choice(DISTRACTORS).format(key=key)

    def filler(self, region, n):
        return self.rng.sample(FILLER.get(region, []), n)

    def add(self, msg, facts=()):
        self.est_tokens += estimate_tokens(msg["content"]) + MESSAGE_OVERHEAD_TOKENS
        for f in facts:
            f["message_index"] = len(self.messages)
        self.messages.append(msg)


def system_message(tr, n_facts):
    facts = [tr.new_fact("system", kind) for kind in (["name", "code"][:n_facts])]
    # The preamble puts the rules behind the first page (the attention-sink page that `recency`
    # keeps), so a system probe passes under recency only if recency keeps the system pages.
    preamble = ("You are Atlas, the operations assistant of a freight company. Answer questions "
                "from the conversation, briefly and exactly.")
    rules = " ".join("Rule: " + f["sentence"][0].lower() + f["sentence"][1:] for f in facts)
    content = f"{preamble} {rules}"
    for f in facts:
        f["sentence"] = "Rule: " + f["sentence"][0].lower() + f["sentence"][1:]
    tr.add({"role": "system", "content": content, "region": "system"}, facts)


def plan_message(tr, fact, revision=False):
    head = "Revised plan." if revision else "Plan for this session."
    steps = ["Step 1: read the request.", "Step 2: check the records.",
             f"Step 3: note that {fact['sentence'][0].lower()}{fact['sentence'][1:]}",
             "Step 4: answer the user."]
    fact["sentence"] = steps[2]
    tr.add({"role": "assistant", "content": f"{head} {' '.join(steps)}", "region": "plan"},
           [fact])


def episode(tr, plant, plan_fact=None):
    """One agent turn.  plant: region → fact to plant in this episode (others get filler).
    plan_fact: the first turn also carries the plan, written right after the user's request."""
    rng = tr.rng

    def message(msg, region, head, n_filler, distractor_p):
        # head, then filler sentences with the fact (if any) and maybe a distractor among them.
        body = tr.filler(region, n_filler)
        fact = plant.get(msg.get("region") or {"user": "user", "assistant": "assistant",
                                                "tool": "tool_out"}[msg["role"]])
        if fact:
            body.insert(rng.randrange(len(body) + 1), fact["sentence"])
        if rng.random() < distractor_p:
            body.insert(rng.randrange(len(body) + 1), tr.distractor())
        msg["content"] = " ".join(head + body)
        tr.add(msg, [fact] if fact else [])

    message({"role": "user"}, "user", [rng.choice(REQUESTS)], 2, 0.5)
    if plan_fact:
        plan_message(tr, plan_fact)
    message({"role": "assistant", "region": "scratchpad"}, "scratchpad", ["Thinking."], 2, 0.0)
    tool = rng.choice(TOOLS)
    message({"role": "assistant", "region": "tool_in"}, "tool_in",
            [f'Calling {tool} with {{"request": "current", "limit": {rng.randint(2, 9)}}}.'], 0, 0.0)
    message({"role": "tool", "name": tool}, "tool_out", [], 2, 0.5)
    message({"role": "user", "region": "retrieval"}, "retrieval",
            [f"Document {rng.randint(100, 999)}."], 3, 0.5)
    if "assistant" in plant:
        f = plant["assistant"]
        f["sentence"] = "I have noted that " + f["sentence"][0].lower() + f["sentence"][1:]
    message({"role": "assistant"}, "assistant", [], 2, 0.0)


def make_trace(tier, seed):
    cfg = TIERS[tier]
    rng = random.Random(f"{tier}:{seed}")
    tr = Trace(rng)
    n = cfg["facts_per_region"]
    eps = cfg["episodes"]
    system_message(tr, n)
    # Facts of each episode region: the k-th fact lands in the k-th half of the episodes, so the
    # long tier has one old and one recent fact per region.
    plants = [dict() for _ in range(eps)]
    for region in ["user", "assistant", "tool_in", "tool_out", "retrieval", "scratchpad"]:
        for k in range(n):
            lo, hi = k * eps // n, (k + 1) * eps // n
            plants[rng.randrange(lo, hi)][region] = None
    for p in plants:
        for region in list(p):
            p[region] = tr.new_fact(region)
    # Plan: at the start; the second plan fact (long tier) in a plan revision mid-trace.
    plan_facts = [tr.new_fact("plan") for _ in range(n)]
    revise_at = eps // 2
    for i in range(eps):
        if n > 1 and i == revise_at:
            plan_message(tr, plan_facts[1], revision=True)
        # The first user request comes before the plan, as in a real agent loop.
        episode(tr, plants[i], plan_facts[0] if i == 0 else None)
    recompute_offsets(tr)
    # Probes at the end, in random order.
    facts = list(tr.facts)
    rng.shuffle(facts)
    probes = [{"probe": {"question": f["question"], "answer": f["answer"], "region": f["region"]}}
              for f in facts]
    total = tr.est_tokens
    for f in tr.facts:
        f["age_fraction"] = round(1.0 - f["est_token_offset"] / total, 3)
    return tr.messages, probes, tr.facts, total


def recompute_offsets(tr):
    """Where each fact sits: estimated token offset of its sentence from the trace start."""
    off = 0
    starts = []
    for m in tr.messages:
        starts.append(off)
        off += estimate_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS
    tr.est_tokens = off
    for f in tr.facts:
        if "message_index" in f:
            m = tr.messages[f["message_index"]]
            f["est_token_offset"] = starts[f["message_index"]] + MESSAGE_OVERHEAD_TOKENS + \
                estimate_tokens(m["content"][:m["content"].index(f["sentence"])]) - 1


def trace_name(tier, seed):
    return f"{tier}-s{seed}"


def write_traces(out, seed, n_short, n_long):
    os.makedirs(out, exist_ok=True)
    manifest = {"generator": "bench/probes/gen_traces.py", "seed": seed, "traces": {}}
    for tier, count in (("short", n_short), ("long", n_long)):
        for i in range(count):
            s = seed * 1000 + i
            messages, probes, facts, est = make_trace(tier, s)
            name = trace_name(tier, s)
            text = "".join(json.dumps(l, ensure_ascii=False) + "\n" for l in messages + probes)
            path = os.path.join(out, name + ".jsonl")
            with open(path, "w") as f:
                f.write(text)
            manifest["traces"][name + ".jsonl"] = {
                "tier": tier, "seed": s, "est_tokens": est,
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
                "facts": [{k: f[k] for k in ("region", "question", "answer", "message_index",
                                             "est_token_offset", "age_fraction")} for f in facts]}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    return manifest


def self_check():
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b, \
            tempfile.TemporaryDirectory() as c:
        ma = write_traces(a, 7, 3, 3)
        mb = write_traces(b, 7, 3, 3)
        mc = write_traces(c, 8, 3, 3)
        check(ma == mb, "same seed gives different traces")
        for name in ma["traces"]:
            check(open(os.path.join(a, name)).read() == open(os.path.join(b, name)).read(),
                  f"{name}: not byte-identical across runs with one seed")
        check([t["sha256"] for t in ma["traces"].values()] !=
              [t["sha256"] for t in mc["traces"].values()], "different seeds give same traces")
        for name, meta in ma["traces"].items():
            lines = [json.loads(l) for l in open(os.path.join(a, name))]
            msgs = [l for l in lines if "probe" not in l]
            probes = [l["probe"] for l in lines if "probe" in l]
            check(all("probe" in l for l in lines[len(msgs):]), f"{name}: probes not at the end")
            tier = meta["tier"]
            n = TIERS[tier]["facts_per_region"]
            regions = [p["region"] for p in probes]
            for r in REGIONS:
                check(regions.count(r) == n, f"{name}: {regions.count(r)} {r} probes, want {n}")
            lo, hi = {"short": (350, 560), "long": (1400, 2000)}[tier]
            check(lo <= meta["est_tokens"] <= hi,
                  f"{name}: estimated {meta['est_tokens']} tokens, want {lo}..{hi}")
            for m in msgs:
                check(m.get("role") in ("system", "user", "assistant", "tool"),
                      f"{name}: bad role {m.get('role')}")
                check(isinstance(m.get("content"), str) and m["content"], f"{name}: empty content")
                check(m.get("region", "x") in REGIONS + ["x"], f"{name}: bad region")
                if m["role"] == "tool":
                    check(bool(m.get("name")), f"{name}: tool message without name")
            check(msgs[0]["role"] == "system", f"{name}: first message is not the system prompt")
            questions = [p["question"] for p in probes]
            check(len(set(questions)) == len(questions), f"{name}: duplicate questions")
            body = "\n".join(m["content"] for m in msgs)
            for p, f in zip(sorted(probes, key=lambda p: p["question"]),
                            sorted(meta["facts"], key=lambda f: f["question"])):
                check(p["answer"] == f["answer"] and p["region"] == f["region"],
                      f"{name}: manifest disagrees with probe {p['question']}")
                # The answer appears exactly once, in a message of the probe's region.
                check(body.count(p["answer"]) == 1,
                      f"{name}: answer {p['answer']} appears {body.count(p['answer'])} times")
                m = msgs[f["message_index"]]
                check(p["answer"] in m["content"], f"{name}: fact not in its message")
                label = m.get("region") or {"system": "system", "user": "user",
                                            "assistant": "assistant", "tool": "tool_out"}[m["role"]]
                check(label == p["region"], f"{name}: fact of {p['region']} in a {label} message")
                key = p["question"][len("What is the "):-1]
                check(body.count(f"{key} is") == 1, f"{name}: key '{key}' stated more than once")
            # The system facts sit behind the attention-sink page.
            sys_fact = min(f["est_token_offset"] for f in meta["facts"] if f["region"] == "system")
            check(sys_fact > SINK_PAGE_TOKENS, f"{name}: system fact inside the sink page")
            if tier == "long":
                for r in REGIONS[1:]:
                    ages = sorted(f["age_fraction"] for f in meta["facts"] if f["region"] == r)
                    check(ages[-1] > 0.5, f"{name}: no old {r} fact")
    for f in failures:
        print("self-check FAIL:", f, file=sys.stderr)
    print(f"gen_traces self-check: {'FAIL' if failures else 'ok'} ({len(failures)} failures)")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out/probes/traces", help="output directory")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--short", type=int, default=3, help="number of ~450-token traces")
    ap.add_argument("--long", type=int, default=3, help="number of ~1,700-token traces")
    ap.add_argument("--self-check", action="store_true", help="check the generator's invariants")
    args = ap.parse_args()
    if args.self_check:
        return self_check()
    m = write_traces(args.out, args.seed, args.short, args.long)
    for name, t in sorted(m["traces"].items()):
        print(f"{args.out}/{name}: {t['tier']}, ~{t['est_tokens']} tokens, {len(t['facts'])} probes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
