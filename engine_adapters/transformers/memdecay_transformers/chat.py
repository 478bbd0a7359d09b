"""Chat messages to token ids with a region per token (docs/design.md §5 labels).

Each message is written in the model's chat format, one message after another,
so a message's tokens are a contiguous span whose every token (its header and
end marker included) carries the message's region.  Two formats:

- `CHATML` (SmolLM2's template): `<|im_start|>{role}\\n{content}<|im_end|>\\n`, any
  role other than system, user and assistant written as `tool`; the assistant
  header is `<|im_start|>assistant\\n`; a turn ends with `<|im_end|>`; no BOS.
- `GEMMA` (Gemma 2/3): every message a turn of its own,
  `<start_of_turn>{user|model}\\n{content}<end_of_turn>\\n`: assistant as `model`,
  every other role (system, user, tool, ...) as `user`.  Gemma has no system
  role; Google's template puts the system text at the head of the first user
  turn, which would give the system message no span of its own, so it gets a
  user turn of its own instead.  The assistant header is
  `<start_of_turn>model\\n`; a turn ends with `<end_of_turn>`.  Gemma expects
  `<bos>` at the start of the sequence: `encode_messages` puts it before the
  first message, inside that message's span (so it takes the system region and
  is pinned with it); a question appended later gets none.

The format is detected from the tokenizer (`chat_format`): its chat template,
else its vocabulary (`<start_of_turn>` -> Gemma, `<|im_start|>` -> ChatML), else
ChatML.  Every function takes `fmt=` ("chatml", "gemma" or a ChatFormat) to
override the detection.  Without a tokenizer (`message_text(msg)`) the format
is ChatML, as before."""
from dataclasses import dataclass

from memdecay.regions import region_of


@dataclass(frozen=True)
class ChatFormat:
    name: str
    turn: str               # % (role, content)
    assistant_header: str
    end_of_turn: str        # the token that ends a turn
    bos: bool               # BOS before the first message
    roles: tuple            # roles written as they are ...
    other_role: str         # ... and the role every other one is written as
    assistant_role: str     # what the assistant role is written as

    def role(self, role):
        if role == "assistant":
            return self.assistant_role
        return role if role in self.roles else self.other_role

    def message_text(self, msg):
        return self.turn % (self.role(msg["role"]), msg["content"])


CHATML = ChatFormat("chatml", "<|im_start|>%s\n%s<|im_end|>\n", "<|im_start|>assistant\n",
                    "<|im_end|>", False, ("system", "user"), "tool", "assistant")
GEMMA = ChatFormat("gemma", "<start_of_turn>%s\n%s<end_of_turn>\n", "<start_of_turn>model\n",
                   "<end_of_turn>", True, ("user",), "user", "model")
FORMATS = {f.name: f for f in (CHATML, GEMMA)}


def _vocab_has(tokenizer, token):
    try:
        i = tokenizer.convert_tokens_to_ids(token)
    except (KeyError, ValueError, TypeError):
        return False
    return i is not None and i != getattr(tokenizer, "unk_token_id", None)


def chat_format(tokenizer=None, fmt=None):
    """The ChatFormat for `tokenizer`, or `fmt` when given (a name or a ChatFormat)."""
    if isinstance(fmt, ChatFormat):
        return fmt
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError("fmt: %r is not a chat format (%s)" % (fmt, ", ".join(FORMATS)))
        return FORMATS[fmt]
    if tokenizer is None:
        return CHATML
    cached = getattr(tokenizer, "_memdecay_chat_format", None)
    if cached is not None:
        return cached
    tmpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tmpl, dict):          # named templates: the default one
        tmpl = tmpl.get("default") or next(iter(tmpl.values()), None)
    if isinstance(tmpl, str) and "<start_of_turn>" in tmpl:
        found = GEMMA
    elif isinstance(tmpl, str) and "<|im_start|>" in tmpl:
        found = CHATML
    elif _vocab_has(tokenizer, "<start_of_turn>"):
        found = GEMMA
    else:
        found = CHATML
    try:
        tokenizer._memdecay_chat_format = found
    except AttributeError:  # pragma: no cover
        pass
    return found


def message_text(msg, fmt=None):
    """One message as text; ChatML unless fmt says otherwise."""
    return chat_format(None, fmt).message_text(msg)


def encode_messages(tokenizer, messages, fmt=None):
    """Returns (ids, regions, spans): spans are (start, end, message) per message."""
    f = chat_format(tokenizer, fmt)
    ids, regions, spans = [], [], []
    for m in messages:
        t = tokenizer(f.message_text(m), add_special_tokens=False).input_ids
        if f.bos and not ids:
            t = [tokenizer.bos_token_id] + list(t)
        r = int(region_of(m))
        spans.append((len(ids), len(ids) + len(t), m))
        ids.extend(t)
        regions.extend([r] * len(t))
    return ids, regions, spans


def question_ids(tokenizer, question, fmt=None):
    """A user turn with the question, then the assistant header."""
    f = chat_format(tokenizer, fmt)
    text = f.message_text({"role": "user", "content": question}) + f.assistant_header
    return tokenizer(text, add_special_tokens=False).input_ids


def assistant_header_ids(tokenizer, fmt=None):
    """The assistant header alone (what follows a prompt before the model answers)."""
    return tokenizer(chat_format(tokenizer, fmt).assistant_header, add_special_tokens=False).input_ids


def end_of_turn_id(tokenizer, fmt=None):
    """The token id that ends a turn: <|im_end|> (ChatML), <end_of_turn> (Gemma)."""
    return tokenizer.convert_tokens_to_ids(chat_format(tokenizer, fmt).end_of_turn)
