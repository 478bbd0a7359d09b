"""The offline LLM API with chat messages, regions and per-request fields.

    from vllm import LLM, SamplingParams
    from memdecay_vllm.offline import chat
    out = chat(llm, messages, SamplingParams(max_tokens=64), budget_tokens=600)

The messages are rendered with the model's chat template (generation prompt
added), labelled as the OpenAI server labels them (api.py), and submitted as
token ids with the regions, budget and policy in SamplingParams.extra_args.
The fields are checked as the server checks them (fields.check): a bad one
raises fields.FieldError, a ValueError naming it, before anything runs."""
from vllm.inputs import TokensPrompt

from . import fields, regions


def prepare(tokenizer, messages, params, budget_tokens=None, policy=None, **template_kwargs):
    """(prompt, params): the token prompt and a copy of params carrying the fields."""
    ids = tokenizer.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=True,
                                        **template_kwargs)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    ids = list(ids)
    try:
        reg = regions.prompt_regions(tokenizer, messages, ids, template_kwargs)
    except ValueError as e:          # a message's region or role
        raise fields.FieldError("messages", "memdecay: %s" % e) from None
    p = params.clone()
    extra = dict(p.extra_args or {})
    fields.check(extra, len(ids))                  # what the caller put there itself
    extra.update(regions.request_args(None, budget_tokens, policy))
    fields.check(extra, len(ids))
    if reg is not None:
        extra[regions.REGIONS_KEY] = regions.rle(reg)
        extra[fields.LABEL_KEY] = fields.NONCE
        fields.check(extra, len(ids), labelled_here=True)
    p.extra_args = extra
    return TokensPrompt(prompt_token_ids=ids), p


def chat(llm, messages, params, budget_tokens=None, policy=None, **kw):
    """One conversation through llm.generate; returns its RequestOutput."""
    prompt, p = prepare(llm.get_tokenizer(), messages, params, budget_tokens, policy, **kw)
    return llm.generate([prompt], p, use_tqdm=False)[0]


def chat_many(llm, conversations, params, budgets=None, policy=None, **kw):
    """Several conversations in one batch; budgets[i] (None: no budget) per conversation."""
    tok = llm.get_tokenizer()
    budgets = budgets or [None] * len(conversations)
    prompts, ps = [], []
    for msgs, b in zip(conversations, budgets):
        pr, p = prepare(tok, msgs, params, b, policy, **kw)
        prompts.append(pr)
        ps.append(p)
    return llm.generate(prompts, ps, use_tqdm=False)
