"""Where a run's text comes from: sentence pairs from the embedded demo corpus or files on
disk, labeled sentences from TSV files, articles and their summaries from TSV files, and
articles alone (language models)."""

from __future__ import annotations

import glob
import gzip
import logging
import random
import zlib
from dataclasses import dataclass
from pathlib import Path

from keras_transformer.file_safety import check_input_file
from keras_transformer.text.demo_corpus import demo_splits
from keras_transformer.text.lines import decode_lines, read_lines
from keras_transformer.text.sentences import split_sentences  # noqa: F401  (read from here)
from keras_transformer.text.tokenizer import load_parallel_text, load_tsv_pairs

from .config import WORD_JOINTS, ConfigError, DataConfig, data_dir

log = logging.getLogger("train")


@dataclass
class Split:
    sources: list[str]
    targets: list[str]

    def __len__(self) -> int:
        return len(self.sources)


@dataclass
class Corpus:
    train: Split
    dev: Split
    test: Split | None
    dropped_empty: int = 0


def resolve(config: DataConfig, name: str) -> Path:
    path = Path(name)
    if not path.is_absolute():
        path = data_dir(config) / path
    if not path.is_file():
        raise FileNotFoundError(
            f"data file not found: {path} (set data.data_dir in the config or the KT_DATA_DIR "
            f"environment variable to the folder that holds it)")
    return path


def matching_files(name: str, config: DataConfig, key: str) -> list[Path]:
    """The files `name` names (a file, or a glob), relative to the data folder, sorted; a glob
    that matches nothing, or a missing file, is an error naming `key` and the path."""
    pattern = Path(name)
    if not pattern.is_absolute():
        pattern = data_dir(config) / pattern
    if glob.has_magic(str(pattern)):
        files = sorted(Path(p) for p in glob.glob(str(pattern)) if Path(p).is_file())
        if not files:
            raise FileNotFoundError(f"{key}: no file matches {pattern} (set data.data_dir or "
                                    f"KT_DATA_DIR to the folder of the shards)")
        return files
    if not pattern.is_file():
        raise FileNotFoundError(f"{key}: shard not found: {pattern}")
    return [pattern]


def data_files(config: DataConfig) -> list[Path]:
    """The data files the config names, resolved (FileNotFoundError naming a missing one;
    `python -m train` calls it before it touches the run directory); none for the embedded
    demo corpus."""
    if config.corpus == "parallel":
        names = [config.train_source, config.train_target, config.dev_source,
                 config.dev_target]
        if config.test_source:
            names += [config.test_source, config.test_target]
    elif config.corpus == "tsv" and config.stream:
        names = [config.dev_source] + ([config.test_source] if config.test_source else [])
        return (matching_files(config.train_source, config, "data.train_source")
                + [resolve(config, name) for name in names])
    elif config.corpus == "tsv":
        names = [config.tsv] if config.tsv else [config.train_source, config.dev_source]
        if not config.tsv and config.test_source:
            names.append(config.test_source)
    elif config.corpus == "text" and config.stream:
        return ([path for name in config.texts
                 for path in matching_files(name, config, "data.texts")]
                + [resolve(config, name) for name in config.dev_texts])
    elif config.corpus == "text":
        names = [*config.texts, *config.dev_texts]
    elif config.corpus == "demo":
        return []
    else:
        raise ConfigError(f"data.corpus must be demo, parallel, tsv or text, got "
                          f"{config.corpus!r}")
    return [resolve(config, name) for name in names]


def _nonempty(split: Split, *paths: Path) -> Split:
    if not len(split):
        raise ValueError(f"{' and '.join(map(str, paths))} hold no sentence pairs (every line "
                         f"is empty, or a side of it is)")
    return split


def _split(pairs) -> Split:
    return Split([s for s, _ in pairs], [t for _, t in pairs])


def load_corpus(config: DataConfig) -> Corpus:
    """Train/dev(/test) splits for the configured corpus."""
    if config.corpus == "demo":
        splits = demo_splits(config.train_size, config.dev_size, config.test_size, config.seed)
        return Corpus(_split(splits["train"]), _split(splits["dev"]), _split(splits["test"]))
    if config.corpus == "parallel":
        def load(source: str, target: str):
            paths = resolve(config, source), resolve(config, target)
            loaded = load_parallel_text(*paths)
            return _nonempty(Split(loaded.sources, loaded.targets), *paths), loaded.dropped

        (train, train_dropped), (dev, dev_dropped) = (
            load(config.train_source, config.train_target),
            load(config.dev_source, config.dev_target))
        test, test_dropped = None, 0
        if config.test_source:
            test, test_dropped = load(config.test_source, config.test_target)
        return Corpus(train, dev, test, train_dropped + dev_dropped + test_dropped)
    if config.corpus == "tsv" and config.stream:
        # The training pairs stay in their shards (train.shards); dev and test are small.
        def load(name: str) -> tuple[Split, int]:
            loaded = load_tsv_pairs(resolve(config, name))
            return _nonempty(Split(loaded.sources, loaded.targets), resolve(config, name)), \
                loaded.dropped

        (dev, dev_dropped), (test, test_dropped) = load(config.dev_source), (None, 0)
        if config.test_source:
            test, test_dropped = load(config.test_source)
        return Corpus(Split([], []), dev, test, dev_dropped + test_dropped)
    if config.corpus == "tsv":
        tsv = resolve(config, config.tsv)
        loaded = load_tsv_pairs(tsv)
        _nonempty(Split(loaded.sources, loaded.targets), tsv)
        pairs = list(zip(loaded.sources, loaded.targets, strict=True))
        if config.group_by_source:
            return _grouped_split(config, pairs, loaded.dropped)
        # A seeded shuffle, so the dev/test split is the same on every machine and run.
        random.Random(config.seed).shuffle(pairs)
        held = config.dev_size + config.test_size
        if held >= len(pairs):
            raise ConfigError(f"dev_size + test_size = {held} leaves no training pairs out of "
                              f"{len(pairs)}")
        return Corpus(_split(pairs[held:]), _split(pairs[: config.dev_size]),
                      _split(pairs[config.dev_size: held]), loaded.dropped)
    raise ConfigError(f"data.corpus must be demo, parallel or tsv, got {config.corpus!r}")


def _grouped_split(config: DataConfig, pairs, dropped: int) -> Corpus:
    """Hold out whole sources: all translations of one source land in the same split.

    Tatoeba-style files list one English sentence with several translations; a pair-level
    split puts some of them in dev and the rest in train, and dev BLEU then rewards memory.
    dev and test take whole groups until they hold at least dev_size / test_size pairs.
    """
    groups: dict[str, list[tuple[str, str]]] = {}
    for pair in pairs:
        groups.setdefault(pair[0], []).append(pair)
    keys = sorted(groups)
    random.Random(config.seed).shuffle(keys)
    held: list[list[tuple[str, str]]] = [[], []]
    position = 0
    for split, size in enumerate((config.dev_size, config.test_size)):
        while len(held[split]) < size and position < len(keys):
            held[split].extend(groups[keys[position]])
            position += 1
    train = [pair for key in keys[position:] for pair in groups[key]]
    if not train:
        raise ConfigError(f"dev_size + test_size = {config.dev_size + config.test_size} leaves "
                          f"no training pairs out of {len(pairs)}")
    return Corpus(_split(train), _split(held[0]), _split(held[1]) if held[1] else None, dropped)


@dataclass
class LabeledSplit:
    texts: list[str]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.texts)


def parse_label(text: str, names, where: str) -> int:
    """A label as a file holds it -> its class id: an integer id (below len(names) when names
    are given), or one of `names`; ValueError naming `where` (file and line) otherwise."""
    label = text.strip()
    if label in names:
        return names.index(label)
    if label.isdigit() and (not names or int(label) < len(names)):
        return int(label)
    known = (f"one of {', '.join(names)} or an id 0 to {len(names) - 1}" if names else
             "a class id (an integer >= 0); name the classes with data.labels to use names")
    raise ValueError(f"{where}: unknown label {label!r}; expected {known}")


def is_header_label(label: str, names) -> bool:
    """Whether the label column of a `text<TAB>label` file's first line is a header's (GLUE's
    `sentence<TAB>label`): neither a class name nor an id."""
    return label.strip() not in names and not label.strip().isdigit()


def load_labeled_tsv(path: Path, names=()) -> LabeledSplit:
    """`text<TAB>label` lines (GLUE style; a header row is skipped); empty texts are dropped.
    Labels are read by `parse_label`."""
    names = list(names)
    texts, labels = [], []
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        text, sep, label = line.rpartition("\t")
        if not sep:
            raise ValueError(f"{path}:{lineno}: expected text<TAB>label, got {line[:80]!r}")
        if lineno == 1 and is_header_label(label, names):
            continue
        label_id = parse_label(label, names, f"{path}:{lineno}")
        if text.strip():
            texts.append(text.strip())
            labels.append(label_id)
    if not texts:
        raise ValueError(f"{path} holds no labeled sentences")
    return LabeledSplit(texts, labels)


def load_labeled_lines(text_path: Path, label_path: Path, names=()) -> LabeledSplit:
    """Two line-aligned files, one sentence a line and its label on the same line of the
    other (UIT-VSFC: sents.txt and sentiments.txt; no header). Labels are read by
    `parse_label`; files of different lengths, or a sentence without a label, are errors
    naming the file and line; a blank sentence is dropped with its label."""
    names = list(names)
    texts, labels = read_lines(text_path), read_lines(label_path)
    if len(texts) != len(labels):
        raise ValueError(f"{text_path} has {len(texts)} lines but {label_path} has "
                         f"{len(labels)}; the files must be line-aligned")
    split = LabeledSplit([], [])
    for lineno, (text, label) in enumerate(zip(texts, labels, strict=True), start=1):
        if not text.strip():
            continue
        if not label.strip():
            raise ValueError(f"{label_path}:{lineno}: empty label for the sentence on line "
                             f"{lineno} of {text_path}")
        split.labels.append(parse_label(label, names, f"{label_path}:{lineno}"))
        split.texts.append(text.strip())
    if not split.texts:
        raise ValueError(f"{text_path} holds no labeled sentences")
    return split


def load_classification(config: DataConfig, train: bool = True) -> dict[str, LabeledSplit]:
    """{"train", "dev"[, "test"]} labeled splits: `tsv` reads `text<TAB>label` files
    (data.train_source, dev_source, test_source); `parallel` reads sentence files with
    line-aligned label files (data.<split>_source and data.<split>_target). Labels are ids
    or, with data.labels, the class names; data.lowercase lower-cases the texts. Without
    `train` (a streamed training split) only dev and test."""
    if config.corpus not in ("tsv", "parallel"):
        raise ConfigError(f"task classification reads data.corpus tsv or parallel, got "
                          f"{config.corpus!r}")
    names = {"train": (config.train_source, config.train_target),
             "dev": (config.dev_source, config.dev_target),
             "test": (config.test_source, config.test_target)}
    if not train:
        del names["train"]
    splits = {}
    for split, (text, label) in names.items():
        if not text:
            if split == "test":
                continue
            raise ConfigError(f"task classification needs data.{split}_source")
        if config.corpus == "tsv":
            splits[split] = load_labeled_tsv(resolve(config, text), config.labels)
        else:
            if not label:
                raise ConfigError(f"data.corpus parallel for task classification needs "
                                  f"data.{split}_target (the label file of {text})")
            splits[split] = load_labeled_lines(resolve(config, text), resolve(config, label),
                                               config.labels)
    if config.lowercase:
        for split in splits.values():
            split.texts = [t.lower() for t in split.texts]
    return splits


@dataclass
class Summaries:
    articles: list[str]
    summaries: list[str]
    skipped_empty: int = 0  # rows whose article or summary is empty (or blank lines)

    def __len__(self) -> int:
        return len(self.articles)


def load_summaries(path: str | Path) -> Summaries:
    """Articles and summaries of a TSV file (gzip-compressed if its name ends in .gz).

    The first line is a header naming the columns; `article` and `summary` are required, in
    any order (VNDS: article, summary, title). Lines follow keras_transformer.text.lines.
    - invalid UTF-8, a NUL byte, or a row with another number of columns than the header
      (a tab or a newline inside a field shifts every later column): a ValueError naming
      the file and line, since the file is broken and no row after it can be trusted;
    - a blank line or a row whose article or summary is empty: skipped, counted in
      `skipped_empty` and logged with its line number, since it holds nothing to learn
      or score and leaves the other rows intact.
    """
    path = check_input_file(path)
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise ValueError(f"{path} is not a readable gzip file ({err})") from err
    lines = decode_lines(raw, str(path))
    if not lines:
        raise ValueError(f"{path} is empty; expected a header line article<TAB>summary...")
    header = lines[0].split("\t")
    if "article" not in header or "summary" not in header:
        raise ValueError(f"{path} line 1: the header {lines[0][:80]!r} must name the columns "
                         f"article and summary (tab-separated)")
    columns, a, s = len(header), header.index("article"), header.index("summary")
    articles, summaries, skipped = [], [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            skipped.append(number)
            continue
        fields = line.split("\t")
        if len(fields) != columns:
            raise ValueError(f"{path} line {number} has {len(fields)} tab-separated columns, "
                             f"the header {columns} ({', '.join(header)})")
        article, summary = fields[a].strip(), fields[s].strip()
        if not article or not summary:
            skipped.append(number)
            continue
        articles.append(article)
        summaries.append(summary)
    if skipped:
        log.warning("%s: %d rows with an empty article or summary skipped (lines %s%s)", path,
                    len(skipped), ", ".join(map(str, skipped[:10])),
                    ", ..." if len(skipped) > 10 else "")
    if not articles:
        raise ValueError(f"{path} holds no article with a summary")
    return Summaries(articles, summaries, len(skipped))


def load_summarization(config: DataConfig, task: str = "summarization", train: bool = True
                       ) -> dict[str, Summaries]:
    """{"train", "dev"[, "test"]}: the files data.train_source, dev_source[, test_source]
    (load_summaries: VNDS's article/summary TSV files), with VNDS's word joints kept or split
    by data.word_joints; `task` names the task in errors. Without `train` (a streamed
    training split) only dev and test."""
    if config.corpus != "tsv":
        raise ConfigError(f"task {task} reads data.corpus tsv, got {config.corpus!r}")
    names = {"train": config.train_source, "dev": config.dev_source,
             "test": config.test_source}
    if not train:
        del names["train"]
    splits = {}
    for split, name in names.items():
        if not name:
            if split == "test":
                continue
            raise ConfigError(f"task {task} needs data.{split}_source (a TSV file with an "
                              f"article and a summary column)")
        loaded = load_summaries(resolve(config, name))
        splits[split] = Summaries([word_joints(t, config.word_joints) for t in loaded.articles],
                                  [word_joints(t, config.word_joints) for t in loaded.summaries],
                                  loaded.skipped_empty)
    return splits


def word_joints(text: str, mode: str) -> str:
    """VNDS text with its word joints kept ("keep") or split into plain syllables ("split":
    every "_" becomes a space)."""
    if mode == "keep":
        return text
    if mode == "split":
        return text.replace("_", " ")
    raise ConfigError(f"data.word_joints must be one of {WORD_JOINTS}, got {mode!r}")
