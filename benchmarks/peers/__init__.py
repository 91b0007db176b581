"""ragbench side by side with AutoRAG, the tool a RAG engineer would otherwise sweep with.

AutoRAG runs in a virtual environment of its own (``env.py``), never the project's: nothing in
the package or the tests imports it. ``inputs.py`` writes its corpus, QA set and YAML from
SciFact, ``driver.py`` runs inside its environment, ``process.py`` times a command and its peak
memory, ``ragbench.yaml`` is the nearest ragbench sweep, and ``benchmarks/bench_peers.py``
measures both and draws the RESULTS.md section.
"""
