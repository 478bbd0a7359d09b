"""Chat messages to a region per prompt token, through the model's own chat template.

A message's tokens, its role header and end marker included, carry the
message's region (memdecay.regions.region_of: explicit "region" key, tool
calls tool_in, tool answers tool_out).  The boundaries come from rendering
the conversation's prefixes with the same template: messages[:i+1] must
render to a token prefix of the prompt, which holds for ChatML-style
templates; where it does not, `prompt_regions` returns None and the request
is labelled user throughout (one log line says so).  Tokens after the last
message (the generation prompt) and every generated token are assistant.

Regions travel to the engine in the request's extra arguments as a run-length
list [region, count, region, count, ...] under REGIONS_KEY."""
from memdecay import Region
from memdecay.regions import region_of

REGIONS_KEY = "memdecay_regions"
BUDGET_KEY = "memdecay_budget_tokens"
POLICY_KEY = "memdecay_policy"


def _encode(tokenizer, text):
    return list(tokenizer.encode(text, add_special_tokens=False))


def prompt_regions(tokenizer, messages, prompt_ids, template_kwargs=None):
    """Per-token region ids for prompt_ids, or None when the template's prefixes
    do not line up with the prompt."""
    kw = dict(template_kwargs or {})
    prompt_ids = list(prompt_ids)
    out = []
    for i, m in enumerate(messages):
        text = tokenizer.apply_chat_template(list(messages[:i + 1]), tokenize=False,
                                             add_generation_prompt=False, **kw)
        ids = _encode(tokenizer, text)
        if len(ids) < len(out) or ids != prompt_ids[:len(ids)]:
            return None
        out.extend([int(region_of(m))] * (len(ids) - len(out)))
    out.extend([int(Region.ASSISTANT)] * (len(prompt_ids) - len(out)))
    return out


def rle(regions):
    """[r, r, r, s] -> [r, 3, s, 1]"""
    out = []
    for r in regions:
        if out and out[-2] == r:
            out[-1] += 1
        else:
            out.extend([int(r), 1])
    return out


def unrle(runs, limit):
    """The inverse of rle, checked: at most `limit` tokens, region ids 0..15."""
    if not isinstance(runs, (list, tuple)) or len(runs) % 2:
        raise ValueError("%s must be a flat list of (region, count) pairs" % REGIONS_KEY)
    out = []
    for k in range(0, len(runs), 2):
        r, n = int(runs[k]), int(runs[k + 1])
        if not 0 <= r < 16 or n < 0 or len(out) + n > limit:
            raise ValueError("%s: run (%d, %d) at %d is out of range" % (REGIONS_KEY, r, n, k // 2))
        out.extend([r] * n)
    return out


def request_args(regions=None, budget_tokens=None, policy=None):
    """The extra arguments a request carries (SamplingParams.extra_args, or an
    OpenAI request's vllm_xargs)."""
    a = {}
    if regions is not None:
        a[REGIONS_KEY] = rle(regions)
    if budget_tokens is not None:
        a[BUDGET_KEY] = budget_tokens
    if policy is not None:
        a[POLICY_KEY] = policy
    return a
