"""The small vocabulary every benchmark draws its RESULTS.md section(s) with.

A benchmark module measures (a ``measure``-style function returning a dict of figures) and
draws: it declares one ``Part`` per ``###`` block of RESULTS.md, naming the measured sections
the block reads and a function from their figures to the block's lines. ``benchmarks.results``
puts the parts in order, heads each with its stamp (command, date, commit) and writes the file.
Cells are formatted with ``num`` / ``signed`` / ``ratio`` / ``percent`` / ``met`` and laid out
with ``table``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

Figures = dict[str, Any]
Lines = list[str]


def _whole(sections: Mapping[str, Figures]) -> bool:
    return True


@dataclass(frozen=True)
class Part:
    """One ``###`` block of RESULTS.md: its heading, the sections whose figures it reads (it is
    drawn again only when all of them ran), how its lines below the stamp are drawn, and
    whether a run's figures are all the block shows (when a run measured only some of it, e.g.
    some of a benchmark's rows, ``--only`` keeps the block it would replace)."""

    heading: str
    keys: tuple[str, ...]
    draw: Callable[[Mapping[str, Figures]], Lines]
    complete: Callable[[Mapping[str, Figures]], bool] = _whole


def part(
    key: str,
    heading: str,
    draw: Callable[[Figures], Lines],
    complete: Callable[[Mapping[str, Figures]], bool] = _whole,
) -> Part:
    """A block drawn from one section's figures, or the line saying why it has none."""

    def drawn(sections: Mapping[str, Figures]) -> Lines:
        section = sections.get(key)
        why = status(section)
        if why is not None:
            return [why]
        assert section is not None  # status() has a line for a missing section
        return draw(section)

    return Part(f"### {heading}", (key,), drawn, complete)


# ---------------------------------------------------------------- cells


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def num(value: Any, digits: int = 4) -> str:
    """A number with ``digits`` decimals, or an en dash for missing values."""
    if _missing(value):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def signed(value: Any, digits: int = 4) -> str:
    """A difference with its sign (zero when it rounds to zero)."""
    if _missing(value):
        return "–"
    if abs(value) < 0.5 * 10**-digits:
        value = 0.0
    return f"{value:+.{digits}f}"


def ratio(value: Any) -> str:
    """A speed ratio (``1.23x``)."""
    return "–" if value is None else f"{value:.2f}x"


def percent(share: float | None) -> str:
    """A share as a whole percentage (``37%``)."""
    return "–" if share is None else f"{100 * share:.0f}%"


def met(value: float | None, target: float, lower_is_better: bool = False) -> str:
    """Whether ``value`` meets ``target``."""
    if value is None:
        return "–"
    ok = value <= target if lower_is_better else value >= target
    return "yes" if ok else "**no**"


def wtl(found: Mapping[str, Any]) -> str:
    """Wins / ties / losses of a paired comparison."""
    return f"{found['wins']} / {found['ties']} / {found['losses']}"


def one_line(label: str) -> str:
    """A trial label on one line (chunker separators hold newlines)."""
    return label.encode("unicode_escape").decode("ascii", "replace")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table (cells already formatted)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- sentences


def status(section: Figures | None) -> str | None:
    """None for a measured section, else the line saying why it has no numbers."""
    if section is None:
        return "_Not run._"
    if "skipped" in section:
        return f"_Skipped: {section['skipped']}._"
    if "error" in section:
        return f"_Failed: `{section['error']}`._"
    return None


def provenance(section: Figures) -> str:
    """Where a quality section's numbers come from: its run directory and the stage cache."""
    rebuilt = ", ".join(section["rebuilt"]) or "none"
    return (
        f"Run directory `{section['run']}`, produced by this run ({section['queries']} queries, "
        f"{section['seconds']:.1f} s) from `{section['config']}`; before it, the stage cache held "
        f"{section['cached']} of its {section['stages']} stage artifacts (rebuilt: {rebuilt})."
    )


def relative(path: Path | str) -> str:
    """``path`` as RESULTS.md names it: relative to the repository when inside it, under
    ``$TMPDIR`` when inside the temporary directory, else as given."""
    resolved = Path(path).resolve()
    for root, name in ((REPO, None), (Path(tempfile.gettempdir()).resolve(), "$TMPDIR")):
        if resolved.is_relative_to(root):
            inside = str(resolved.relative_to(root))
            return inside if name is None else f"{name}/{inside}"
    return str(path)
