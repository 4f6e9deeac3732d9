"""The pass before streamed training (train.shards.scan_shards), which reads shards in blocks
checked together (shards.count_lines) and draws the tokenizer's sample by its positions
(tokenizer_sources.sample_positions), against the pass in Python line by line that it
replaces (bench.stream_scan.python_pass: shard_pairs and sample_sentences, the oracle): the
same counts, dropped lines, sample and errors, word for word, on shards of every kind of line,
plain and gzip."""

import gzip
import random

import numpy as np
import pytest

import keras_transformer.text.shards as text_shards
from bench.stream_scan import block_pass, python_pass
from keras_transformer.text.shards import count_lines, shard_pairs, solid
from train.tokenizer_sources import sample_positions, sample_sentences

# Lines shard_pairs keeps or drops (blank, an empty side, sides of Unicode whitespace or a
# byte-order mark only), with the endings and bytes a shard may hold.
ODD_LINES = ["\n", "   \n", " \t \n", "\t\n", "a\t\n", "\tb\n", "a\t  \n", "a\t\u3000\n",
             "\u00a0\tb\n", "\ufeff\tb\n", "\ufeffa\tb\n", "a\tb\r\n", "a\tb\r\r\n", "\r\n",
             "\x1c\x1d\tb\n", "a\t\x85\n", "\u2028\t\u2029\n", "\x00\tb\n", "日本\t語\n",
             "あ\tい\n", "\u3000\t\u3000\n", "\x0b\x0c\n", "é\tñ\n", "a \t b\n", "\ufeff\n"]
PIECES = ["a", "é", "\t", " ", "\u3000", "\u00a0", "\ufeff", "\r", "\x1c", "\x00", "あ",
          "\u2028", "\x85", "\x0b", "日"]


def error_of(scan, *args):
    with pytest.raises(ValueError) as err:
        scan(*args)
    return str(err.value)


def random_lines(rng, count, odd=0.2):
    """Pairs of words, a share of them with odd whitespace; and ODD_LINES, mixed in."""
    lines = []
    for i in range(count):
        if rng.random() < odd:
            lines.append(rng.choice(ODD_LINES))
            continue
        sides = ["".join(rng.choice(PIECES[:2] + PIECES[3:]) for _ in range(rng.randint(0, 6)))
                 + f"w{i}" for _ in range(2)]
        lines.append("\t".join(sides) + rng.choice(["\n", "\r\n"]))
    return lines


def write(path, lines, gzipped, members=1):
    data = "".join(lines).encode()
    if gzipped:  # a file of several gzip members reads as their contents one after another
        cut = len(data) // members
        data = b"".join(gzip.compress(data[i * cut: None if i == members - 1 else (i + 1) * cut])
                        for i in range(members))
    path.write_bytes(data)
    return path


@pytest.fixture(params=[1 << 22, 97], ids=["blocks", "tiny-blocks"])
def block(request, monkeypatch):
    """Blocks of the usual size, and tiny ones, so lines straddle blocks and outgrow them."""
    monkeypatch.setattr(text_shards, "CHUNK_BYTES", request.param)
    return request.param


def test_solid_bytes_are_never_part_of_whitespace_or_a_byte_order_mark():
    blank = "".join(chr(c) for c in range(0x110000) if chr(c).isspace()) + "\ufeff"
    assert not solid(np.frombuffer(blank.encode(), np.uint8)).any()
    assert solid(np.frombuffer(b"!az~", np.uint8)).all()
    assert not solid(np.frombuffer(b" \t\x7f\x00\xc3", np.uint8)).any()


def test_count_lines_drops_what_shard_pairs_drops(tmp_path, block):
    rng = random.Random(11)
    for i in range(12):
        lines = random_lines(rng, rng.randint(0, 300))
        if i % 3 == 0 and lines:
            lines[-1] = lines[-1].rstrip("\n")  # a last line without a newline
        path = write(tmp_path / f"s{i}.tsv", lines, gzipped=i % 2, members=1 + i % 3)
        expected = [pair is None for pair in shard_pairs(path)]
        count = count_lines(path)
        assert count.lines == len(expected)
        assert count.dropped.tolist() == np.flatnonzero(expected).tolist()


def test_scan_matches_the_python_pass_on_good_shards(tmp_path, block):
    rng = random.Random(5)
    files = [write(tmp_path / f"train-{i}.tsv{'.gz' * (i % 2)}", random_lines(rng, n),
                   gzipped=i % 2) for i, n in enumerate([400, 0, 250, 1, 700])]
    files.append(write(tmp_path / "train-5.tsv", ["\n", "\n"], gzipped=False))
    assert None not in map(count_lines, files)  # all read in blocks, none by the oracle's reader
    for sample, seed in [(0, 1), (1, 2), (37, 3), (300, 4), (5000, 5)]:
        assert block_pass(files, sample, seed) == python_pass(files, sample, seed)


@pytest.mark.parametrize("bad", [
    b"a\tb\tc\n", b"just a source\n", "\u3000あ\n".encode(), "あ\tい\tう\n".encode(),
    b"caf\xe9\tcafe\n", b"a\t\xed\xa0\x80\n", b"ok\tfine\xf0\x9f\n",
])
def test_a_broken_line_gives_the_python_pass_error(tmp_path, bad, block):
    rng = random.Random(3)
    good = [write(tmp_path / f"train-{i}.tsv.gz", random_lines(rng, 200), gzipped=True)
            for i in range(2)]
    lines = random_lines(rng, 300)
    broken = tmp_path / "train-1b.tsv"
    broken.write_bytes("".join(lines[:150]).encode() + bad + "".join(lines[150:]).encode())
    later = write(tmp_path / "train-2.tsv", ["a\tb\tc\n"], gzipped=False)  # never reached
    files = [good[0], broken, good[1], later]
    assert count_lines(broken) is None  # left to shard_pairs, which reports it
    message = error_of(python_pass, files, 10, 1)
    assert message.startswith(f"shard {broken} line ")
    assert error_of(block_pass, files, 10, 1) == message


def test_a_corrupt_gzip_between_good_shards_gives_the_python_pass_error(tmp_path, block):
    rng = random.Random(8)
    first = write(tmp_path / "train-0.tsv.gz", random_lines(rng, 300), gzipped=True)
    data = gzip.compress("".join(f"source {i}\ttarget {i}\n" for i in range(20000)).encode())
    cut = tmp_path / "train-1.tsv.gz"
    cut.write_bytes(data[: len(data) // 2])
    damaged = bytearray(data)
    damaged[len(data) // 2: len(data) // 2 + 64] = b"\0" * 64
    broken = tmp_path / "train-1d.tsv.gz"
    broken.write_bytes(bytes(damaged))
    magic = tmp_path / "train-1m.tsv"
    magic.write_bytes(b"\x1f\x8bnot gzip at all\n")
    last = write(tmp_path / "train-2.tsv", random_lines(rng, 50), gzipped=False)
    for bad in (cut, broken, magic):
        files = [first, bad, last]
        assert count_lines(bad) is None
        message = error_of(python_pass, files, 20, 2)
        assert message.startswith(f"shard {bad} ") and "\n" not in message
        assert error_of(block_pass, files, 20, 2) == message


def test_an_empty_corpus_is_refused_as_before(tmp_path):
    files = [write(tmp_path / "a.tsv", ["\n", "a\t \n"], gzipped=False),
             write(tmp_path / "b.tsv.gz", [], gzipped=True)]
    assert error_of(block_pass, files, 5, 1).endswith("hold no sentence pairs")


@pytest.mark.parametrize("total, count, seed", [
    (0, 5, 1), (3, 5, 1), (5, 5, 1), (6, 5, 1), (1000, 0, 1), (5000, 1, 2), (70_000, 7, 4),
    (300_000, 70_000, 6),
])
def test_sample_positions_are_distinct_ascending_and_sample_sentences_positions(total, count,
                                                                              seed):
    positions = sample_positions(total, count, seed).tolist()
    assert len(positions) == min(total, count) and positions == sorted(set(positions))
    assert all(0 <= p < total for p in positions)
    assert positions == sample_sentences(range(total), count, seed)
