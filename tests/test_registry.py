"""Registry parsing: key paths and allowed values in errors, nested specs, labels, keys."""

import pytest

from ragbench.errors import ConfigError
from ragbench.registry import components


def test_unknown_kind_lists_allowed_kinds() -> None:
    with pytest.raises(ConfigError) as err:
        components("chunker").parse({"kind": "magic"}, path="sweep.chunker[2]")
    message = str(err.value)
    assert message.startswith("sweep.chunker[2].kind: unknown chunker kind 'magic'")
    for kind in ("fixed", "none", "recursive", "semantic", "sentence", "sentence_window"):
        assert kind in message


def test_missing_kind_and_non_mapping() -> None:
    with pytest.raises(ConfigError, match=r"chunker\.kind: missing; allowed"):
        components("chunker").parse({"size": 3})
    with pytest.raises(ConfigError, match="expected a mapping"):
        components("chunker").parse(42)  # type: ignore[arg-type]


def test_unknown_key_and_bad_value_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^chunker\.sise: unknown key"):
        components("chunker").parse({"kind": "recursive", "size": 100, "sise": 3})
    with pytest.raises(ConfigError, match=r"chunker\.unit: .*'chars', 'tokens' or 'words'"):
        components("chunker").parse({"kind": "fixed", "size": 100, "unit": "bytes"})


def test_nested_component_errors_carry_the_full_path() -> None:
    spec = {"kind": "semantic", "embedder": {"kind": "hashing", "dim": 0}}
    with pytest.raises(ConfigError, match=r"^chunker\.embedder\.dim: "):
        components("chunker").parse(spec)
    spec = {"kind": "fallback", "providers": [{"kind": "hashing", "dimm": 3}]}
    with pytest.raises(ConfigError) as err:
        components("embedder").parse(spec)
    assert str(err.value) == "embedder.providers[0].dimm: unknown key"


def test_labels_and_keys() -> None:
    parse = components("chunker").parse
    base = parse({"kind": "recursive", "size": 512})
    assert base.label() == "recursive(size=512)"
    assert base.key() == parse({"kind": "recursive", "size": 512, "overlap": 0}).key()
    assert base.key() != parse({"kind": "recursive", "size": 256}).key()
    nested = parse({"kind": "semantic", "embedder": {"kind": "hashing", "dim": 64}})
    assert nested.label() == "semantic(embedder=hashing(dim=64))"
    assert parse("none").label() == "none"
