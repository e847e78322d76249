"""GRPO with plain TRL on our tasks: ``GRPOTrainer(environment_factory=...)`` (docs/trl.md).

Runs on the CPU as it is, with the embedded SmolLM2-135M-Instruct and db + kg (easy splits) from
an embedded controller and workers; nothing is downloaded::

    python examples/trl_grpo.py --threads 1     # 2 steps over 2 samples of each task: ~10 min on a busy 2-core CPU
    python examples/trl_grpo.py --tasks db,kg,alfworld --max-steps 50 --model Qwen/Qwen2.5-0.5B-Instruct --output-dir runs/grpo
    python examples/trl_grpo.py --controller http://127.0.0.1:5020  # tasks served by a running controller

What it does: ``environment_factory`` starts the tasks once and returns ``{task: environment
class}``; ``envs.dataset()`` holds one row per sample (its opening messages as ``prompt``, the
task as ``environment``, the sample ``index``); TRL plays each rollout against a session of our
task, calling the task's tools as the model asks, and reads the task's reward from
``get_reward()``. With the defaults the 2 steps play all 4 prompts (2 rollouts each). ``send_final_text`` hands a rollout's final text to its session (kg answers in
text). SmolLM2's own chat template cannot render tools, so the example renders prompts with TRL's
Qwen2.5 template (same ``<|im_start|>`` tokens), whose tool calls TRL knows how to parse; a model
with a tool-calling template of its own (Qwen2.5/3, Llama 3.1) keeps it. At the end it prints, per
task, the episodes played and their mean reward next to what TRL logged.
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

from agentrl_envs.chat.loading import model_directory
from agentrl_envs.integrations.trl import environment_factory, send_final_text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="db,kg", help="comma-separated task names")
    p.add_argument("--split", default="easy", help="the split the embedded workers serve")
    p.add_argument("--limit", type=int, default=2, help="samples of each task in the dataset")
    p.add_argument("--controller", help="a running controller serving the tasks (default: start them here)")
    p.add_argument("--model", help="a local HF model directory or hub id (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--max-steps", type=int, default=2)
    p.add_argument("--num-generations", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4, help="rollouts per optimizer step")
    p.add_argument("--max-completion-length", type=int, default=192, help="tokens per rollout, tool replies included")
    p.add_argument("--output-dir", default="trl_grpo_output")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    a = p.parse_args()

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL 1.16
    if a.threads:
        torch.set_num_threads(a.threads)
    model_path = a.model or str(model_directory())
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if not supports_tool_calling(tokenizer):
        tokenizer.chat_template = qwen2_5_chat_template
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)

    tasks = [t for t in a.tasks.split(",") if t]
    with environment_factory(tasks, controller=a.controller, split=None if a.controller else a.split) as envs:
        dataset = envs.dataset(limit=a.limit)
        print(f"{len(dataset)} prompts from {tasks} (controller {envs.controller})")
        args = GRPOConfig(
            output_dir=a.output_dir,
            use_cpu=not torch.cuda.is_available(),
            max_steps=a.max_steps,
            per_device_train_batch_size=a.batch_size,
            num_generations=a.num_generations,
            max_completion_length=a.max_completion_length,
            learning_rate=1e-6,
            beta=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[send_final_text],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            environment_factory=envs,
        )
        trainer.train()

        logged = [h for h in trainer.state.log_history if "reward" in h]
        for task, cls in envs.items():
            played = [t for t in envs.episodes if t.task == task]
            means = [h[f"rewards/{cls.__name__}/mean"] for h in logged if h.get(f"rewards/{cls.__name__}/mean") is not None]
            ours = statistics.fmean(t.reward for t in played) if played else float("nan")
            print(f"{task}: {len(played)} episodes, mean reward {ours:.3f}; TRL logged per step {means}")


if __name__ == "__main__":
    main()
