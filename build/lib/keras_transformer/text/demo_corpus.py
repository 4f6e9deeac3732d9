"""A small English→Vietnamese corpus made by code, so demos and tests need no download.

It mixes number words ("one thousand fifty" → "một nghìn không trăm năm mươi") with simple
sentences whose adjectives and classifiers reorder ("I bought three big red apples" → "tôi đã mua
ba quả táo đỏ to"), which gives a Transformer real but learnable reordering to do.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from keras_transformer.text.numbers import number_to_english, number_to_vietnamese

__all__ = [
    "ADJECTIVES",
    "NOUNS",
    "PRONOUNS",
    "TENSES",
    "VERBS",
    "demo_splits",
    "generate_pairs",
    "number_pair",
    "render_sentence",
]

Pair = tuple[str, str]

# Share of number pairs in the mix; the rest are sentences.
NUMBER_SHARE = 0.4


class _Pronoun(NamedTuple):
    vi: str
    be: str  # present tense of "to be" for the progressive


class _Verb(NamedTuple):
    past: str
    ing: str
    vi: str


class _Noun(NamedTuple):
    plural: str
    vi: str
    classifier: str


class _Adjective(NamedTuple):
    kind: str  # "size" or "color"
    vi: str


PRONOUNS: dict[str, _Pronoun] = {
    "I": _Pronoun("tôi", "am"),
    "you": _Pronoun("bạn", "are"),
    "he": _Pronoun("anh ấy", "is"),
    "she": _Pronoun("cô ấy", "is"),
    "we": _Pronoun("chúng tôi", "are"),
    "they": _Pronoun("họ", "are"),
}

# Tense → Vietnamese aspect marker placed before the verb.
TENSES: dict[str, str] = {"past": "đã", "present": "đang", "future": "sẽ"}

VERBS: dict[str, _Verb] = {
    "buy": _Verb("bought", "buying", "mua"),
    "sell": _Verb("sold", "selling", "bán"),
    "draw": _Verb("drew", "drawing", "vẽ"),
    "bring": _Verb("brought", "bringing", "mang"),
    "wash": _Verb("washed", "washing", "rửa"),
    "choose": _Verb("chose", "choosing", "chọn"),
    "count": _Verb("counted", "counting", "đếm"),
    "hold": _Verb("held", "holding", "cầm"),
}

NOUNS: dict[str, _Noun] = {
    # animals: con
    "cat": _Noun("cats", "mèo", "con"),
    "dog": _Noun("dogs", "chó", "con"),
    "bird": _Noun("birds", "chim", "con"),
    "fish": _Noun("fish", "cá", "con"),
    "horse": _Noun("horses", "ngựa", "con"),
    "chicken": _Noun("chickens", "gà", "con"),
    # things: cái
    "table": _Noun("tables", "bàn", "cái"),
    "chair": _Noun("chairs", "ghế", "cái"),
    "cup": _Noun("cups", "cốc", "cái"),
    "bowl": _Noun("bowls", "bát", "cái"),
    "hat": _Noun("hats", "mũ", "cái"),
    # books: quyển
    "book": _Noun("books", "sách", "quyển"),
    "notebook": _Noun("notebooks", "vở", "quyển"),
    # vehicles and devices: chiếc
    "car": _Noun("cars", "xe hơi", "chiếc"),
    "bicycle": _Noun("bicycles", "xe đạp", "chiếc"),
    "phone": _Noun("phones", "điện thoại", "chiếc"),
    "boat": _Noun("boats", "thuyền", "chiếc"),
    # fruit and eggs: quả
    "apple": _Noun("apples", "táo", "quả"),
    "orange": _Noun("oranges", "cam", "quả"),
    "mango": _Noun("mangoes", "xoài", "quả"),
    "egg": _Noun("eggs", "trứng", "quả"),
}

ADJECTIVES: dict[str, _Adjective] = {
    "big": _Adjective("size", "to"),
    "small": _Adjective("size", "nhỏ"),
    "red": _Adjective("color", "đỏ"),
    "blue": _Adjective("color", "xanh"),
    "black": _Adjective("color", "đen"),
    "white": _Adjective("color", "trắng"),
    "yellow": _Adjective("color", "vàng"),
}
_PRONOUN_KEYS = tuple(PRONOUNS)
_TENSE_KEYS = tuple(TENSES)
_VERB_KEYS = tuple(VERBS)
_NOUN_KEYS = tuple(NOUNS)
_SIZES = tuple(k for k, a in ADJECTIVES.items() if a.kind == "size")
_COLORS = tuple(k for k, a in ADJECTIVES.items() if a.kind == "color")

# Counts written with the indefinite article instead of a number word.
_ARTICLES = ("a", "an")
MAX_COUNT = 999


def _lookup(table: dict, key: object, what: str):
    try:
        return table[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {what} {key!r}; expected one of {sorted(table)}") from None


def _order_adjectives(adjectives: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Validate adjectives and return them in English order: size, then color."""
    by_kind: dict[str, str] = {}
    for adj in adjectives:
        kind = _lookup(ADJECTIVES, adj, "adjective").kind
        if kind in by_kind:
            raise ValueError(f"at most one {kind} adjective allowed, got {tuple(adjectives)!r}")
        by_kind[kind] = adj
    return tuple(by_kind[k] for k in ("size", "color") if k in by_kind)


def render_sentence(
    pronoun: str,
    tense: str,
    verb: str,
    count: int | str,
    adjectives: tuple[str, ...] | list[str],
    noun: str,
) -> Pair:
    """Render one (English, Vietnamese) sentence pair from English keys.

    ``count`` is an int 1..999 (1 is written "one") or "a"/"an" for the indefinite article,
    whose form is fixed to fit the next word. ``adjectives`` holds at most one size and one
    color adjective; English puts size before color, Vietnamese puts them after the noun with
    color first. ``render_sentence("I", "past", "buy", 3, ("big", "red"), "apple")`` gives
    ``("I bought three big red apples", "tôi đã mua ba quả táo đỏ to")``.
    """
    p = _lookup(PRONOUNS, pronoun, "pronoun")
    marker = _lookup(TENSES, tense, "tense")
    v = _lookup(VERBS, verb, "verb")
    n = _lookup(NOUNS, noun, "noun")
    adjs = _order_adjectives(adjectives)

    if tense == "past":
        en_verb = v.past
    elif tense == "present":
        en_verb = f"{p.be} {v.ing}"
    else:
        en_verb = f"will {verb}"

    noun_phrase = [*adjs]
    if count in _ARTICLES:
        noun_phrase.append(noun)
        article = "an" if noun_phrase[0][0] in "aeiou" else "a"
        en_count, vi_count = article, "một"
    elif isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_COUNT:
        noun_phrase.append(noun if count == 1 else n.plural)
        en_count, vi_count = number_to_english(count), number_to_vietnamese(count)
    else:
        raise ValueError(f"count must be 'a', 'an' or an int in 1..{MAX_COUNT}, got {count!r}")

    english = " ".join([pronoun, en_verb, en_count, *noun_phrase])
    vi_adjs = [ADJECTIVES[a].vi for a in reversed(adjs)]  # color, then size
    vietnamese = " ".join([p.vi, marker, v.vi, vi_count, n.classifier, n.vi, *vi_adjs])
    return english, vietnamese


def number_pair(n: int) -> Pair:
    """The (English, Vietnamese) pair of number words for ``n``."""
    return number_to_english(n), number_to_vietnamese(n)


# ------------------------------------------------------------------------------ sampling


def _draw_number(rng: random.Random) -> int:
    """A number whose digit count is uniform over 1..9, so all magnitudes appear."""
    digits = rng.randint(1, 9)
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.randint(low, 10**digits - 1)


def _draw_count(rng: random.Random) -> int | str:
    r = rng.random()
    if r < 0.15:
        return "a"
    if r < 0.20:
        return 1
    if r < 0.55:
        return rng.randint(2, 20)
    if r < 0.90:
        return rng.randint(21, 99)
    return rng.randint(100, MAX_COUNT)


def _draw_adjectives(rng: random.Random) -> tuple[str, ...]:
    size = rng.choice(_SIZES) if rng.random() < 0.5 else None
    color = rng.choice(_COLORS) if rng.random() < 0.6 else None
    return tuple(a for a in (size, color) if a is not None)


def _draw_sentence(rng: random.Random) -> Pair:
    return render_sentence(
        rng.choice(_PRONOUN_KEYS),
        rng.choice(_TENSE_KEYS),
        rng.choice(_VERB_KEYS),
        _draw_count(rng),
        _draw_adjectives(rng),
        rng.choice(_NOUN_KEYS),
    )


def _draw_pair(rng: random.Random, is_number: bool) -> Pair:
    return number_pair(_draw_number(rng)) if is_number else _draw_sentence(rng)


def generate_pairs(count: int, seed: int) -> list[Pair]:
    """``count`` (English, Vietnamese) pairs drawn with ``random.Random(seed)``.

    About 40% are number pairs and 60% sentences. The same seed always gives the same list;
    pairs may repeat (use :func:`demo_splits` for distinct pairs).
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    rng = random.Random(seed)
    return [_draw_pair(rng, rng.random() < NUMBER_SHARE) for _ in range(count)]


def demo_splits(
    train_size: int = 60_000,
    dev_size: int = 1_000,
    test_size: int = 1_000,
    seed: int = 1234,
) -> dict[str, list[Pair]]:
    """Fixed train/dev/test splits of distinct pairs, keyed "train", "dev" and "test".

    No English source appears twice, within or across splits, and each split has exactly the
    size asked for. Test is drawn first, then dev, then train, so the test and dev sets do not
    change when only ``train_size`` does. About 40% of each split is number pairs: a draw that
    repeats an earlier source is redrawn from the same kind.
    """
    sizes = {"test": test_size, "dev": dev_size, "train": train_size}
    for name, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"{name}_size must be an int >= 0, got {size!r}")

    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list[Pair]] = {}
    for name, size in sizes.items():
        split: list[Pair] = []
        while len(split) < size:
            is_number = rng.random() < NUMBER_SHARE
            for _ in range(1_000):
                pair = _draw_pair(rng, is_number)
                if pair[0] not in seen:
                    break
            else:  # pragma: no cover - the spaces hold millions of pairs
                raise RuntimeError("could not draw a new pair; the requested splits are too large")
            seen.add(pair[0])
            split.append(pair)
        splits[name] = split
    return {name: splits[name] for name in ("train", "dev", "test")}
