"""MemDecay on Hugging Face transformers (docs/transformers.md).

- `MemDecayPress`: a kvpress ScorerPress whose evictions are memdecayd's, for
  kvpress's one-shot mode and inside `DecodingPress`.
- `MemDecayOnline` + `Feeder`: the online adapter, the daemon's evictions applied
  to the model's cache between turns and decode steps, positions kept.
  `kv_cache(model)`: the cache to give a model (and kvpress) so that entries
  can be dropped: every layer keeps every entry, sliding-window layers too.
- `encode_messages`: chat messages to token ids with a region per token, in the
  model's chat format (`chat_format`: ChatML for SmolLM2, Gemma turns for Gemma;
  `end_of_turn_id` is the token that ends a turn)."""
from .chat import (CHATML, GEMMA, ChatFormat, assistant_header_ids, chat_format, encode_messages,
                   end_of_turn_id, question_ids, region_of)
from .online import Feeder, MemDecayOnline, kv_cache, mean_attention, sliding_window
from .pages import SeqPages, set_budget
from .press import MemDecayPress

__all__ = ["MemDecayPress", "MemDecayOnline", "Feeder", "SeqPages", "encode_messages",
           "question_ids", "assistant_header_ids", "end_of_turn_id", "chat_format", "ChatFormat",
           "CHATML", "GEMMA", "region_of", "mean_attention", "set_budget", "kv_cache",
           "sliding_window"]
