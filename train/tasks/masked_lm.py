"""Masked language modelling (BERT's pre-training): unlabelled text from training splits, an
encoder-only `TransformerMaskedLM` trained to restore hidden pieces, dev perplexity and
accuracy over the masked pieces. Its run is what the classifier and the extractive
summarizer fine-tune from (`training.init_from`, `train.warm_start`)."""

from __future__ import annotations

import gzip
import logging
import math
from pathlib import Path

import keras
import numpy as np

from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.models.masked_lm import TransformerMaskedLM
from keras_transformer.text.buckets import encode_in_chunks
from keras_transformer.text.lines import read_lines
from keras_transformer.text.masking import (
    MASK_PIECE,
    check_max_predictions,
    check_rate,
    default_max_predictions,
    word_start_table,
)
from keras_transformer.text.pipeline import make_masked_lm_dataset
from keras_transformer.text.sentence_pairs import SEP_PIECE, sentence_pairs
from keras_transformer.text.sentences import split_sentences

from ..batches import replayable
from ..config import ConfigError
from ..data import load_summaries, matching_files, resolve, word_joints
from ..losses import token_loss
from ..record_stream import rows_dataset, text_documents
from ..tasks.base import DevScore, Task, part_share, transformer_config
from ..tokenizers import train_tokenizer
from .language_model import summed_nll

log = logging.getLogger("train")

# Path parts and file-name starts that name a dev or test split in the corpora this project
# reads (uit_vsfc/dev/, sst2/dev.tsv, vietnews/test.tsv.gz, iwslt15 tst2012.en, ...).
HELD_OUT_PARTS = ("dev", "test", "tst", "valid", "validation")
# The dev batches are masked once, the same way at every epoch, by this seed.
DEV_MASK_SEED = 12345


def check_training_text(path: Path) -> None:
    """Refuse a file that is a dev or test split: pre-training on it would leak the text the
    fine-tunes are tuned and scored on."""
    names = [part.lower() for part in path.parts[-3:]]
    held_out = [n for n in names[:-1] if n in HELD_OUT_PARTS]
    stem = names[-1].split(".")[0]
    if held_out or any(stem.startswith(p) for p in HELD_OUT_PARTS):
        raise ConfigError(f"data.texts: {path} is a dev or test split; pre-train on training "
                          f"splits only (the fine-tunes are tuned and scored on the others)")


def read_texts(path: Path, joints: str, lowercase: bool) -> list[str]:
    """The texts of one file, its documents' sentences in order (read_documents)."""
    return [text for document in read_documents(path, joints, lowercase) for text in document]


def read_documents(path: Path, joints: str, lowercase: bool) -> list[list[str]]:
    """The documents of one file, each a list of its texts in order, by the file's kind:
    - TSV (.tsv, .tsv.gz) whose header names an `article` column (VNDS): each article's
      sentences, then each summary as a document of its own;
    - TSV whose header names a `sentence` column (SST-2): each sentence a document;
    - any other file: one text per line (a line with tabs gives its first field: Tatoeba's
      English side); in a file with blank lines a blank line ends a document (BERT's
      pre-training text), in one without each line is a document (separate sentences, as
      UIT-VSFC's).
    Empty texts are dropped. A TSV file with neither column is refused, naming the file."""
    if path.name.endswith((".tsv", ".tsv.gz")):
        header = first_line(path).split("\t")
        if "article" in header:
            loaded = load_summaries(path)
            documents = [split_sentences(article) for article in loaded.articles]
            documents += [[summary] for summary in loaded.summaries]
        elif "sentence" in header and not path.name.endswith(".gz"):
            column = header.index("sentence")
            rows = [line.split("\t") for line in read_lines(path, what="text file")[1:]]
            documents = [[row[column].strip()] for row in rows if len(row) > column]
        else:
            raise ConfigError(f"data.texts: {path} is a TSV file whose header names neither an "
                              f"article column (VNDS) nor a sentence column (SST-2); give one "
                              f"text per line in a .txt file")
    else:
        texts = [line.split("\t")[0].strip() for line in read_lines(path, what="text file")]
        filled = [i for i, text in enumerate(texts) if text]
        if filled and not all(texts[filled[0]: filled[-1] + 1]):  # a blank line inside
            documents = [[]]
            for text in texts:
                if text:
                    documents[-1].append(text)
                elif documents[-1]:
                    documents.append([])
        else:
            documents = [[text] for text in texts if text]
    documents = [[word_joints(t, joints) for t in document if t] for document in documents]
    if lowercase:
        documents = [[t.lower() for t in document] for document in documents]
    return [document for document in documents if document]


def first_line(path: Path) -> str:
    """The header line of a TSV file, gzip-compressed or not."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
            return handle.readline().rstrip("\n")
    except (OSError, EOFError) as err:
        raise ValueError(f"{path} is not readable ({err})") from None


def read_text_splits(config, task: str) -> dict[str, list[str]]:
    """The training and dev texts of a text-corpus task (data.texts, data.dev_texts), a dev/test
    split among the training files refused; dev cut to eval.dev_score_sentences."""
    return split_texts(read_document_splits(config, task), config)


def streamed_text(task):
    """A text task's streamed training records (data.stream): the files of data.texts (each a
    file or a glob; a dev or test split refused) scanned by `task.scan_stream` as
    record_stream.text_documents; returns the sample's documents."""
    d = task.config.data
    files = [path for name in d.texts for path in matching_files(name, d, "data.texts")]
    for path in files:
        check_training_text(path)
    sample = task.scan_stream(files, text_documents(d.word_joints, d.lowercase))
    return [document for record in sample for document in record]


def record_texts(records) -> list[str]:
    """The texts of a chunk of text_documents' records, in order."""
    return [text for record in records for document in record for text in document]


def split_texts(documents: dict[str, list[list[str]]], config) -> dict[str, list[str]]:
    """Each split's documents as one list of texts, dev cut to eval.dev_score_sentences."""
    texts = {split: [t for document in docs for t in document]
             for split, docs in documents.items()}
    if config.eval.dev_score_sentences:
        texts["dev"] = texts["dev"][: config.eval.dev_score_sentences]
    return texts


def read_document_splits(config, task: str, splits=("train", "dev")
                         ) -> dict[str, list[list[str]]]:
    """The training and dev documents (read_documents) of data.texts and data.dev_texts (of
    `splits` only), a dev/test split among the training files refused."""
    d = config.data
    documents = {split: [] for split in splits}
    for split, names in (("train", d.texts), ("dev", d.dev_texts)):
        if split not in splits:
            continue
        for name in names:
            path = resolve(d, name)
            if split == "train":
                check_training_text(path)
            read = read_documents(path, d.word_joints, d.lowercase)
            log.info("%s %s text: %s, %d sentences in %d documents", task, split, path,
                     sum(map(len, read)), len(read))
            documents[split] += read
    return documents


class MaskedLMTask(Task):
    """data.texts (training text files) and data.dev_texts: one row per sentence (its first
    max_source_length - 1 pieces + EOS), masked by keras_transformer.text.masking
    (data.mask_rate, data.whole_word_masking, at most data.max_predictions pieces a row).
    model.fit's batches list the masked positions, and the model's head predicts there only;
    the dev scores call the model on ids alone, as its export does, on the same masks. Loss:
    cross-entropy over the masked pieces (training.label_smoothing 0 makes the dev loss ln of
    the masked perplexity). The dev perplexity over masked pieces picks best.keras.

    With data.next_sentence a row is a sentence pair, A [SEP] B EOS (text/sentence_pairs.py:
    B follows A in its document, or is drawn from another, drawn once by the run's seed, the
    dev pairs by DEV_MASK_SEED), and the model's next-sentence head adds its cross-entropy to
    the loss; its dev accuracy is reported beside the masked scores."""

    reads_lowercase = True

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        d = config.data
        if d.max_predictions:
            try:
                check_max_predictions(d.max_predictions, d.mask_rate, d.max_source_length)
            except ValueError as err:
                raise ConfigError(f"data.max_predictions: {err}") from None

    @staticmethod
    def max_predictions(d) -> int:
        """data.max_predictions, or the default cap of a row of data.max_source_length."""
        return d.max_predictions or default_max_predictions(d.mask_rate, d.max_source_length)

    def prepare(self, out: Path):
        config, d = self.config, self.config.data
        check_rate(d.mask_rate)
        if d.corpus != "text":
            raise ConfigError(f"task masked_lm reads data.corpus text (files in data.texts and "
                              f"data.dev_texts), got {d.corpus!r}")
        if not d.texts or not d.dev_texts:
            raise ConfigError("task masked_lm needs data.texts (training text files) and "
                              "data.dev_texts (dev text files)")
        if d.stream:  # training text read as training consumes it; the sample trains the tokenizer
            documents = {"train": streamed_text(self),
                         **read_document_splits(config, "masked_lm", ("dev",))}
        else:
            documents = read_document_splits(config, "masked_lm")
        texts = split_texts(documents, config)
        symbols = (MASK_PIECE, SEP_PIECE) if d.next_sentence else (MASK_PIECE,)
        self.tok = train_tokenizer(config, texts["train"], out / "spm", symbols=symbols)
        for piece in symbols:
            if self.tok.piece_id(piece) is None:
                raise ConfigError(f"the tokenizer has no {piece} piece; a masked_lm run trains "
                                  f"its own tokenizer, or starts from another masked_lm run's "
                                  f"with the same data.next_sentence")
        self.mask_id = self.tok.piece_id(MASK_PIECE)
        self.sep_id = self.tok.piece_id(SEP_PIECE)
        self.follows = {"train": None, "dev": None}
        if d.next_sentence:
            self.rows = {}
            for split, seed in (("train", config.training.seed), ("dev", DEV_MASK_SEED)):
                try:
                    self.rows[split], self.follows[split] = self.pair_rows(documents[split],
                                                                           seed)
                except ValueError as err:
                    raise ConfigError(f"data.next_sentence: the {split} text: {err}") from None
            if config.eval.dev_score_sentences:
                cut = config.eval.dev_score_sentences
                self.rows["dev"], self.follows["dev"] = (self.rows["dev"][:cut],
                                                         self.follows["dev"][:cut])
        else:
            self.rows = {split: self.text_rows(t) for split, t in texts.items()}
        for split, rows in self.rows.items():
            if not rows:
                raise ValueError(f"the {split} text holds no piece to mask (every line is "
                                 f"empty or special); give text files with sentences")
        if d.stream:  # the sample's rows were for the check: a stream's are made as it is read
            del self.rows["train"]
        self.counts = {"sentences": {k: len(v) for k, v in self.rows.items()},
                       "pieces": {k: int(sum(map(len, v))) for k, v in self.rows.items()}}
        log.info("rows: %s", ", ".join(f"{n} {k}" for k, n in self.counts["sentences"].items()))
        return transformer_config(config, self.tok, self.tok,
                                  max_source_length=d.max_source_length,
                                  max_target_length=d.max_source_length)

    def pair_rows(self, documents: list[list[str]], seed: int
                  ) -> tuple[list[list[int]], list[int]]:
        """The documents' sentence pairs (text/sentence_pairs.py) in rows of at most
        data.max_source_length ids, and their next-sentence labels."""
        flat = list(encode_in_chunks(self.tok, [t for doc in documents for t in doc]))
        ends = np.cumsum([len(doc) for doc in documents])
        encoded = [flat[end - len(doc): end] for doc, end in zip(documents, ends, strict=True)]
        return sentence_pairs(encoded, max_length=self.config.data.max_source_length,
                              sep_id=self.sep_id, eos_id=self.tok.eos_id, seed=seed)

    def text_rows(self, texts: list[str]) -> list[list[int]]:
        """Each text's first max_source_length - 1 pieces + EOS; texts with no piece left out."""
        limit, eos = self.config.data.max_source_length - 1, self.tok.eos_id
        return [ids[:limit] + [eos] for ids in encode_in_chunks(self.tok, texts) if ids]

    def dataset(self, split: str, *, seed: int, shuffle: bool, repeat: bool = False,
                positions: bool = True, count: int | None = None, part=(1, 0)):
        """Masked batches of a split's rows (its first `count`; None: all): ((inputs,
        positions), labels) for model.fit, or with positions=False (inputs, targets) at every
        position, masked alike; with data.next_sentence the labels (targets) paired with the
        rows' next-sentence labels."""
        d = self.config.data
        tok = self.tok
        special = (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id)
        masking = dict(rate=d.mask_rate, mask_id=self.mask_id, vocab_size=tok.vocab_size,
                       special_ids=special + ((self.sep_id,) if d.next_sentence else ()),
                       seed=seed, max_predictions=self.max_predictions(d))
        starts = word_start_table(tok.pieces) if d.whole_word_masking else None
        follows = self.follows[split]
        rows = self.rows[split][:count] if self.stream is None or split != "train" else \
            self.streamed_rows_dataset(part)
        return make_masked_lm_dataset(
            rows, max_length=d.max_source_length,
            tokens_per_batch=part_share(d.tokens_per_batch, part), pad_id=tok.pad_id,
            masking=masking,
            num_buckets=d.num_buckets, word_starts=starts, shuffle=shuffle,
            seed=self.config.training.seed, repeat=repeat, positions=positions,
            next_sentence=None if follows is None else follows[:count])

    def streamed_rows_dataset(self, part):
        """Input pipeline part[1] of part[0]'s training rows read from the shards
        (data.stream), a tf.data stream."""
        import tensorflow as tf

        def convert(records):
            return self.text_rows(record_texts(records))

        return rows_dataset(self.streamed_rows(convert, part), tf.TensorSpec([None], tf.int32))

    def datasets(self):
        repeat = self.config.training.steps_per_epoch > 0
        seed = self.config.training.seed

        def make_train(part=(1, 0)):  # a streamed run's pipeline reads its part alone
            return replayable(lambda: self.dataset("train", seed=seed, shuffle=True,
                                                   repeat=repeat, part=part), repeat)

        return make_train, lambda: self.dataset("dev", seed=DEV_MASK_SEED, shuffle=False)

    def build_model(self, model_config):
        model = TransformerMaskedLM(model_config, next_sentence=self.config.data.next_sentence)
        model.build()
        return model

    def loss_and_metrics(self, model, replicas: int):
        pad = model.config.pad_id
        loss = token_loss(self.config.training.label_smoothing, pad, replicas)
        accuracy = MaskedAccuracy(pad, name="masked_accuracy")
        if not self.config.data.next_sentence:
            return loss, [accuracy]
        # BERT's sum of the two losses.
        return ([loss, keras.losses.SparseCategoricalCrossentropy(from_logits=True)],
                [[accuracy],
                 [keras.metrics.SparseCategoricalAccuracy(name="next_sentence_accuracy")]])

    def describe(self, model) -> str:
        d = self.config.data
        return (f", mask rate {d.mask_rate}{', whole words' if d.whole_word_masking else ''}"
                f"{', sentence pairs and next-sentence prediction' if d.next_sentence else ''}, "
                f"at most {self.max_predictions(d)} masked pieces a row, "
                f"{d.tokens_per_batch} tokens a batch")

    def scores(self, model, count: int | None = None) -> dict:
        """Perplexity and accuracy over the masked pieces of the dev split's first `count`
        rows (None: all; masked by DEV_MASK_SEED, the same pieces at every call), from the
        logits at every position: the model as it is exported."""
        pad = model.config.pad_id
        data = self.dataset("dev", seed=DEV_MASK_SEED, shuffle=False, positions=False,
                            count=count)
        pairs = self.config.data.next_sentence
        pieces = data.map(lambda inputs, targets: (inputs, targets[0])) if pairs else data
        nll, count = summed_nll(model, pieces, pad)
        metric = MaskedAccuracy(pad)
        right = total = 0
        for inputs, targets in data:
            if pairs:
                targets, follows = targets
                guess = np.argmax(np.asarray(model.next_sentence_logits(inputs)), axis=-1)
                right += int(np.sum(guess == np.asarray(follows)))
                total += len(guess)
            metric.update_state(targets, model(inputs, training=False))
        scores = {"masked_perplexity": math.exp(nll / max(count, 1)),
                  "masked_accuracy": round(100 * float(metric.result()), 2),
                  "masked_pieces": count}
        if pairs:
            scores["next_sentence_accuracy"] = round(100 * right / max(total, 1), 2)
        return scores

    def dev_score(self):
        def score(model):
            s = self.scores(model)
            return {"neg_masked_perplexity": -s["masked_perplexity"],
                    "masked_perplexity": s["masked_perplexity"],
                    "masked_accuracy_percent": s["masked_accuracy"],
                    **({"next_sentence_accuracy_percent": s["next_sentence_accuracy"]}
                       if "next_sentence_accuracy" in s else {})}

        return DevScore(score, {"dev_sentences": len(self.rows["dev"])},
                        name="neg_masked_perplexity", label="-masked perplexity")

    def data_metrics(self):
        return {**self.counts, **super().data_metrics()}

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        # The dev rows of the per-epoch score, their first eval.max_sentences when set.
        count = len(self.rows["dev"][: self.config.eval.max_sentences or None])
        s = self.scores(model, count)
        metrics.update({"scored_split": "dev", "dev_masked_perplexity": s["masked_perplexity"],
                        "dev_masked_accuracy": s["masked_accuracy"],
                        "dev_masked_pieces": s["masked_pieces"], "dev_scored_rows": count})
        pairs = ""
        if "next_sentence_accuracy" in s:
            metrics["dev_next_sentence_accuracy"] = s["next_sentence_accuracy"]
            pairs = f", next-sentence accuracy {s['next_sentence_accuracy']:.2f}%"
        print(f"dev: masked perplexity {s['masked_perplexity']:.2f}, masked-piece accuracy "
              f"{s['masked_accuracy']:.2f}% ({s['masked_pieces']} masked pieces of {count} "
              f"rows){pairs}")
        self.show_fills(model)

    def show_fills(self, model, count: int = 3) -> None:
        """A few dev sentences with one piece in five hidden, and the model's fills."""
        rows = self.rows["dev"][:count]
        for row in rows:
            ids = np.array([row], np.int32)
            hidden = ids.copy()
            hidden[0, : len(row) - 1: 5] = self.mask_id
            best = np.argmax(np.asarray(model(hidden, training=False)), axis=-1)
            filled = np.where(hidden == self.mask_id, best, ids)
            print(f"  IN   {self.tok.decode(hidden)[0]}\n  OUT  {self.tok.decode(filled)[0]}")
