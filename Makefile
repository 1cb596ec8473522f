# GlitchLens: `make demo` (set up, train, evaluate, diagnose), `make test` (set up, run the tests) and
# `make notebooks` (execute the notebooks and write their outputs back, to commit with them).
# The extras installed: test (pytest, the notebooks' Jupyter stack) and ray (sweeps on a Ray cluster,
# docs/how-to/sweep-on-ray.md "Sweeps on Ray"), whose test runs in CI. `pip install .` alone installs neither.
# torch is pinned and installed first (the local CPU wheel here); a GPU machine may pass its own
#   make setup TORCH_SPEC="torch==2.13.0 --index-url <PyTorch's index for your CUDA>"
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN = $(VENV)/bin
DEMO ?= runs/demo
# `glitchlens bench demo` sets this to keep the demo's evaluation as JSON (what the README's quick start reports)
DEMO_EVAL_JSON ?=
TEST_WORKERS ?= 2
# The GPU steps (docs/how-to/run-on-a-gpu.md "On a GPU"): each call ends within CALL_S seconds plus one unit of work
# (a benchmark pair, a training step) and a save, and the same command resumes where it stopped.
CALL_S ?= 480
GPU_RUNS ?= runs/gpu
GPU_TEST_WORKERS ?= 8
STEPS ?= 10000
GPU_JOBS ?= 15

.PHONY: setup demo test notebooks gpu-test gpu-bench gpu-specimen gpu-table1
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e '.[ray,test]'
	touch $@

demo: setup
	$(BIN)/glitchlens train --model fot --recipe authors-notebook --preset tiny --steps 300 --seq-len 512 --out $(DEMO)/fot-tiny --overwrite
	$(BIN)/glitchlens eval $(DEMO)/fot-tiny -n 500 $(if $(DEMO_EVAL_JSON),--json > $(DEMO_EVAL_JSON))
	$(BIN)/glitchlens diagnose $(DEMO)/fot-tiny --out $(DEMO)/fot-tiny/report

test: setup
	$(BIN)/python -m pytest -ra -n $(TEST_WORKERS) --dist worksteal --durations=30

notebooks: setup
	$(BIN)/python -m interp.docs.notebooks

gpu-test: setup
	$(BIN)/python -m pytest -ra -n $(GPU_TEST_WORKERS) --dist worksteal

gpu-bench: setup
	mkdir -p $(GPU_RUNS)
	$(BIN)/glitchlens bench kernels --repeats 10 --budget-s $(CALL_S) --out $(GPU_RUNS)/bench-kernels.csv

# A specimen at the papers' scale (NAME=tra-mini, fot-mini, rope-mini, tda-mini or cope-mini; the
# specimens are in interp/studies/specimens.py). Trains in calls of CALL_S seconds: `timeout` then
# sends the Ctrl-C that makes `glitchlens train` save a checkpoint and stop, and --resume goes on from
# it (exactly: the batch of a step depends only on the seed and the step). The call that finishes
# the run adopts it as models/pretrained/NAME, evaluated on the full splits on the GPU.
gpu-specimen: setup
	@test -n "$(NAME)" || { echo "usage: make gpu-specimen NAME=tra-mini"; exit 2; }
	status=0; timeout -s INT $(CALL_S) $(BIN)/glitchlens train $$($(BIN)/python -c "import shlex; \
	    from interp.studies.specimens import specimen; print(shlex.join(specimen('$(NAME)').train_args()))") \
	    --device cuda --out $(GPU_RUNS)/$(NAME) --checkpoint-every 500 --resume || status=$$?; \
	if [ $$status = 124 ]; then echo "$(NAME): saved after $(CALL_S) s; run the same command again to go on"; exit 0; fi; \
	test $$status = 0 && $(BIN)/glitchlens pretrained build $(NAME) --from-run $(GPU_RUNS)/$(NAME) --overwrite

# Table 1 at one budget (docs/results/claims.md "Longer budgets"): the 12 models, 3 seeds, STEPS steps each, GPU_JOBS
# runs sharing the GPU. Each call trains for CALL_S seconds, then the Ctrl-C of `timeout` stops every run after
# its step with its checkpoint saved, and the same command resumes them.
gpu-table1: setup
	status=0; timeout -s INT $(CALL_S) $(BIN)/glitchlens reproduce table1 --steps $(STEPS) --device cuda \
	    --jobs $(GPU_JOBS) --quiet --out runs/table1-$(STEPS) || status=$$?; \
	if [ $$status = 124 ]; then echo "table1-$(STEPS): stopped after $(CALL_S) s; run the same command again"; \
	    exit 0; fi; exit $$status

# The check of the Triton kernels on one GPU, under 10 minutes: the kernel tests on the device, then
# `glitchlens bench kernels` at T = 4096-32768 beside SDPA into runs/gpu/bench-kernels-<card>.csv (kernels/tooling/gpu_check.py).
# It runs the machine's own python3, PyTorch and Triton (no setup: docs/how-to/run-on-a-gpu.md "On a GPU").
GPU_PYTHON ?= python3
.PHONY: gpu-kernels
gpu-kernels:
	$(GPU_PYTHON) -m kernels.tooling.gpu_check

# A campaign on one GPU (docs/how-to/run-on-a-gpu.md "A campaign"): the runs of CAMPAIGN_PLAN not done yet, in
# its order, the seeds of a configuration batched into one model, CAMPAIGN_JOBS configurations at once, ended
# within CAMPAIGN_S seconds (unfinished runs stopped at a checkpoint; the same command resumes them). It runs the
# machine's own python3 (no setup) and writes CAMPAIGN_OUT/campaign.jsonl (steps per second per group) and
# CAMPAIGN_OUT/results.tar (the result.json files it wrote, at their paths in the repository).
# gpu-campaign-estimate prints what fits instead; on a machine without a GPU (GPU_PYTHON=.venv/bin/python)
# each group's rate comes from the committed campaign logs, runs/gpu/campaign-*.jsonl.
CAMPAIGN_PLAN ?= interp/studies/plans/h200.json
CAMPAIGN_OUT ?= runs/campaign/out
CAMPAIGN_S ?= 480
CAMPAIGN_JOBS ?= 8
.PHONY: gpu-campaign gpu-campaign-estimate
gpu-campaign:
	$(GPU_PYTHON) -m interp.cli campaign $(CAMPAIGN_PLAN) --device cuda --budget-s $(CAMPAIGN_S) \
	    --jobs $(CAMPAIGN_JOBS) --out $(CAMPAIGN_OUT)

gpu-campaign-estimate:
	$(GPU_PYTHON) -m interp.cli campaign $(CAMPAIGN_PLAN) --device cuda --budget-s $(CAMPAIGN_S) \
	    --jobs $(CAMPAIGN_JOBS) --out $(CAMPAIGN_OUT) --estimate

# The reference pages of docs/reference/ (API, commands, hooks, environment variables and tolerances),
# generated from the code; `$(BIN)/python -m interp.docs.reference --check` names the stale ones.
.PHONY: docs
docs: setup
	$(BIN)/python -m interp.docs.reference
