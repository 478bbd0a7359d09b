"""API server: regions for every chat completion request, and the request
fields checked where the client can still be told.

vLLM renders the request's messages through the chat template
(OpenAIServingChat.render_chat_request); the hook then labels the rendered
prompt's tokens (regions.prompt_regions) and adds them to the request's
vllm_xargs, which vLLM hands to the engine as SamplingParams.extra_args.  The
per-request budget and policy arrive the same way, set by the client:
extra_body={"vllm_xargs": {"memdecay_budget_tokens": 600}}.

Every MemDecay field is checked (fields.check) right after rendering, for chat
and completion requests alike, so a bad field is a 400 naming it before any
stream starts; and once more in vLLM's InputProcessor.process_inputs, the one
door every request of this process goes through (the other endpoints, and
the offline LLM), where it is refused as vLLM refuses its own bad parameters.
docs/vllm.md "Bad requests"."""

from . import fields, log, regions

_warned = set()


def _warn_once(key, msg, *args):
    if key in _warned:
        return
    _warned.add(key)
    log.logger().warning(msg, *args)


def _template_kwargs(request):
    kw = dict(request.chat_template_kwargs or {})
    if request.tools:
        kw["tools"] = [t.model_dump() if hasattr(t, "model_dump") else t for t in request.tools]
    return kw


def _prompt_ids(serving, engine_input):
    return list(serving._extract_prompt_components(engine_input).token_ids or ())


def annotate(serving, request, engine_inputs):
    """Checks the client's fields, labels the prompt from its messages (unless
    the client sent its own labels and may), and checks the result; raises
    fields.FieldError."""
    xargs = request.vllm_xargs
    fields.check_session_id(getattr(request, "session_id", None))
    if len(engine_inputs) != 1:
        for e in engine_inputs:
            fields.check(xargs, len(_prompt_ids(serving, e)))
        return
    ids = _prompt_ids(serving, engine_inputs[0])
    fields.check(xargs, len(ids))
    if not ids or (xargs or {}).get(regions.REGIONS_KEY) is not None:
        return
    tok = serving.renderer.tokenizer
    try:
        reg = regions.prompt_regions(tok, request.messages, ids, _template_kwargs(request))
    except ValueError as e:          # a message's region or role: the client's mistake
        raise fields.FieldError("messages", "memdecay: %s" % e) from None
    if reg is None:
        _warn_once("prefix", "memdecay_vllm: the chat template's prefixes do not line up with "
                   "the prompt; requests are labelled user throughout")
        return
    xargs = dict(xargs or {})
    xargs[regions.REGIONS_KEY] = regions.rle(reg)
    xargs[fields.LABEL_KEY] = fields.NONCE
    fields.check(xargs, len(ids), labelled_here=True)     # the pinned-token cap
    request.vllm_xargs = xargs


def _refusal(serving, e):
    return serving.create_error_response(str(e), param=e.field)


# ---- the wrappers (hooks.py's table names the methods and their signatures) ----

def wrap_render_chat_request(orig):
    from vllm.entrypoints.serve.engine.protocol import ErrorResponse

    async def render_chat_request(self, request):
        result = await orig(self, request)
        if not isinstance(result, ErrorResponse):
            try:
                annotate(self, request, result[1])
            except fields.FieldError as e:
                return _refusal(self, e)
        return result
    return render_chat_request


def wrap_render_completion_request(orig):
    from vllm.entrypoints.serve.engine.protocol import ErrorResponse

    async def render_completion_request(self, request):
        result = await orig(self, request)
        if not isinstance(result, ErrorResponse):
            try:
                fields.check_session_id(getattr(request, "session_id", None))
                for e in result:
                    fields.check(request.vllm_xargs, len(_prompt_ids(self, e)))
            except fields.FieldError as e:
                return _refusal(self, e)
        return result
    return render_completion_request


def wrap_process_inputs(orig):
    from vllm.exceptions import VLLMValidationError

    def process_inputs(self, request_id, prompt, params, *args, **kwargs):
        extra = getattr(params, "extra_args", None)
        if extra and any(isinstance(k, str) and k.startswith(fields.PREFIX) for k in extra):
            ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else None
            try:
                if ids is None and extra.get(regions.REGIONS_KEY) is not None:
                    # a text prompt: rendered inside process_inputs, after this check
                    raise fields.FieldError(regions.REGIONS_KEY, "%s needs a prompt of token "
                                            "ids" % regions.REGIONS_KEY)
                fields.check(extra, len(ids) if ids is not None else 0)
            except fields.FieldError as e:
                raise VLLMValidationError(str(e), parameter=e.field) from None
        return orig(self, request_id, prompt, params, *args, **kwargs)
    return process_inputs
