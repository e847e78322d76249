"""``agentrl-train``: the trainer's command line, generated from :class:`AgentRLConfig`.

Every field of the config (TRL's ``GRPOConfig`` fields included) is a ``--flag``;
``--config FILE.yaml`` reads the same fields from YAML, and flags given after it override it::

    agentrl-train --config train.yaml --max_steps 50

Data parallel: ``accelerate launch [--config_file deploy/accelerate/zero3.yaml] --num_processes N
-m agentrl_trainer.cli --config train.yaml`` (docs/data-parallel.md).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    from trl import TrlParser

    from .config import AgentRLConfig
    from .trainer import AgentRLTrainer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = TrlParser(
        (AgentRLConfig,),
        description="Train an agent with async multi-turn RL (AgentRL on TRL). --config FILE.yaml reads the same fields from YAML; flags after it override it.",
    )
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    (args,) = parser.parse_args_and_config()
    trainer = AgentRLTrainer(args)
    trainer.train()
    trainer.save_model(args.output_dir)  # every process: under ZeRO-3/FSDP saving gathers the shards
    if trainer.accelerator.is_main_process:  # the step metrics already cover every process
        out = Path(args.output_dir) / "agentrl_steps.json"
        out.write_text(json.dumps(trainer.step_log, indent=1))
        print(f"saved the model to {args.output_dir}; per-step rollout metrics in {out}")


if __name__ == "__main__":
    main()
