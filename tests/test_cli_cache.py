"""`ragbench cache clear --older-than`: a duration or a one-line error, never "everything"."""

from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.index.cache import ArtifactCache


def _entry(root: Path) -> ArtifactCache:
    cache = ArtifactCache(root)

    def build(path: Path) -> None:
        (path / "a.txt").write_text("ok")

    cache.get_or_build("chunks", "0123456789", build)
    return cache


@pytest.mark.parametrize("value", ["", " ", "d", "7x", "-1d", "nan", "inf", "1e400d", "7 d 3"])
def test_a_bad_duration_is_one_line_naming_the_flag_and_deletes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    cache = _entry(tmp_path)
    assert main(["cache", "--root", str(tmp_path), "clear", f"--older-than={value}"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "ragbench cache clear: --older-than: expected a duration such as 7d, 12h, 30m or 45s "
        f"(a bare number is days), got {value!r}"
    )
    assert cache.has("chunks", "0123456789")


@pytest.mark.parametrize(("value", "removed"), [("1d", 0), ("0.5h", 0), ("0s", 1), ("0", 1)])
def test_good_durations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, removed: int
) -> None:
    _entry(tmp_path)
    assert main(["cache", "--root", str(tmp_path), "clear", "--older-than", value]) == 0
    assert f"removed {removed} entries" in capsys.readouterr().out
