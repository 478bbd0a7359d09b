"""MemDecay on Hugging Face transformers (docs/transformers.md).

- `MemDecayPress`: a kvpress ScorerPress whose evictions are memdecayd's, for
  kvpress's one-shot mode and inside `DecodingPress`.
- `MemDecayOnline` + `Feeder`: the online adapter, the daemon's evictions applied
  to the model's cache between turns and decode steps, positions kept.
- `encode_messages`: chat messages to token ids with a region per token."""
from .chat import encode_messages, question_ids, region_of
from .online import Feeder, MemDecayOnline, mean_attention
from .pages import SeqPages, set_budget
from .press import MemDecayPress

__all__ = ["MemDecayPress", "MemDecayOnline", "Feeder", "SeqPages", "encode_messages",
           "question_ids", "region_of", "mean_attention", "set_budget"]
