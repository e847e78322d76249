"""Plain TRL ``GRPOTrainer`` trains on two of our tasks through ``environment_factory``.

No ``agentrl_trainer`` code: TRL's own trainer, a tiny random ``LlamaForCausalLM`` on the CPU with
the embedded SmolLM2 tokenizer (under TRL's Qwen2.5 chat template, whose tool calls TRL parses),
and db + kg from the embedded stack. So that rewards are not all zero, the model's *sampling* is
steered for one rollout of each prompt to write the task's reference turns (the token sequence of
each turn is forced by a logits processor; the model, its logprobs and TRL's loop are untouched);
the other rollout of the group samples freely from the random weights. The test then checks that
the rewards TRL logged are, rollout by rollout, the rewards our sessions returned.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from typing import Any

import pytest

pytest.importorskip("trl")
import torch  # noqa: E402
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList  # noqa: E402

from agentrl_envs.agent import run_episode  # noqa: E402
from agentrl_envs.chat.loading import model_directory  # noqa: E402
from agentrl_envs.client import AsyncControllerClient  # noqa: E402
from agentrl_envs.integrations.trl import environment_factory, send_final_text  # noqa: E402
from agentrl_envs.policy import as_policy  # noqa: E402
from agentrl_envs.registry import get_task  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SPLIT = "easy"
TASKS = ("db", "kg")
PER_TASK = 2  # samples of each task in the dataset


def completion_text(message: dict[str, Any]) -> str:
    """An assistant message as Qwen2.5's template writes a completion (what TRL parses back)."""
    if not message.get("tool_calls"):
        return message.get("content") or ""
    return "\n".join(
        "<tool_call>\n"
        + json.dumps({"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])})
        + "\n</tool_call>"
        for c in message["tool_calls"]
    )


async def reference_turns(url: str, task: str, index: int) -> list[str]:
    """The assistant turns of the task's reference solution of sample ``index``, played through the controller."""
    cls = get_task(task)
    sample = cls.load_samples(split=SPLIT)[index]
    async with AsyncControllerClient(url) as client:
        t = await run_episode(client, task, index, as_policy(cls.reference_policy(sample)))
    assert t.reward == 1.0, f"{task} #{index}: the reference solution scored {t.reward} ({t.status})"
    played = [m for m in t.messages if m["role"] == "assistant"][-t.turns :]  # after any worked example
    return [completion_text(m) for m in played]


class ForceTurns(LogitsProcessor):
    """Forces, row by row, the token sequence given for it (``None``: leave the row's sampling alone)."""

    def __init__(self, plans: list[list[int] | None], start: int, eos: int) -> None:
        self.plans, self.start, self.eos = plans, start, eos

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.start
        for row, plan in enumerate(self.plans):
            if plan is not None:
                token = plan[step] if step < len(plan) else self.eos
                scores[row] = -math.inf
                scores[row, token] = 0.0
        return scores


class ScriptedLlama(LlamaForCausalLM):
    """A tiny random Llama whose sampling plays ``scripts`` (question text → completion per turn)
    for the first row of each question in a ``generate`` call (TRL's group of rollouts of a prompt
    comes first in the batch), and samples freely elsewhere."""

    scripts: dict[str, list[str]] = {}
    tokenizer: Any = None

    def generate(self, input_ids: torch.LongTensor | None = None, **kwargs: Any) -> Any:
        tok = self.tokenizer
        plans: list[list[int] | None] = []
        taken: set[str] = set()
        for row in input_ids:
            text = tok.decode(row, skip_special_tokens=False)
            question = next((q for q in self.scripts if q in text), None)
            if question is None or question in taken and text.split(question)[-1].count("<|im_start|>assistant") == 1:
                plans.append(None)  # no script, or a later rollout of a group's first turn: free
                continue
            taken.add(question)
            turn = text.split(question)[-1].count("<|im_start|>assistant") - 1
            turns = self.scripts[question]
            plans.append(tok.encode(turns[turn], add_special_tokens=False) + [tok.eos_token_id] if turn < len(turns) else [])
        force = ForceTurns(plans, input_ids.shape[1], tok.eos_token_id)
        return super().generate(input_ids=input_ids, logits_processor=LogitsProcessorList([force]), **kwargs)


@pytest.fixture
def one_thread() -> Any:
    """Torch on one thread: on a shared 2-core machine a second thread made generation 10x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_plain_trl_grpo_logs_our_tasks_rewards(tmp_path: Any, one_thread: None) -> None:
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    began = time.monotonic()
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_directory())
    tokenizer.chat_template = qwen2_5_chat_template  # SmolLM2's own template renders no tools
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = ScriptedLlama(config)

    with environment_factory(list(TASKS), split=SPLIT) as envs:
        assert set(envs) == set(TASKS)
        dataset = envs.dataset(limit=PER_TASK)
        assert len(dataset) == len(TASKS) * PER_TASK
        # The question of each sample is its last opening message; the prompt must name only its own.
        questions = {(row["environment"], row["index"]): row["prompt"][-1]["content"] for row in dataset}
        for (task, index), question in questions.items():
            assert sum(question in "\n".join(m["content"] for m in r["prompt"]) for r in dataset) == 1, (task, index)
        ScriptedLlama.scripts = {
            q: asyncio.run(reference_turns(envs.controller, task, index)) for (task, index), q in questions.items()
        }
        ScriptedLlama.tokenizer = tokenizer

        args = GRPOConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            max_steps=2,
            per_device_train_batch_size=4,
            num_generations=2,
            max_completion_length=128,
            learning_rate=1e-3,
            beta=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            seed=0,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[send_final_text],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            environment_factory=envs,
        )
        before = [p.detach().clone() for p in model.parameters()]
        trainer.train()

        assert trainer.state.global_step == 2
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)), (
            "no optimizer step moved a weight"
        )
        episodes = envs.episodes
        assert len(episodes) == 2 * 4  # two steps of 2 prompts x 2 rollouts, each scored once

        # Rollout by rollout, TRL's reward columns (named after the env classes) hold the sessions' rewards.
        last = episodes[-4:]
        for task, cls in envs.items():
            logged = list(trainer._logs["rewards"][cls.__name__])
            ours = [float(t.reward) if t.task == task else None for t in last]
            assert [None if math.isnan(x) else x for x in logged] == ours, (task, logged, ours)
        # Step by step, the logged means are the means of the sessions' rewards.
        steps = [h for h in trainer.state.log_history if "rewards/DbEnv/mean" in h]
        assert len(steps) == 2
        for step, history in enumerate(steps):
            batch = episodes[4 * step : 4 * step + 4]
            for task, cls in envs.items():
                rewards = [t.reward for t in batch if t.task == task]
                logged = history[f"rewards/{cls.__name__}/mean"]
                assert (logged is None) if not rewards else logged == pytest.approx(sum(rewards) / len(rewards))
            assert history["reward"] == pytest.approx(sum(t.reward for t in batch) / 4)
        # Every prompt had one steered rollout (the reference: reward 1) and one free one (random: 0).
        for task in TASKS:
            rewards = sorted(t.reward for t in episodes if t.task == task)
            assert rewards == [0.0] * (len(rewards) // 2) + [1.0] * (len(rewards) // 2), (task, rewards)
        solved = [t for t in episodes if t.reward == 1.0]
        assert {t.task for t in solved} == set(TASKS)
        assert all(t.status.value == "completed" for t in solved)
    print(f"TRL GRPO test: {time.monotonic() - began:.1f} s")
