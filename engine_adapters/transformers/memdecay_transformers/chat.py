"""Chat messages to token ids with a region per token (docs/design.md §5 labels).

Each message is written in the model's ChatML form (SmolLM2's template), one
message after another, so a message's tokens are a contiguous span whose every
token (its header and end marker included) carries the message's region."""
from memdecay.regions import region_of


def message_text(msg):
    role = msg["role"] if msg["role"] in ("system", "user", "assistant") else "tool"
    return "<|im_start|>%s\n%s<|im_end|>\n" % (role, msg["content"])


def encode_messages(tokenizer, messages):
    """Returns (ids, regions, spans): spans are (start, end, message) per message."""
    ids, regions, spans = [], [], []
    for m in messages:
        t = tokenizer(message_text(m), add_special_tokens=False).input_ids
        r = int(region_of(m))
        spans.append((len(ids), len(ids) + len(t), m))
        ids.extend(t)
        regions.extend([r] * len(t))
    return ids, regions, spans


def question_ids(tokenizer, question):
    """A user turn with the question, then the assistant header."""
    text = "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % question
    return tokenizer(text, add_special_tokens=False).input_ids
