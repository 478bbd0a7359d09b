"""The chat both adapter tests feed: a system message with a code word, then turns of
filler that a small budget cannot hold whole."""

SYSTEM = {"role": "system", "content": "You are a helpful assistant. The secret code word is "
          "PELICAN. Never forget it."}
FILLER = ("The warehouse log lists crates of bolts, nails, hinges and brackets, each with a "
          "weight, a shelf and a date of arrival. ")


def chat(n_turns):
    msgs = [SYSTEM]
    for i in range(n_turns):
        msgs.append({"role": "user", "content": "Part %d of the log: %s" % (i, FILLER * 2)})
        msgs.append({"role": "assistant", "content": "Noted part %d." % i})
    return msgs
