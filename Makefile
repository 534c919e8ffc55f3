# The two set-up commands of the README. Each creates .venv if missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_FILE := tests/fixtures/demo_session.jsonl

.PHONY: demo test lint bench

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.all: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[train,dev,llm,serve,ray,bench,cib]"
	touch $@ $(VENV)/.base

# The main job on the shipped default model: label every unit of a real transcript, then
# compress it to 30% of its tokens, keeping must-keep units verbatim and tool pairs whole.
demo: $(VENV)/.base
	$(BIN)/winnow classify $(DEMO_FILE)
	@mkdir -p out
	$(BIN)/winnow compress $(DEMO_FILE) --limit 30% -o out/demo.compressed.jsonl

test: $(VENV)/.all
	$(BIN)/ruff check winnow tests
	@test -x .cache/claude-code-2.1.332/node_modules/.bin/claude || (command -v npm >/dev/null && npm install --silent --no-audit --no-fund --prefix .cache/claude-code-2.1.332 @anthropic-ai/claude-code@2.1.332 >/dev/null 2>&1) || echo "Claude Code not installed (no npm, or no network): tests/test_proxy_claude_code.py will skip"
	$(BIN)/python -m pytest

lint: $(VENV)/.all
	$(BIN)/ruff check winnow tests scripts
	$(BIN)/ruff format --check winnow tests scripts
