# One entry point: `make run` (main job on the bundled demo set) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export RAGAS_DO_NOT_TRACK := true
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test lint bench clean

install: $(STAMP)

# torch first, pinned to the CPU build, so sentence-transformers does not pull a CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,notebooks]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/ragbench chunk datasets/demo/corpus --chunker '{"kind":"recursive","size":400,"overlap":50}' --format summary

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache
