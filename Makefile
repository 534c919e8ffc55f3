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
	$(BIN)/pip install -q -e ".[train,dev,llm,serve]"
	touch $@ $(VENV)/.base

demo: $(VENV)/.base
	$(BIN)/winnow demo $(DEMO_FILE)

test: $(VENV)/.all
	$(BIN)/ruff check winnow tests
	$(BIN)/python -m pytest

lint: $(VENV)/.all
	$(BIN)/ruff check winnow tests scripts
	$(BIN)/ruff format --check winnow tests scripts
