"""The order file: names, comments, blank lines; anything else is a config error."""

from __future__ import annotations

from pathlib import Path

import pytest
from dgr.errors import ConfigError
from dgr.series import order as series
from hypothesis import given
from hypothesis import strategies as st


def test_parse_names_comments_and_header() -> None:
    text = "# header\n\n# more\na.patch\n\n# between\nsub/b.patch\n"
    parsed = series.parse(text, Path("series"))
    assert parsed.names == ["a.patch", "sub/b.patch"]
    assert [e.line for e in parsed.entries] == [4, 7]
    assert parsed.header == ("# header", "", "# more")
    assert series.render(parsed.header, ["c.patch"]) == "# header\n\n# more\nc.patch\n"


def test_empty_series_is_fine() -> None:
    assert series.parse("", Path("series")).names == []


@pytest.mark.parametrize("line", ["a.patch -p1", "../escape.patch", "/abs.patch", "two words"])
def test_syntax_errors_name_file_and_line(line: str) -> None:
    with pytest.raises(ConfigError) as info:
        series.parse(f"ok.patch\n{line}\n", Path("series/series"))
    assert info.value.exit_code == 8
    assert "series/series:2" in (info.value.detail or "")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="series file missing"):
        series.load(tmp_path / "series")


NAMES = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}\.patch", fullmatch=True)
COMMENTS = st.lists(st.from_regex(r"#[ -~]{0,30}", fullmatch=True) | st.just(""), max_size=3)


@given(header=COMMENTS, names=st.lists(NAMES, max_size=8))
def test_render_then_parse_round_trips(header: list[str], names: list[str]) -> None:
    text = series.render(tuple(header), names)
    parsed = series.parse(text, Path("series"))
    assert parsed.names == names
    assert series.render(parsed.header, parsed.names) == text
