"""Write a config's translation corpus as the TSV files a streamed run reads (data.stream):
its training pairs in gzip shards, its dev and test pairs in one file each.

    python -m train.write_shards --config train/configs/spa_eng_small.yaml \\
        --out runs/spa_eng_shards --shards 8

The splits are the config's own (train.data.load_corpus: spa_eng_small's held-out English
sources), so the streamed recipe (train/configs/spa_eng_stream.yaml) trains and scores on the
pairs the in-memory one does. Pairs go to the shards in turn (pair i to shard i mod N).
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

from keras_transformer.command_line import CommandError, entry_point
from keras_transformer.file_safety import atomic_write_text, written_in_place_of


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m train.write_shards", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="a translation config (its data: "
                        "section says what to read and how to split it)")
    parser.add_argument("--out", required=True, help="the folder to write (e.g. under runs/)")
    parser.add_argument("--shards", type=int, default=8, help="training shards (default 8)")
    parser.add_argument("--plain", action="store_true", help="plain TSV shards, not gzip")
    parser.add_argument("--overwrite", action="store_true", help="replace existing files")
    return parser.parse_args(argv)


def line(source: str, target: str) -> str:
    return f"{source}\t{target}\n"


@entry_point
def main(argv) -> int:
    args = parse_args(argv)
    if args.shards < 1:
        raise CommandError(f"--shards must be >= 1, got {args.shards}")
    from .config import load_config
    from .data import load_corpus

    config = load_config(args.config)
    if config.task != "translation" or config.data.stream:
        raise CommandError(f"{args.config}: give an in-memory translation config (task "
                           f"translation, data.stream false)")
    out = Path(args.out)
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        raise CommandError(f"--out {out} is not empty; add --overwrite to replace its files")
    corpus = load_corpus(config.data)
    out.mkdir(parents=True, exist_ok=True)
    suffix = ".tsv" if args.plain else ".tsv.gz"
    for old in out.glob("train-*-of-*.tsv*"):
        old.unlink()
    pairs = list(zip(corpus.train.sources, corpus.train.targets, strict=True))
    for shard in range(args.shards):
        text = "".join(line(s, t) for s, t in pairs[shard:: args.shards]).encode()
        path = out / f"train-{shard:05d}-of-{args.shards:05d}{suffix}"
        with written_in_place_of(path, suffix) as tmp:
            # mtime 0: the same corpus gives the same bytes.
            Path(tmp).write_bytes(text if args.plain else gzip.compress(text, mtime=0))
    for name, split in (("dev", corpus.dev), ("test", corpus.test)):
        if split is not None:
            atomic_write_text(out / f"{name}.tsv", "".join(
                line(s, t) for s, t in zip(split.sources, split.targets, strict=True)))
    print(f"{len(pairs)} training pairs in {args.shards} shards, {len(corpus.dev)} dev and "
          f"{len(corpus.test) if corpus.test else 0} test pairs: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
