"""Free text → admissible command and the repeat rule, as AgentBench's ALFWorld task does."""

from __future__ import annotations

from agentrl_env_alfworld.actions import process_action, repeated_three_times
from agentrl_env_alfworld.prompts import available_actions, observation_message, parse_available_actions, process_ob

CHOICES = ["go to fridge 1", "go to cabinet 1", "look", "inventory", "take apple 1 from countertop 1"]


def test_exact_command_after_strip_lower_and_first_line():
    assert process_action("  Look  ", CHOICES) == "look"
    assert process_action("go to cabinet 1\nbecause it may hold the mug", CHOICES) == "go to cabinet 1"


def test_free_text_maps_to_the_closest_command_by_bleu():
    assert process_action("Go to the fridge", CHOICES) == "go to fridge 1"
    assert process_action("take the apple", CHOICES) == "take apple 1 from countertop 1"


def test_text_like_no_command_is_sent_as_it_is():
    assert process_action("xyzzy", CHOICES) == "xyzzy"
    assert process_action("Jump", []) == "jump"


def test_three_identical_actions_fail_only_after_more_than_three_steps():
    assert not repeated_three_times(["look", "look", "look"])  # AgentBench's len(log) > 3
    assert repeated_three_times(["inventory", "look", "look", "look"])
    assert not repeated_three_times(["look", "look", "inventory", "look"])
    # the model's text counts, not the command it maps to
    assert not repeated_three_times(["x", "look", "Look", "look"])


def test_observation_text_and_actions_round_trip():
    text = observation_message("You arrive at loc 12. On the countertop 1, you see a apple 1.", CHOICES)
    assert text == "On the countertop 1, you see a apple 1. AVAILABLE ACTIONS: " + "\n".join(CHOICES) + "\n"
    assert parse_available_actions(text) == CHOICES
    assert process_ob("You arrive at countertop 1. On it.") == "You arrive at countertop 1. On it."
    assert available_actions([]) == " AVAILABLE ACTIONS: \n"
