"""API server: regions for every chat completion request.

vLLM renders the request's messages through the chat template
(OpenAIServingChat.render_chat_request); the hook then labels the rendered
prompt's tokens (regions.prompt_regions) and adds them to the request's
vllm_xargs, which vLLM hands to the engine as SamplingParams.extra_args.  The
per-request budget and policy arrive the same way, set by the client:
extra_body={"vllm_xargs": {"memdecay_budget_tokens": 600}}."""
import functools

from . import regions

_warned = set()


def _warn_once(key, msg, *args):
    if key in _warned:
        return
    _warned.add(key)
    from vllm.logger import init_logger
    init_logger("vllm.memdecay").warning(msg, *args)


def _template_kwargs(request):
    kw = dict(request.chat_template_kwargs or {})
    if request.tools:
        kw["tools"] = [t.model_dump() if hasattr(t, "model_dump") else t for t in request.tools]
    return kw


def annotate(serving, request, engine_inputs):
    if len(engine_inputs) != 1 or (request.vllm_xargs or {}).get(regions.REGIONS_KEY):
        return
    ids = serving._extract_prompt_components(engine_inputs[0]).token_ids
    if not ids:
        return
    tok = serving.renderer.tokenizer
    try:
        reg = regions.prompt_regions(tok, request.messages, ids, _template_kwargs(request))
    except ValueError as e:          # a message's region or role: the client's mistake
        raise ValueError("memdecay: %s" % e) from None
    if reg is None:
        _warn_once("prefix", "memdecay_vllm: the chat template's prefixes do not line up with "
                   "the prompt; requests are labelled user throughout")
        return
    request.vllm_xargs = dict(request.vllm_xargs or {})
    request.vllm_xargs[regions.REGIONS_KEY] = regions.rle(reg)


def install():
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.entrypoints.serve.engine.protocol import ErrorResponse
    orig = OpenAIServingChat.render_chat_request
    if getattr(orig, "_memdecay", False):
        return

    @functools.wraps(orig)
    async def render_chat_request(self, request):
        result = await orig(self, request)
        if not isinstance(result, ErrorResponse):
            try:
                annotate(self, request, result[1])
            except ValueError as e:
                return self.create_error_response(str(e))
        return result

    render_chat_request._memdecay = True
    OpenAIServingChat.render_chat_request = render_chat_request
