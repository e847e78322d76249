#!/usr/bin/env bash
# GPU smoke test of the vLLM path (issue 16, part 2), in ONE call of at most BUDGET_S seconds.
#
# STATUS: written and `bash -n`-checked only; it has NOT run yet (no GPU was lent when it was
# written; the H200 lent on 2026-12-04 has no vllm and reaches no registry, and vllm's wheel is
# far over the 64 MiB a call there carries, so benchmarks/gpu_async_vs_sync.sh ran instead). The
# first run on a GPU is its test: read its output before quoting its figures.
#
# What it does, on a machine with CUDA, vllm and this repository installed (.venv or $PYTHON):
#   1. starts `trl vllm-serve` (TRL 1.16: vLLM's server in dev mode, NCCL weight transfer,
#      processed logprobs) on GPU 0 with the default small model, SmolLM2-135M-Instruct, from a
#      local path ($MODEL_DIR, else the embedded copy agentrl_envs ships); nothing is downloaded;
#   2. probes the engine contract against the real server (VLLMEngine without weight sync):
#      logprob mode accepted, ids/logprobs aligned, end-of-turn stop, a prompt over max_model_len
#      classified as a context limit, tokens/s over concurrent turns;
#   3. with >= 2 GPUs: a few real training steps through `agentrl-train` on GPU 1 (LoRA merged and
#      pushed to the server over NCCL after every step), async then sync, same settings; prints
#      episodes/s of each and the async-vs-sync ratio. With one GPU it says why it skips this:
#      NCCL refuses two ranks on one device, so weight sync needs the trainer on another GPU;
#   4. writes $OUT/gpu_smoke.json (else benchmarks/results/gpu_smoke.json) and prints it.
#
#   bash benchmarks/gpu_smoke.sh            # env: OUT, PYTHON, MODEL_DIR, STEPS, BUDGET_S, PORT, GROUP_PORT
set -euo pipefail
cd "$(dirname "$0")/.."

BUDGET_S=${BUDGET_S:-540}       # the whole script, server start-up included (a 600 s call leaves 60 s spare)
STEPS=${STEPS:-4}
PORT=${PORT:-8000}
GROUP_PORT=${GROUP_PORT:-51216}
OUT_DIR=${OUT:-benchmarks/results}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || command -v python3 )}
WORK=$(mktemp -d -t agentrl-gpu-smoke-XXXX)
RESULT="$OUT_DIR/gpu_smoke.json"
DEADLINE=$((SECONDS + BUDGET_S))
SERVER_PID=""
mkdir -p "$OUT_DIR"

left() { echo $((DEADLINE - SECONDS)); }
say() { echo "[gpu_smoke $(date +%T) $(left)s left] $*"; }
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || kill -TERM "$SERVER_PID" 2>/dev/null || true
    sleep 3
    kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT
fail() {  # record why the run stopped, then exit non-zero
  say "FAILED: $1"
  "$PY" -c 'import json,sys; json.dump({"status": "failed", "reason": sys.argv[1]}, open(sys.argv[2], "w"), indent=1)' "$1" "$RESULT" || true
  [ -f "$WORK/server.log" ] && { echo "--- last server log lines"; tail -n 40 "$WORK/server.log"; }
  exit 1
}

# ---------------------------------------------------------------- 0. preflight
command -v nvidia-smi >/dev/null || fail "no nvidia-smi: this needs a CUDA machine"
NGPU=$(nvidia-smi -L | grep -c '^GPU' || true)
say "$NGPU GPU(s); python $PY; work dir $WORK"
"$PY" - <<'EOF' || fail "the environment lacks vllm, trl >= 1.16 or agentrl_trainer (pip install -e '.[local]' -e 'agentrl_trainer[vllm]')"
import importlib.metadata as md
import agentrl_trainer, vllm, trl  # noqa: F401
print("vllm", md.version("vllm"), "| trl", md.version("trl"), "| torch", md.version("torch"))
assert tuple(int(x) for x in md.version("trl").split(".")[:2]) >= (1, 16)
EOF
if [ -z "${MODEL_DIR:-}" ]; then
  MODEL_DIR=$(HF_HUB_OFFLINE=1 "$PY" -c 'from agentrl_envs.chat.loading import model_directory; print(model_directory())') \
    || fail "no local model: set MODEL_DIR to a HF model directory"
fi
say "model $MODEL_DIR"
TRL=$(dirname "$PY")/trl
[ -x "$TRL" ] || TRL="$PY -m trl.cli.main"

# ---------------------------------------------------------------- 1. the server (GPU 0)
say "starting trl vllm-serve on :$PORT"
MEM=0.85; [ "$NGPU" -ge 2 ] || MEM=0.5
CUDA_VISIBLE_DEVICES=0 HF_HUB_OFFLINE=1 setsid $TRL vllm-serve --model "$MODEL_DIR" --host 127.0.0.1 --port "$PORT" \
  --max_model_len 4096 --gpu_memory_utilization "$MEM" --enforce_eager true >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
UP_BY=$((SECONDS + 300 < DEADLINE - 120 ? SECONDS + 300 : DEADLINE - 120))
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
  kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited during start-up"
  [ "$SECONDS" -lt "$UP_BY" ] || fail "the server did not answer /health in time"
  sleep 2
done
say "server up after $((SECONDS)) s of the run"

# ---------------------------------------------------------------- 2. the engine contract, for real
say "probing the engine against the server"
PROBE_S=$(( $(left) > 150 ? 120 : $(left) - 30 ))
timeout "$PROBE_S" env HF_HUB_OFFLINE=1 "$PY" - "$PORT" "$MODEL_DIR" "$WORK/probe.json" <<'EOF' || fail "the engine probe failed"
import asyncio, json, sys, time
from transformers import AutoTokenizer
from agentrl_envs.errors import ContextLimitError
from agentrl_trainer.engines import VLLMEngine

port, model_dir, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
engine = VLLMEngine("127.0.0.1", port, tokenizer=tok, sync_weights=False, timeout=60)
text = tok.apply_chat_template([{"role": "user", "content": "Name three colours."}], tokenize=False, add_generation_prompt=True)
prompt = list(tok(text, add_special_tokens=False)["input_ids"])

async def main():
    ids, lps = await engine.generate(prompt, 64, 1.0, 1.0)
    assert len(ids) == len(lps) and all(lp <= 0 for lp in lps), "ids and logprobs misaligned"
    stopped = ids[-1] in engine.stop_token_ids
    try:
        await engine.generate(list(range(100, 100 + engine.max_model_len)), 8, 1.0, 1.0)
        limit = "not raised"
    except ContextLimitError:
        limit = "ContextLimitError"
    n = 64
    t0 = time.monotonic()
    outs = await asyncio.gather(*(engine.generate(prompt, 128, 1.0, 1.0) for _ in range(n)))
    dt = time.monotonic() - t0
    tokens = sum(len(i) for i, _ in outs)
    return {"stop_token_ids": engine.stop_token_ids, "first_turn_tokens": len(ids), "first_turn_stopped": stopped,
            "context_limit": limit, "concurrent_turns": n, "tokens": tokens, "seconds": dt, "tokens_per_s": tokens / dt,
            "turns_stopped": sum(i[-1] in engine.stop_token_ids for i, _ in outs)}

result = asyncio.run(main())
engine.close()
print(json.dumps(result, indent=1))
json.dump(result, open(out, "w"))
assert result["context_limit"] == "ContextLimitError"
EOF

# ---------------------------------------------------------------- 3. training with weight sync (GPU 1)
run_mode() {  # $1 = async | sync
  local mode=$1 budget
  budget=$(( $(left) - 20 ))
  [ "$budget" -gt 60 ] || { say "no time left for $mode"; return 1; }
  say "agentrl-train, $mode, $STEPS steps (at most ${budget}s)"
  local t0=$SECONDS
  CUDA_VISIBLE_DEVICES=1 HF_HUB_OFFLINE=1 timeout "$budget" "$PY" -m agentrl_trainer.cli \
    --model_name_or_path "$MODEL_DIR" --tasks echo --engine vllm --num_engines 1 \
    --vllm_server_host 127.0.0.1 --vllm_server_port "$PORT" --vllm_group_port "$GROUP_PORT" --vllm_server_timeout 120 \
    --rollout_mode "$mode" --max_steps "$STEPS" --num_generations 8 --min_groups_per_step 1 --max_groups_per_step 4 \
    --lagging_fraction 0 --max_turns 4 --max_completion_length 64 --assistant_prefix $'<tool_call>\n{"name": "' \
    --beta 0 --learning_rate 1e-4 --use_lora true --report_to none --save_strategy no --logging_steps 1 \
    --disable_tqdm true --output_dir "$WORK/$mode" >"$WORK/train_$mode.log" 2>&1 \
    || { tail -n 40 "$WORK/train_$mode.log"; return 1; }
  echo $((SECONDS - t0)) >"$WORK/$mode.wall"
}
TRAIN_NOTE=""
if [ "$NGPU" -ge 2 ]; then
  run_mode async || fail "agentrl-train (async) failed or ran out of time"
  run_mode sync || TRAIN_NOTE="the sync run failed or ran out of time"
else
  TRAIN_NOTE="not run: one GPU. Weight sync is an NCCL broadcast between the trainer and the server, and NCCL refuses two ranks on one device; run with >= 2 GPUs"
  say "$TRAIN_NOTE"
fi

# ---------------------------------------------------------------- 4. the record
"$PY" - "$WORK" "$RESULT" "$NGPU" "$MODEL_DIR" "$STEPS" "$TRAIN_NOTE" <<'EOF'
import datetime, importlib.metadata as md, json, os, subprocess, sys
work, result, ngpu, model, steps, note = sys.argv[1:7]

def mode(name):
    path = os.path.join(work, name, "agentrl_steps.json")
    if not os.path.exists(path):
        return None
    log = json.load(open(path))
    episodes = sum(r["rollout/episodes"] for r in log)
    loop_s = sum(r["rollout/wait_s"] + r.get("time/train_s", 0.0) for r in log)
    wall = float(open(os.path.join(work, name + ".wall")).read())
    return {"steps": len(log), "episodes": episodes, "command_wall_s": wall,
            "step_loop_s": loop_s, "episodes_per_step_loop_s": episodes / loop_s if loop_s else None,
            "trained_tokens": sum(r["rollout/trained_tokens"] for r in log),
            "staleness_max": max((r.get("rollout/staleness_max", 0) for r in log), default=0),
            "reward_mean": [r["reward/mean"] for r in log], "per_step": log}

a, s = mode("async"), mode("sync")
ratio = None
if a and s and a["episodes_per_step_loop_s"] and s["episodes_per_step_loop_s"]:
    ratio = a["episodes_per_step_loop_s"] / s["episodes_per_step_loop_s"]
head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip().splitlines()
record = {
    "status": "ok", "ran_at": datetime.datetime.now(datetime.timezone.utc).isoformat(), "git_head": head,
    "gpus": gpus, "versions": {p: md.version(p) for p in ("vllm", "trl", "torch", "transformers")},
    "model": model, "server": "trl vllm-serve, max_model_len 4096, enforce_eager (no CUDA graphs: start-up over speed)",
    "probe": json.load(open(os.path.join(work, "probe.json"))),
    "train": {"async": a, "sync": s, "async_over_sync_episodes_per_s": ratio, "note": note or None,
              "how": "agentrl-train on echo, LoRA merged and pushed over NCCL after every step; episodes/s over the "
                     "step loop (sum of rollout wait + train time per step; weight push excluded, the same in both modes)"},
}
json.dump(record, open(result, "w"), indent=1)
p = record["probe"]
print(f"probe: {p['tokens_per_s']:.0f} tokens/s over {p['concurrent_turns']} concurrent turns; "
      f"{p['turns_stopped']}/{p['concurrent_turns']} stopped on end-of-turn {p['stop_token_ids']}; context limit: {p['context_limit']}")
for name, m in (("async", a), ("sync", s)):
    if m:
        print(f"{name:5}: {m['episodes']} episodes in {m['step_loop_s']:.1f} s of step loop "
              f"({m['episodes_per_step_loop_s']:.2f}/s), command {m['command_wall_s']:.0f} s, staleness max {m['staleness_max']}")
print("async/sync:", f"{ratio:.2f}x" if ratio else f"n/a ({note or 'a run is missing'})")
print("written:", result)
EOF
say "done"
