"""Tests for the number words and the embedded English→Vietnamese demo corpus."""

from __future__ import annotations

import random
import re

import pytest

from keras_transformer.text.demo_corpus import demo_splits, generate_pairs, render_sentence
from keras_transformer.text.numbers import number_to_english, number_to_vietnamese

# --------------------------------------------------------------------- hand-written tables

NUMBER_CASES = [
    (0, "zero", "không"),
    (1, "one", "một"),
    (4, "four", "bốn"),
    (5, "five", "năm"),
    (7, "seven", "bảy"),
    (10, "ten", "mười"),
    (11, "eleven", "mười một"),
    (14, "fourteen", "mười bốn"),
    (15, "fifteen", "mười lăm"),
    (19, "nineteen", "mười chín"),
    (20, "twenty", "hai mươi"),
    (21, "twenty-one", "hai mươi mốt"),
    (22, "twenty-two", "hai mươi hai"),
    (24, "twenty-four", "hai mươi tư"),
    (25, "twenty-five", "hai mươi lăm"),
    (36, "thirty-six", "ba mươi sáu"),
    (55, "fifty-five", "năm mươi lăm"),
    (100, "one hundred", "một trăm"),
    (101, "one hundred one", "một trăm lẻ một"),
    (105, "one hundred five", "một trăm lẻ năm"),
    (110, "one hundred ten", "một trăm mười"),
    (115, "one hundred fifteen", "một trăm mười lăm"),
    (121, "one hundred twenty-one", "một trăm hai mươi mốt"),
    (205, "two hundred five", "hai trăm lẻ năm"),
    (215, "two hundred fifteen", "hai trăm mười lăm"),
    (250, "two hundred fifty", "hai trăm năm mươi"),
    (999, "nine hundred ninety-nine", "chín trăm chín mươi chín"),
    (1000, "one thousand", "một nghìn"),
    (1005, "one thousand five", "một nghìn không trăm lẻ năm"),
    (1050, "one thousand fifty", "một nghìn không trăm năm mươi"),
    (1234, "one thousand two hundred thirty-four", "một nghìn hai trăm ba mươi tư"),
    (2010, "two thousand ten", "hai nghìn không trăm mười"),
    (10_000, "ten thousand", "mười nghìn"),
    (21_000, "twenty-one thousand", "hai mươi mốt nghìn"),
    (45_015, "forty-five thousand fifteen", "bốn mươi lăm nghìn không trăm mười lăm"),
    (100_001, "one hundred thousand one", "một trăm nghìn không trăm lẻ một"),
    (1_000_000, "one million", "một triệu"),
    (1_000_005, "one million five", "một triệu không trăm lẻ năm"),
    (1_005_000, "one million five thousand", "một triệu không trăm lẻ năm nghìn"),
    (3_000_200, "three million two hundred", "ba triệu hai trăm"),
    (5_000_000, "five million", "năm triệu"),
    (
        12_345_678,
        "twelve million three hundred forty-five thousand six hundred seventy-eight",
        "mười hai triệu ba trăm bốn mươi lăm nghìn sáu trăm bảy mươi tám",
    ),
    (
        999_999_999,
        "nine hundred ninety-nine million nine hundred ninety-nine thousand "
        "nine hundred ninety-nine",
        "chín trăm chín mươi chín triệu chín trăm chín mươi chín nghìn chín trăm chín mươi chín",
    ),
]

SENTENCE_CASES = [
    (
        ("I", "past", "buy", 3, ("big", "red"), "apple"),
        "I bought three big red apples",
        "tôi đã mua ba quả táo đỏ to",
    ),
    (
        ("she", "future", "buy", 21, ("small", "black"), "cat"),
        "she will buy twenty-one small black cats",
        "cô ấy sẽ mua hai mươi mốt con mèo đen nhỏ",
    ),
    (
        ("they", "present", "sell", "a", ("white",), "car"),
        "they are selling a white car",
        "họ đang bán một chiếc xe hơi trắng",
    ),
    (
        ("he", "present", "wash", "a", (), "egg"),
        "he is washing an egg",
        "anh ấy đang rửa một quả trứng",
    ),
    (
        ("she", "past", "hold", "an", ("big",), "orange"),
        "she held a big orange",
        "cô ấy đã cầm một quả cam to",
    ),
    (
        ("I", "present", "draw", 1, (), "horse"),
        "I am drawing one horse",
        "tôi đang vẽ một con ngựa",
    ),
    (
        ("we", "past", "bring", 15, ("yellow",), "fish"),
        "we brought fifteen yellow fish",
        "chúng tôi đã mang mười lăm con cá vàng",
    ),
    (
        ("you", "future", "choose", 24, ("big",), "book"),
        "you will choose twenty-four big books",
        "bạn sẽ chọn hai mươi tư quyển sách to",
    ),
    (
        ("he", "past", "count", 105, (), "mango"),
        "he counted one hundred five mangoes",
        "anh ấy đã đếm một trăm lẻ năm quả xoài",
    ),
    (
        ("they", "future", "sell", 2, ("blue",), "bicycle"),
        "they will sell two blue bicycles",
        "họ sẽ bán hai chiếc xe đạp xanh",
    ),
    (
        ("we", "present", "buy", 55, ("small", "white"), "cup"),
        "we are buying fifty-five small white cups",
        "chúng tôi đang mua năm mươi lăm cái cốc trắng nhỏ",
    ),
    (
        ("I", "past", "wash", 10, (), "bowl"),
        "I washed ten bowls",
        "tôi đã rửa mười cái bát",
    ),
    (
        ("you", "present", "hold", "a", ("red",), "phone"),
        "you are holding a red phone",
        "bạn đang cầm một chiếc điện thoại đỏ",
    ),
    (
        ("he", "future", "draw", 40, ("black",), "notebook"),
        "he will draw forty black notebooks",
        "anh ấy sẽ vẽ bốn mươi quyển vở đen",
    ),
]

# ------------------------------------------------------ independent parsers used as oracles

_EN_UNITS = {
    w: i
    for i, w in enumerate(
        [
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
        ]
    )
}
_EN_TENS = {
    w: 10 * i
    for i, w in enumerate(
        ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"], 2
    )
}
_EN_SCALES = {"thousand": 1_000, "million": 1_000_000}
_EN_NUMBER_WORD = re.compile(
    r"^(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|"
    r"fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|"
    r"seventy|eighty|ninety|hundred|thousand|million|"
    r"(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)-"
    r"(?:one|two|three|four|five|six|seven|eight|nine))$"
)


def parse_english(text: str) -> int:
    """English number words → int (a small left-to-right accumulator)."""
    total = current = 0
    for word in text.split(" "):
        if "-" in word:
            tens, unit = word.split("-")
            assert tens in _EN_TENS and 1 <= _EN_UNITS[unit] <= 9, word
            current += _EN_TENS[tens] + _EN_UNITS[unit]
        elif word in _EN_UNITS:
            current += _EN_UNITS[word]
        elif word in _EN_TENS:
            current += _EN_TENS[word]
        elif word == "hundred":
            assert 1 <= current <= 9, text
            current *= 100
        elif word in _EN_SCALES:
            assert 1 <= current <= 999, text
            total += current * _EN_SCALES[word]
            current = 0
        else:
            raise AssertionError(f"not an English number word: {word!r} in {text!r}")
    return total + current


_VI_DIGITS = {
    w: i
    for i, w in enumerate(["không", "một", "hai", "ba", "bốn", "năm", "sáu", "bảy", "tám", "chín"])
}
VI_NUMBER_SYLLABLES = set(_VI_DIGITS) | {
    "mười",
    "mươi",
    "mốt",
    "tư",
    "lăm",
    "lẻ",
    "trăm",
    "nghìn",
    "triệu",
}


def _parse_vi_below_100(tokens: list[str], *, allow_zero: bool) -> int:
    """Strict reader for 0..99 in canonical form (mốt / tư / lăm where they belong)."""
    if len(tokens) == 1 and tokens[0] in _VI_DIGITS:
        value = _VI_DIGITS[tokens[0]]
        assert allow_zero or value != 0, tokens
        return value
    if tokens[0] == "mười":
        tens, rest, after_muoi = 10, tokens[1:], False
    else:
        assert len(tokens) >= 2 and tokens[1] == "mươi", tokens
        tens, rest, after_muoi = 10 * _VI_DIGITS[tokens[0]], tokens[2:], True
        assert tens >= 20, tokens
    if not rest:
        return tens
    assert len(rest) == 1, tokens
    unit_word = rest[0]
    special = {"lăm": 5, "mốt": 1, "tư": 4} if after_muoi else {"lăm": 5}
    if unit_word in special:
        return tens + special[unit_word]
    unit = _VI_DIGITS[unit_word]
    assert unit not in (0, 5), tokens  # 5 must be "lăm" here
    assert not (after_muoi and unit in (1, 4)), tokens  # must be "mốt" / "tư"
    return tens + unit


def _parse_vi_group(tokens: list[str], *, leading: bool) -> int:
    if len(tokens) >= 2 and tokens[1] == "trăm":
        hundreds = _VI_DIGITS[tokens[0]]
        assert hundreds > 0 or not leading, tokens
        rest = tokens[2:]
        if not rest:
            value = 100 * hundreds
        elif rest[0] == "lẻ":
            assert len(rest) == 2 and 1 <= _VI_DIGITS[rest[1]] <= 9, tokens
            value = 100 * hundreds + _VI_DIGITS[rest[1]]
        else:
            value = 100 * hundreds + _parse_vi_below_100(rest, allow_zero=False)
            assert value % 100 >= 10, tokens  # below 10 needs "lẻ"
    else:
        assert leading, f"a non-leading group must state its hundreds: {tokens}"
        value = _parse_vi_below_100(tokens, allow_zero=False)
    assert value > 0, tokens  # zero groups are left out
    return value


def parse_vietnamese(text: str) -> int:
    """Vietnamese number words → int; rejects non-canonical readings."""
    tokens = text.split(" ")
    if tokens == ["không"]:
        return 0
    total, group, leading = 0, [], True
    for token in [*tokens, ""]:
        if token in ("triệu", "nghìn", ""):
            if not group:
                assert token == "", text
                break
            scale = {"triệu": 1_000_000, "nghìn": 1_000, "": 1}[token]
            assert total % (scale * 1000) == 0, text  # groups come in decreasing order
            total += _parse_vi_group(group, leading=leading) * scale
            group, leading = [], False
        else:
            group.append(token)
    return total


def _is_number_pair(english: str) -> bool:
    return all(_EN_NUMBER_WORD.match(w) for w in english.split(" "))


# ------------------------------------------------------------------------ number words


@pytest.mark.parametrize(("n", "english", "vietnamese"), NUMBER_CASES)
def test_number_words_table(n, english, vietnamese):
    assert number_to_english(n) == english
    assert number_to_vietnamese(n) == vietnamese


def test_number_table_covers_the_rules():
    # The table itself must exercise every rule: mốt, tư, lăm, lẻ, không trăm, skipped groups.
    viet = " ".join(v for _, _, v in NUMBER_CASES)
    for syllable in VI_NUMBER_SYLLABLES:
        assert syllable in viet.split(), syllable
    assert len(NUMBER_CASES) >= 25


@pytest.mark.parametrize("bad", [-1, 1_000_000_000, 10**12, 1.5, 3.0, "7", None, True])
def test_number_words_reject_bad_input(bad):
    with pytest.raises(ValueError):
        number_to_english(bad)
    with pytest.raises(ValueError):
        number_to_vietnamese(bad)


def test_parsers_agree_with_hand_table():
    # Guards the test oracles themselves.
    for n, english, vietnamese in NUMBER_CASES:
        assert parse_english(english) == n
        assert parse_vietnamese(vietnamese) == n


@pytest.mark.parametrize(
    "non_canonical",
    [
        "hai mươi một",
        "hai mươi bốn",
        "hai mươi năm",
        "mười năm",
        "một nghìn năm mươi",
        "hai trăm năm",
        "một triệu không nghìn",
    ],
)
def test_vietnamese_oracle_is_strict(non_canonical):
    with pytest.raises((AssertionError, KeyError)):
        parse_vietnamese(non_canonical)


def test_number_round_trip_random():
    rng = random.Random(7)
    numbers = [rng.randint(0, 10 ** rng.randint(1, 9) - 1) for _ in range(2_000)]
    numbers += [0, 999_999_999, 1_000_000, 1_001_001, 100_100_100]
    for n in numbers:
        english = number_to_english(n)
        vietnamese = number_to_vietnamese(n)
        assert parse_english(english) == n, english
        assert parse_vietnamese(vietnamese) == n, vietnamese
        assert set(vietnamese.split(" ")) <= VI_NUMBER_SYLLABLES, vietnamese


# ---------------------------------------------------------------------------- sentences


@pytest.mark.parametrize(("parts", "english", "vietnamese"), SENTENCE_CASES)
def test_render_sentence_table(parts, english, vietnamese):
    assert render_sentence(*parts) == (english, vietnamese)


def test_render_sentence_orders_adjectives_whatever_the_input_order():
    expected = ("I bought three big red apples", "tôi đã mua ba quả táo đỏ to")
    assert render_sentence("I", "past", "buy", 3, ["red", "big"], "apple") == expected


@pytest.mark.parametrize(
    "parts",
    [
        ("it", "past", "buy", 3, (), "apple"),
        ("I", "perfect", "buy", 3, (), "apple"),
        ("I", "past", "eat", 3, (), "apple"),
        ("I", "past", "buy", 3, (), "banana"),
        ("I", "past", "buy", 3, ("huge",), "apple"),
        ("I", "past", "buy", 3, ("red", "blue"), "apple"),
        ("I", "past", "buy", 3, ("big", "small"), "apple"),
        ("I", "past", "buy", 0, (), "apple"),
        ("I", "past", "buy", -2, (), "apple"),
        ("I", "past", "buy", 1000, (), "apple"),
        ("I", "past", "buy", "the", (), "apple"),
        ("I", "past", "buy", True, (), "apple"),
    ],
)
def test_render_sentence_rejects_bad_parts(parts):
    with pytest.raises(ValueError):
        render_sentence(*parts)


# ------------------------------------------------------------------------ generated pairs

_PRONOUN_VI = {
    "I": "tôi",
    "you": "bạn",
    "he": "anh ấy",
    "she": "cô ấy",
    "we": "chúng tôi",
    "they": "họ",
}


def _check_pair_shape(english: str, vietnamese: str) -> None:
    words = english.split(" ")
    assert len(words) <= 25, english
    assert len(vietnamese.split(" ")) <= 35, vietnamese
    assert all(w == "I" or re.fullmatch(r"[a-z]+(?:-[a-z]+)?", w) for w in words), english
    assert vietnamese == vietnamese.lower(), vietnamese
    assert all(c.isalpha() or c == " " for c in vietnamese), vietnamese
    assert "  " not in vietnamese and vietnamese == vietnamese.strip()
    if _is_number_pair(english):
        assert parse_vietnamese(vietnamese) == parse_english(english), (english, vietnamese)
        assert set(vietnamese.split(" ")) <= VI_NUMBER_SYLLABLES, vietnamese
    else:
        pronoun_vi = _PRONOUN_VI[words[0]]
        assert vietnamese.startswith(pronoun_vi + " "), (english, vietnamese)
        marker = vietnamese[len(pronoun_vi) + 1 :].split(" ")[0]
        if words[1] == "will":
            assert marker == "sẽ", (english, vietnamese)
        elif words[1] in ("am", "is", "are"):
            assert words[2].endswith("ing") and marker == "đang", (english, vietnamese)
        else:
            assert marker == "đã", (english, vietnamese)


def test_generate_pairs_is_deterministic():
    a = generate_pairs(500, seed=3)
    assert a == generate_pairs(500, seed=3)
    assert a != generate_pairs(500, seed=4)
    assert len(a) == 500
    assert generate_pairs(0, seed=3) == []
    with pytest.raises(ValueError):
        generate_pairs(-1, seed=3)


def test_generate_pairs_mix_and_shape():
    pairs = generate_pairs(5_000, seed=11)
    numbers = [parse_english(e) for e, _ in pairs if _is_number_pair(e)]
    share = len(numbers) / len(pairs)
    assert 0.35 <= share <= 0.45, share
    # Small and large magnitudes both appear.
    assert sum(n < 100 for n in numbers) > 50
    assert sum(n >= 1_000_000 for n in numbers) > 200
    for english, vietnamese in pairs:
        _check_pair_shape(english, vietnamese)
    # Sentences use all counts forms: article, "one", plurals.
    sentences = [e for e, _ in pairs if not _is_number_pair(e)]
    assert any(re.search(r" an? ", e) for e in sentences)
    assert any(" one " in e for e in sentences)
    assert any(e.endswith("s") for e in sentences)


@pytest.fixture(scope="module")
def default_splits():
    return demo_splits()


def test_demo_splits_sizes_and_distinct(default_splits):
    assert set(default_splits) == {"train", "dev", "test"}
    assert {k: len(v) for k, v in default_splits.items()} == {
        "train": 60_000,
        "dev": 1_000,
        "test": 1_000,
    }
    sources = {k: [e for e, _ in v] for k, v in default_splits.items()}
    for name, srcs in sources.items():
        assert len(set(srcs)) == len(srcs), name
    assert len(set(sources["train"])) >= 50_000
    assert not set(sources["train"]) & set(sources["dev"])
    assert not set(sources["train"]) & set(sources["test"])
    assert not set(sources["dev"]) & set(sources["test"])


def test_demo_splits_content(default_splits):
    for split in default_splits.values():
        share = sum(_is_number_pair(e) for e, _ in split) / len(split)
        assert 0.34 <= share <= 0.46, share
    for english, vietnamese in default_splits["test"] + default_splits["dev"]:
        _check_pair_shape(english, vietnamese)
    for english, vietnamese in default_splits["train"][::20]:
        _check_pair_shape(english, vietnamese)


def test_demo_splits_deterministic_and_seeded():
    a = demo_splits(train_size=300, dev_size=50, test_size=70, seed=5)
    assert a == demo_splits(train_size=300, dev_size=50, test_size=70, seed=5)
    assert {k: len(v) for k, v in a.items()} == {"train": 300, "dev": 50, "test": 70}
    b = demo_splits(train_size=300, dev_size=50, test_size=70, seed=6)
    assert a["train"] != b["train"] and a["test"] != b["test"]
    # Held-out sets stay fixed when only the training size changes.
    c = demo_splits(train_size=1_000, dev_size=50, test_size=70, seed=5)
    assert c["test"] == a["test"] and c["dev"] == a["dev"]


def test_demo_splits_rejects_bad_sizes():
    with pytest.raises(ValueError):
        demo_splits(train_size=-1)
    with pytest.raises(ValueError):
        demo_splits(dev_size=2.5)
