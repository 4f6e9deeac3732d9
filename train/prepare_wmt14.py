"""WMT 2014 English-German from a local folder into the files a streamed run reads
(train/configs/wmt14_ende_base.yaml, wmt14_ende_big.yaml): the training pairs in gzip TSV
shards, newstest2013 as dev.tsv and newstest2014 as test.tsv, English first.

    python -m train.prepare_wmt14 --src-dir /data/wmt14 --out runs/wmt14_ende --shards 64

The folder (searched with its subfolders, as the archives unpack) holds the training corpora
europarl-v7.de-en.{en,de}, commoncrawl.de-en.{en,de} and news-commentary-v9.de-en.{en,de}, and
newstest2013 and newstest2014, as SGML (newstest2013-src.en.sgm, newstest2014-deen-ref.de.sgm,
...) or plain text (newstest2013.en, newstest2013.de). Nothing is downloaded. Pairs go to the
shards in turn (pair i to shard i mod N), so every shard holds each corpus alike. A pair with
an empty side is dropped and a tab inside a sentence becomes a space, both counted; files of
different line counts are an error naming them. The shards are written under temporary names
and renamed when all are complete: an interrupted run leaves none half-written.
"""

from __future__ import annotations

import argparse
import gzip
import html
import os
import re
from itertools import zip_longest
from pathlib import Path

from keras_transformer.command_line import CommandError, entry_point
from keras_transformer.file_safety import atomic_write_text
from keras_transformer.text.lines import read_lines

CORPORA = ("europarl-v7.de-en", "commoncrawl.de-en", "news-commentary-v9.de-en")
SEGMENT = re.compile(r"<seg[^>]*>(.*)</seg>", re.I)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m train.prepare_wmt14", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src-dir", required=True, help="the folder of the WMT14 files")
    parser.add_argument("--out", required=True, help="the folder to write (e.g. runs/wmt14_ende)")
    parser.add_argument("--shards", type=int, default=64, help="training shards (default 64)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing files")
    return parser.parse_args(argv)


def find(src: Path, names: list[str], what: str) -> Path:
    """The first of `names` found in `src` or below it (sorted, so the choice is fixed)."""
    for name in names:
        found = sorted(src.rglob(name))
        if found:
            return found[0]
    raise CommandError(f"{what}: none of {', '.join(names)} under {src}")


def newstest(src: Path, year: int, side: str) -> list[str]:
    """newstest<year>'s `side` sentences, from plain text or the SGML's <seg> lines."""
    role = "src" if side == "en" else "ref"
    path = find(src, [f"newstest{year}.{side}", f"newstest{year}-deen-{role}.{side}.sgm",
                      f"newstest{year}-ende-*.{side}.sgm", f"newstest{year}-{role}.{side}.sgm",
                      f"newstest{year}*.{side}.sgm"], f"newstest{year} ({side})")
    lines = read_lines(path)
    if path.suffix != ".sgm":
        return [line.strip() for line in lines]
    # XML entities (&amp;, &lt;) stand for their characters in the segments.
    return [html.unescape(m.group(1)).strip() for m in map(SEGMENT.search, lines) if m]


def held_out(src: Path, year: int) -> list[tuple[str, str]]:
    """newstest<year>'s (English, German) pairs, tabs made spaces as in the shards."""
    english, german = newstest(src, year, "en"), newstest(src, year, "de")
    if not english or len(english) != len(german):
        raise CommandError(f"newstest{year}: its English and German files hold "
                           f"{len(english)} and {len(german)} sentences")
    unused = {"tabs_replaced": 0}
    return [(clean(e, unused), clean(d, unused)) for e, d in zip(english, german, strict=True)]


def pairs_of(english: Path, german: Path):
    """The line-aligned pairs of two files, read line by line (the corpus never in memory)."""
    with open(english, "rb") as en, open(german, "rb") as de:
        for number, (e, d) in enumerate(zip_longest(en, de), start=1):
            if e is None or d is None:
                short = english if e is None else german
                raise CommandError(f"{short} ends at line {number - 1} but "
                                   f"{german if e is None else english} goes on: the files "
                                   f"must be line-aligned")
            try:
                yield e.decode("utf-8"), d.decode("utf-8")
            except UnicodeDecodeError:
                bad = english if _not_utf8(e) else german
                raise CommandError(f"{bad} line {number} is not UTF-8") from None


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def clean(text: str, counts: dict) -> str:
    text = text.rstrip("\r\n").removeprefix("\ufeff")
    if "\t" in text:
        counts["tabs_replaced"] += 1
        text = text.replace("\t", " ")
    return text.strip()


def write_pairs(path: Path, pairs) -> None:
    atomic_write_text(path, "".join(f"{e}\t{d}\n" for e, d in pairs))


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    if args.shards < 1:
        raise CommandError(f"--shards must be >= 1, got {args.shards}")
    src, out = Path(args.src_dir), Path(args.out)
    if not src.is_dir():
        raise CommandError(f"--src-dir {src}: no such folder")
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        raise CommandError(f"--out {out} is not empty; add --overwrite to replace its files")
    # Every input found before anything is written.
    corpora = [(find(src, [f"{name}.en"], name), find(src, [f"{name}.de"], name))
               for name in CORPORA]
    dev, test = held_out(src, 2013), held_out(src, 2014)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("train-*-of-*.tsv.gz"):
        old.unlink()
    names = [out / f"train-{i:05d}-of-{args.shards:05d}.tsv.gz" for i in range(args.shards)]
    temporary = [path.with_name(f".{path.name}.{os.getpid()}.tmp") for path in names]
    counts = {"pairs": 0, "empty_dropped": 0, "tabs_replaced": 0}
    files = []
    try:
        # mtime 0: the same corpus gives the same bytes.
        files = [gzip.GzipFile(path, "wb", mtime=0) for path in temporary]
        for english, german in corpora:
            for e, d in pairs_of(english, german):
                e, d = clean(e, counts), clean(d, counts)
                if not e or not d:
                    counts["empty_dropped"] += 1
                    continue
                files[counts["pairs"] % args.shards].write(f"{e}\t{d}\n".encode())
                counts["pairs"] += 1
        for file in files:
            file.close()
        for tmp, path in zip(temporary, names, strict=True):
            os.replace(tmp, path)
    finally:
        for file in files:
            file.close()
        for tmp in temporary:
            tmp.unlink(missing_ok=True)
    write_pairs(out / "dev.tsv", dev)
    write_pairs(out / "test.tsv", test)
    print(f"{counts['pairs']} training pairs of {len(CORPORA)} corpora in {args.shards} shards "
          f"({counts['empty_dropped']} with an empty side dropped, {counts['tabs_replaced']} "
          f"tabs replaced), {len(dev)} dev (newstest2013) and {len(test)} test (newstest2014) "
          f"pairs: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
