import pytest

from commbench.errors import CommbenchError
from commbench.sizes import format_size, parse_size, parse_sizes, round_to_itemsize


@pytest.mark.parametrize("text,expected", [
    ("8", 8), ("8B", 8), ("1K", 1024), ("1k", 1024), ("256M", 256 << 20), ("1G", 1 << 30),
    ("2T", 2 << 40), ("0", 0), ("4KiB", 4096), ("0" * 30 + "8K", 8192),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


def test_doubling_range():
    assert parse_sizes("1K-1G") == [1 << k for k in range(10, 31)]


def test_multiplicative_range():
    assert parse_sizes("8-256M:x4") == [8 * 4**k for k in range(13) if 8 * 4**k <= 256 << 20]


def test_additive_range():
    assert parse_sizes("1M-8M:+1M") == [k << 20 for k in range(1, 9)]


def test_list_is_sorted_and_deduplicated():
    assert parse_sizes("1M,8,1K,8") == [8, 1024, 1 << 20]


def test_mixed_list_and_ranges():
    assert parse_sizes("1-4,1K") == [1, 2, 4, 1024]


# A number of more than 4,300 digits made int() raise its own ValueError: a traceback.
MANY = "9" * 5000


@pytest.mark.parametrize("bad", ["", "abc", "1Q", "8-1", "1K-1M:x1", "1K-1M:y2", "0-8", "1-8:+0", "-5", "1K-",
                                 MANY, f"1-{MANY}", f"1K-1M:+{MANY}", f"1K-1M:x{MANY}", "1" + "0" * 24,
                                 "1K-64K:x\uff12", "1K-1M:x1_0"])
def test_bad_specs_raise_one_clear_error(bad):
    with pytest.raises(CommbenchError) as e:
        parse_sizes(bad)
    assert "\n" not in str(e.value)


def test_sweeps_of_too_many_sizes_are_refused_before_they_are_listed():
    with pytest.raises(CommbenchError, match="^too many sizes: '1-1T:\\+1' in --sizes '8,1-1T:\\+1' names 1099511627776 "
                                             "sizes, more than the 10000 a sweep may have; use a larger step$"):
        parse_sizes("8,1-1T:+1")
    assert len(parse_sizes("1-10000:+1")) == 10_000
    with pytest.raises(CommbenchError, match="^too many sizes: --sizes '1-10000:\\+1,0' names 10001 sizes"):
        parse_sizes("1-10000:+1,0")


def test_rounding_to_dtype_notes_each_change():
    sizes, notes = round_to_itemsize([0, 8, 10, 1023, 1024], 4, "float32")
    assert sizes == [0, 8, 1020, 1024]
    assert len(notes) == 2 and "10 B rounded to 8 B" in notes[0]


@pytest.mark.parametrize("n,text", [(1 << 20, "1M"), (1536, "1536"), (3 << 30, "3G"), (0, "0"), (7, "7")])
def test_format_size(n, text):
    assert format_size(n) == text
