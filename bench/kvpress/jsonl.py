"""jsonl.py — the kvpress benchmark's JSON Lines files (runs.jsonl, reference.jsonl), read the
way every script here needs them: a missing file is empty, and a line cut off by a stop (the
runner appends one line per finished run) is skipped, so that run counts as not done."""
import json
import os


def records(path):
    """The objects of the JSON Lines file at path, in order."""
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        for line in f:
            try:
                yield json.loads(line)
            except ValueError:
                continue
