"""keras_transformer.text.lines: one rule set for every reader of text lines in the project."""

from __future__ import annotations

import io
import logging
import sys
import types

import pytest

from keras_transformer.decoding import SearchSettings
from keras_transformer.text.lines import decode_lines, read_lines
from keras_transformer.text.tokenizer import load_parallel_text, load_tsv_pairs

# A BOM, CRLF and LF endings, a lone CR and a U+2028 inside lines, a blank line, no final newline.
RAW = "\ufeffone\r\ntwo\rstill two\n\nthree\u2028three\r\nlast".encode()
EXPECTED = ["one", "two\rstill two", "", "three\u2028three", "last"]


def test_rules_by_hand():
    assert decode_lines(RAW) == EXPECTED
    assert decode_lines(b"") == []
    assert decode_lines(b"\n") == [""]
    assert decode_lines(b"a\n") == ["a"]
    assert decode_lines(b"a\r\r\nb") == ["a\r", "b"]  # one CR belongs to the line ending
    assert decode_lines("\ufeff\ufeffx\n".encode()) == ["\ufeffx"]  # one BOM is dropped


def test_bad_bytes_name_the_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"ok\nfine\n\xff\xfe bad\n")
    with pytest.raises(ValueError, match=r"bad.txt line 3 is not valid UTF-8"):
        read_lines(path)
    path.write_bytes(b"ok\nnul\x00here\n")
    with pytest.raises(ValueError, match=r"bad.txt line 2 holds a NUL byte"):
        read_lines(path)
    with pytest.raises(FileNotFoundError, match="file not found: .*none.txt"):
        read_lines(tmp_path / "none.txt")


def test_replace_warns_with_the_source_and_line(caplog):
    with caplog.at_level(logging.WARNING):
        lines = decode_lines(b"ok\n\xff bad\nn\x00l\n", "stdin", errors="replace")
    assert lines == ["ok", "\ufffd bad", "n\ufffdl"]
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("stdin line 2 is not valid UTF-8") for m in messages)
    assert any(m.startswith("stdin line 3 holds a NUL byte") for m in messages)
    with pytest.raises(ValueError, match="errors must be one of"):
        decode_lines(b"x", errors="ignore")


def test_every_reader_sees_the_same_lines(tmp_path, monkeypatch):
    path = tmp_path / "text.txt"
    path.write_bytes(RAW)
    assert read_lines(path) == EXPECTED
    kept = [line.strip() for line in EXPECTED if line.strip()]
    parallel = load_parallel_text(path, path)
    assert parallel.sources == parallel.targets == kept
    assert parallel.dropped == len(EXPECTED) - len(kept)

    tsv = tmp_path / "pairs.tsv"
    tsv.write_bytes("\ufeffone\tuno\r\ntwo\rstill two\tdos\n\nthree\u2028three\ttres\r\n"
                    "last\tfin".encode())
    pairs = load_tsv_pairs(tsv)
    assert pairs.sources == kept and pairs.targets == ["uno", "dos", "tres", "fin"]

    from train.data import load_labeled_tsv

    labeled = tmp_path / "labeled.tsv"
    labeled.write_bytes(b"\xef\xbb\xbfsentence\tlabel\r\ngood\rfilm\t1\nbad film\t0")
    assert load_labeled_tsv(labeled).texts == ["good\rfilm", "bad film"]

    # export.translate reads a file and stdin by the same rules (replacing bad bytes).
    import export.kinds
    from export.translate import main

    class Echo:
        def translate(self, lines, settings, **kwargs):
            return list(lines)

    monkeypatch.setattr(export.kinds, "open_runner", lambda *args, **kwargs: Echo())
    search = SearchSettings(beam_size=1)
    monkeypatch.setattr(export.kinds, "open_manifest",
                        lambda *args: types.SimpleNamespace(search=search))
    out = tmp_path / "out.txt"
    assert main(["--export", str(tmp_path / "export"), str(path), "-o", str(out)]) == 0
    assert read_lines(out) == EXPECTED
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(RAW)))
    assert main(["--export", str(tmp_path / "export"), "-o", str(out)]) == 0
    assert read_lines(out) == EXPECTED
