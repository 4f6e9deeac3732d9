"""Cardinal numbers written out in English and in Vietnamese words.

Both functions cover 0 to 999,999,999. English follows the American style without "and"
("two hundred five", "twenty-one"); Vietnamese uses the northern forms ("nghìn", "lẻ").
"""

from __future__ import annotations

MAX_NUMBER = 999_999_999

_EN_ONES = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
)
_EN_TENS = (
    "",
    "",
    "twenty",
    "thirty",
    "forty",
    "fifty",
    "sixty",
    "seventy",
    "eighty",
    "ninety",
)
# Group scales from the highest group down; the last group has no scale word.
_EN_SCALES = ("million", "thousand", "")
_VI_SCALES = ("triệu", "nghìn", "")

_VI_DIGITS = ("không", "một", "hai", "ba", "bốn", "năm", "sáu", "bảy", "tám", "chín")


def _check(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"expected an int between 0 and {MAX_NUMBER:,}, got {n!r}")
    if not 0 <= n <= MAX_NUMBER:
        raise ValueError(f"number out of range: {n:,} (supported range is 0 to {MAX_NUMBER:,})")
    return n


def _groups(n: int) -> tuple[int, int, int]:
    """Split n into (millions, thousands, units), each 0..999."""
    return n // 1_000_000, n // 1_000 % 1_000, n % 1_000


# ---------------------------------------------------------------------------- English


def _en_below_100(n: int) -> str:
    if n < 20:
        return _EN_ONES[n]
    tens, unit = divmod(n, 10)
    return _EN_TENS[tens] if unit == 0 else f"{_EN_TENS[tens]}-{_EN_ONES[unit]}"


def _en_below_1000(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    words = []
    if hundreds:
        words.append(f"{_EN_ONES[hundreds]} hundred")
    if rest:
        words.append(_en_below_100(rest))
    return " ".join(words)


def number_to_english(n: int) -> str:
    """English words for ``n`` (0 ≤ n ≤ 999,999,999), e.g. 1050 → "one thousand fifty"."""
    n = _check(n)
    if n == 0:
        return "zero"
    words = []
    for group, scale in zip(_groups(n), _EN_SCALES, strict=True):
        if group:
            words.append(_en_below_1000(group))
            if scale:
                words.append(scale)
    return " ".join(words)


# ------------------------------------------------------------------------- Vietnamese


def _vi_below_100(n: int) -> str:
    """Vietnamese words for 0..99 read on their own (no "lẻ")."""
    if n < 10:
        return _VI_DIGITS[n]
    tens, unit = divmod(n, 10)
    head = "mười" if tens == 1 else f"{_VI_DIGITS[tens]} mươi"
    if unit == 0:
        return head
    if unit == 5:
        tail = "lăm"
    elif unit == 1 and tens > 1:
        tail = "mốt"
    elif unit == 4 and tens > 1:
        tail = "tư"
    else:
        tail = _VI_DIGITS[unit]
    return f"{head} {tail}"


def _vi_group(n: int, *, leading: bool) -> str:
    """Vietnamese words for one three-digit group 1..999.

    A leading group below 100 is read as is ("mười lăm"); any other group always states its
    hundreds ("không trăm mười lăm") and uses "lẻ" for a zero tens digit ("không trăm lẻ năm").
    """
    hundreds, rest = divmod(n, 100)
    if leading and hundreds == 0:
        return _vi_below_100(rest)
    words = [_VI_DIGITS[hundreds], "trăm"]
    if 0 < rest < 10:
        words += ["lẻ", _VI_DIGITS[rest]]
    elif rest:
        words.append(_vi_below_100(rest))
    return " ".join(words)


def number_to_vietnamese(n: int) -> str:
    """Vietnamese words for ``n`` (0 ≤ n ≤ 999,999,999), e.g. 1050 → "một nghìn không trăm năm mươi"."""
    n = _check(n)
    if n == 0:
        return "không"
    words = []
    for group, scale in zip(_groups(n), _VI_SCALES, strict=True):
        if group:
            words.append(_vi_group(group, leading=not words))
            if scale:
                words.append(scale)
    return " ".join(words)
