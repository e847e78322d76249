"""Stand-ins for tests that build engines around tiny random models."""

from __future__ import annotations


class TinyTokenizer:
    """What an engine reads from a tokenizer, for a model of 97 tokens (eos 96, pad 0)."""

    eos_token_id = 96
    pad_token_id = 0

    def get_vocab(self) -> dict[str, int]:
        return {}

    def __len__(self) -> int:
        return 97
