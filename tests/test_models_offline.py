"""Models are resolved once per run, before any trial: a mistyped name fails fast naming its key
path; without network the hub is not retried (offline mode switches on); a hub id in the local
cache keeps working offline. Tokenizers of `ragbench chunk` get the same one-line errors."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import ragbench.models as models
from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.experiment.config import expand, load_config
from ragbench.models import check_models, hub_offline, model_fields, model_problem
from tests.paths import DEMO, require

TYPO = "all-MiniLM-L7-v2"
NO_SUCH = (
    f"sweep.embedder[0].model: no such model {TYPO!r} "
    "(not a local path, not cached, and the hub is not reachable offline)"
)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline mode, as set by the user (whatever the machine's network)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty local Hugging Face cache."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("SENTENCE_TRANSFORMERS_HOME", raising=False)
    return cache


def _config(tmp_path: Path, **sweep: object) -> Path:
    config = {
        "name": "models",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 600}],
            "embedder": [{"kind": "sentence-transformers", "model": TYPO}],
            "retriever": [{"kind": "bm25"}, {"kind": "dense"}],
            **sweep,
        },
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.mark.usefixtures("offline", "hub_cache")
@pytest.mark.parametrize("dry", [False, True], ids=["run", "dry-run"])
def test_a_mistyped_model_fails_before_any_trial_naming_its_key_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dry: bool
) -> None:
    out = tmp_path / "run"
    started = time.perf_counter()
    code = main(["run", str(_config(tmp_path)), "--out", str(out), *(["--dry-run"] * dry)])
    assert code == 2
    assert time.perf_counter() - started < 10
    assert capsys.readouterr().err.splitlines() == [f"ragbench run: {NO_SUCH}"]
    assert not (out / "manifest.json").exists()  # nothing ran, nothing was written


@pytest.mark.usefixtures("offline", "hub_cache")
def test_nested_and_default_models_are_checked_and_endpoint_models_are_not(
    tmp_path: Path,
) -> None:
    semantic = {"kind": "semantic", "embedder": {"kind": "sentence-transformers", "model": "x/y"}}
    cases = {
        "sweep.reranker[0].embedder.model: no such model 'a/b'": {
            "embedder": [{"kind": "hashing"}],
            "reranker": [
                {"kind": "dense", "embedder": {"kind": "sentence-transformers", "model": "a/b"}}
            ],
        },
        "sweep.chunker[1].embedder.model: no such model 'x/y'": {
            "chunker": [{"kind": "none"}, semantic],
            "embedder": [{"kind": "hashing"}],
            "retriever": [{"kind": "bm25"}],
        },
        "sweep.reranker[0].model[1]: no such model 'b/c'": {
            "embedder": [{"kind": "hashing"}],
            "reranker": [{"kind": "cross_encoder", "model": [str(DEMO), "b/c"]}],
        },
        "reranker.model: no such model 'cross-encoder/ms-marco-MiniLM-L-6-v2'": {
            "embedder": [{"kind": "hashing"}],
            "reranker": [{"kind": "cross_encoder"}],  # the default model is not installed
        },
    }
    for expected, sweep in cases.items():
        config = load_config(_config(tmp_path, **sweep))
        with pytest.raises(ConfigError, match="^" + expected.replace("[", r"\[")):
            check_models((t.configs for t in expand(config)), config.sweep)
    llm = {"kind": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "gpt-4o-mini"}
    assert model_fields({"reranker": llm}, "sweep") == []
    unused = load_config(_config(tmp_path, retriever=[{"kind": "bm25"}]))
    check_models((t.configs for t in expand(unused)), unused.sweep)  # no trial embeds


@pytest.mark.usefixtures("offline")
def test_a_cached_hub_id_keeps_working_offline(
    tmp_path: Path, hub_cache: Path, tiny_cross_encoder: Path
) -> None:
    repo = hub_cache / "models--ragbench-test--tiny-ce"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(tiny_cross_encoder, repo / "snapshots" / commit)
    assert model_problem("ragbench-test/tiny-ce") is None
    assert "not cached" in (model_problem("ragbench-test/other") or "")
    from ragbench.experiment.runner import run

    reranker = {"kind": "cross_encoder", "model": "ragbench-test/tiny-ce", "candidates": 5}
    config = load_config(_config(tmp_path, embedder=[{"kind": "hashing"}], reranker=[reranker]))
    result = run(
        config, tmp_path / "run", cache_root=tmp_path / "c", limit_queries=2, progress=False
    )
    assert set(result.trials["status"]) == {"ok"}, result.trials["error"].tolist()


@pytest.fixture
def no_offline_setting(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from huggingface_hub import constants

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    probe = models._hub_reachable  # the probe runs once per process: forget its answer
    probe.cache_clear()
    yield
    probe.cache_clear()


@pytest.mark.usefixtures("no_offline_setting")
def test_an_unreachable_hub_switches_offline_mode_on_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    probes = []

    def refuse(address: tuple[str, int], timeout: float) -> socket.socket:
        probes.append((address, timeout))
        raise OSError("no route to host")

    monkeypatch.setattr(socket, "create_connection", refuse)
    assert hub_offline() and hub_offline()
    assert probes == [(("huggingface.co", 443), 1.5)]
    assert os.environ["HF_HUB_OFFLINE"] == "1" and constants.HF_HUB_OFFLINE is True


@pytest.mark.usefixtures("no_offline_setting", "hub_cache")
def test_online_a_name_the_hub_does_not_know_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    asked: list[str] = []

    def model_info(self: HfApi, repo_id: str, timeout: float) -> None:
        asked.append(repo_id)
        request = httpx.Request("GET", f"https://huggingface.co/api/models/{repo_id}")
        raise RepositoryNotFoundError("404", response=httpx.Response(404, request=request))

    monkeypatch.setattr(models, "_hub_reachable", lambda: True)
    monkeypatch.setattr(HfApi, "model_info", model_info)
    reason = "not a local path, and not on the Hugging Face hub (or not visible to you)"
    assert model_problem(TYPO) == reason
    assert asked == [f"sentence-transformers/{TYPO}", f"cross-encoder/{TYPO}", TYPO]

    def unreachable(self: HfApi, repo_id: str, timeout: float) -> None:
        raise ConnectionError("reset by peer")

    monkeypatch.setattr(HfApi, "model_info", unreachable)
    assert model_problem("org/model") is None  # cannot tell: loading will report


def test_without_network_a_run_is_offline_by_default(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}
    }
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there: the hub is unreachable
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "ragbench.cli", "run", str(_config(tmp_path)), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert time.perf_counter() - started < 30
    assert proc.returncode == 2 and proc.stderr.splitlines() == [f"ragbench run: {NO_SUCH}"]


# ---------------------------------------------------------------- tokenizers of `ragbench chunk`


@pytest.mark.usefixtures("offline", "hub_cache")
@pytest.mark.parametrize(
    ("tokenizer", "message"),
    [
        ("/no/such/tokenizer", "no such tokenizer {!r} (not a local path, and not a valid hub id)"),
        ("org/not-cached", "no such tokenizer {!r} (not a local path, not cached, and the hub"),
        ("", "cannot load {!r} ("),  # a folder, but no tokenizer in it
    ],
)
def test_chunk_with_a_bad_tokenizer_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tokenizer: str, message: str
) -> None:
    (tmp_path / "a.md").write_text("Some words to count in tokens.", encoding="utf-8")
    tokenizer = tokenizer or str(tmp_path)
    spec = {"kind": "recursive", "size": 50, "unit": "tokens", "tokenizer": tokenizer}
    code = main(["chunk", str(tmp_path / "a.md"), "--chunker", json.dumps(spec)])
    (line,) = capsys.readouterr().err.splitlines()
    assert code == 2
    assert line.startswith("ragbench chunk: tokenizer: " + message.format(tokenizer))
