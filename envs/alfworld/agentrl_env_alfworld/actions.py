"""Free text → an admissible command, and the repeat rule, as AgentBench's ALFWorld task does.

``process_action`` (AgentBench's ``utils.process_action``): the first line of the action,
stripped and lower-cased; an admissible command as it is; otherwise the admissible command with
the highest sentence BLEU (NLTK, smoothing method 4) if that is above 0.01, else the text as it
is (the engine then answers ``Nothing happens.``).
"""

from __future__ import annotations

from collections.abc import Sequence

from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

BLEU_LIMIT = 0.01
_SMOOTHING = SmoothingFunction().method4


def bleu_score(reference: str, candidate: str) -> float:
    return sentence_bleu([reference.split()], candidate.split(), smoothing_function=_SMOOTHING)


def process_action(action: str, choices: Sequence[str], limit: float = BLEU_LIMIT) -> str:
    """The command that ``action`` (free text) stands for among ``choices``."""
    action = action.strip().lower().split("\n")[0]
    if not choices or action in choices:
        return action
    scores = [bleu_score(choice, action) for choice in choices]
    best = max(range(len(choices)), key=lambda i: (scores[i], -i))  # numpy.argmax: the first best
    return choices[best] if scores[best] > limit else action


def repeated_three_times(actions: Sequence[str]) -> bool:
    """AgentBench's failure test after each step: with more than three steps taken, the last three
    actions (the model's text, before mapping) are identical. (Its ``len(log) > 3``: three equal
    actions at steps 1-3 do not end the episode; at steps 2-4 they do.)"""
    return len(actions) > 3 and len(set(actions[-3:])) == 1
