"""Sizes as users write them: exact values, and rejections that say which forms are allowed."""

from __future__ import annotations

import pytest

from guestbench.util.units import SIZE_HELP, format_size, mb_per_s, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500MiB", 500 * 2**20),
        ("1GiB", 2**30),
        ("500MB", 500 * 10**6),
        ("4096", 4096),
        (4096, 4096),
        ("1.5KiB", 1536),
        ("1GB", 10**9),
        ("1kB", 1000),
        ("64KiB", 65536),
        ("100B", 100),
        ("1B", 1),
        (" 2 GiB ", 2 * 2**30),
        ("500mib", 500 * 2**20),  # units are case-insensitive
        ("16.1kB", 16100),  # exact decimal: binary floating point makes this 16100.000000000002
        ("4.07kB", 4070),
        ("0.5GiB", 2**29),
        ("1TiB", 2**40),
    ],
)
def test_parse_size_accepts(text: object, expected: int) -> None:
    got = parse_size(text)
    assert got == expected
    assert type(got) is int


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("12XB", "expected"),
        ("0", "positive whole number"),
        (0, "must be positive"),
        (-1, "must be positive"),
        ("-1", "expected"),
        ("abc", "expected"),
        ("True", "expected"),
        (True, "expected"),
        ("1.3B", "positive whole number"),
        ("0.5B", "positive whole number"),
        ("", "expected"),
        ("MiB", "expected"),
        ("1e6", "expected"),
        (1.5, "expected"),
        (None, "expected"),
        ([1], "expected"),
    ],
)
def test_parse_size_rejects_with_allowed_forms(value: object, why: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_size(value)
    msg = str(exc.value)
    assert f"bad size {value!r}" in msg
    assert why in msg
    # every rejection names the allowed forms
    assert SIZE_HELP in msg
    for form in ("MB", "MiB", "GiB", "integer byte count"):
        assert form in msg
    assert "\n" not in msg


def test_parse_size_rejects_absurdly_large_values_with_a_value_error() -> None:
    with pytest.raises(ValueError, match="too large"):
        parse_size("1" * 400 + "TiB")  # float() would overflow to inf here
    with pytest.raises(ValueError, match="too large"):
        parse_size("9" * 5000)  # more digits than int() converts
    with pytest.raises(ValueError, match="too large"):
        parse_size(2**64)
    assert parse_size(str(2**63 - 1)) == 2**63 - 1


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (2**30, "1GiB"),
        (500 * 2**20, "500MiB"),
        (3 * 2**10, "3KiB"),
        (500 * 10**6, "500MB"),
        (10**9, "1GB"),
        (1000, "1kB"),
        (1023, "1023B"),
        (1, "1B"),
        (3 * 2**30, "3GiB"),
        (4 * 10**9, "4GB"),  # the largest exact unit, not 3906250KiB
        (1000 * 2**10, "1000KiB"),
        (2**40, "1TiB"),
    ],
)
def test_format_size_known_values(nbytes: int, text: str) -> None:
    assert format_size(nbytes) == text


@pytest.mark.parametrize(
    "nbytes",
    [1, 7, 1000, 1024, 1536, 4096, 10**6, 500 * 10**6, 2**20, 100 * 2**20, 2**30, 10**9 + 1, 2**40, 12345678],
)
def test_format_size_round_trips(nbytes: int) -> None:
    assert parse_size(format_size(nbytes)) == nbytes


@pytest.mark.parametrize("text", ["500MiB", "1GiB", "500MB", "1kB", "64KiB", "4GB", "17B"])
def test_parse_then_format_is_stable(text: str) -> None:
    assert format_size(parse_size(text)) == text


def test_mb_per_s_uses_decimal_megabytes() -> None:
    assert mb_per_s(500 * 10**6, 10.0) == pytest.approx(50.0)
    assert mb_per_s(2**20, 1.0) == pytest.approx(1.048576)


def test_parse_size_names_what_it_parses_and_can_refuse_fractions() -> None:
    with pytest.raises(ValueError, match=r"^bad image size 'lots'; expected "):
        parse_size("lots", what="image size")
    assert parse_size("2KiB", fractions=False) == 2048
    with pytest.raises(ValueError, match="a whole number with a unit is needed here"):
        parse_size("1.5KiB", fractions=False)
