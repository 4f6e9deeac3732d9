"""Run configuration: a YAML file of sections, each a dataclass, checked for unknown keys and types."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from keras_transformer.decoding.settings import BOUNDS as SEARCH_BOUNDS
from keras_transformer.decoding.settings import SEQ2SEQ_KEYS
from keras_transformer.file_safety import atomic_write_text, check_input_file
from keras_transformer.text.bottom_up import SOURCES as SELECTOR_SOURCES


@dataclass
class DataConfig:
    corpus: str = "demo"  # demo | parallel | tsv | text (tasks masked_lm, denoising: data.texts)
    data_dir: str = ""  # base for relative paths; else $KT_DATA_DIR, else ../shared/data
    train_source: str = ""
    train_target: str = ""
    dev_source: str = ""
    dev_target: str = ""
    test_source: str = ""
    test_target: str = ""
    tsv: str = ""
    # tsv corpora with several translations of one source: keep each source's pairs in one
    # split, so that dev/test never score a sentence the model was trained on.
    group_by_source: bool = False
    dev_size: int = 1000
    test_size: int = 1000
    train_size: int = 60000
    seed: int = 1234
    max_source_length: int = 64
    max_target_length: int = 64  # task language_model: the context, in tokens
    # tasks summarization, language_model: VNDS joins a word's syllables with "_"; keep them,
    # or split them (each "_" becomes a space) before tokenizing, in training text, outputs
    # and references.
    word_joints: str = "keep"  # keep | split
    tokens_per_batch: int = 4096
    num_buckets: int = 4
    # read the training split as training consumes it, shuffled in a buffer of shuffle_buffer
    # rows: data.train_source (or, for masked_lm and denoising, each of data.texts) a file or
    # a glob of shards, gzip or not (train.shards for translation, train.record_stream for
    # the other tasks); false: read every split into memory.
    stream: bool = False
    shuffle_buffer: int = 10000
    # task classification: the class names in id order (class i is labels[i]); label files
    # may then hold the names or the ids. Empty: integer ids, named by their digits.
    labels: list[str] = field(default_factory=list)
    # task extractive_summarization: the article's first K sentences are read (each its first
    # max_source_length - 1 pieces + EOS); a summary is picked among them.
    article_sentences: int = 16
    # task summarization with eval.selector_source extract: train the copy model on what it
    # will read (extract then abstract): each article's source is the greedy oracle's
    # sentences (among the selector's article_sentences) for a share oracle_share of the
    # training articles, the selector's own picks by eval's rule for the rest and for dev.
    extract_sources: bool = False
    oracle_share: float = 0.5
    # tasks masked_lm, denoising: the unlabelled text, files of training splits only (a dev or
    # test split is refused): VNDS-style TSV (.tsv, .tsv.gz: articles' sentences and summaries)
    # or one text per line; dev_texts score the perplexity. masked_lm: one row per sentence;
    # denoising: consecutive sentences packed into rows of max_source_length.
    texts: list[str] = field(default_factory=list)
    dev_texts: list[str] = field(default_factory=list)
    # tasks masked_lm, denoising, classification, extractive_summarization, content_selection:
    # the model reads lower-cased text (a pre-training for lower-cased fine-tunes, and their
    # fine-tunes; an extractor's summaries keep the article's case)
    lowercase: bool = False
    mask_rate: float = 0.15  # task masked_lm: the share of pieces hidden (BERT: 15%)
    whole_word_masking: bool = False  # task masked_lm: hide every piece of a chosen word
    # task masked_lm: rows of two segments, A [SEP] B, and BERT's next-sentence prediction
    # (B follows A in its document, or is drawn from another: keras_transformer.text.
    # sentence_pairs) beside the masked pieces
    next_sentence: bool = False
    # task masked_lm: at most this many masked pieces a row (BERT's max_predictions_per_seq),
    # the slots the training head predicts in; 0: mask_rate * max_source_length plus three
    # standard deviations of the count (keras_transformer.text.masking).
    max_predictions: int = 0
    # task denoising (keras_transformer.text.noising): the share of pieces hidden, in spans of
    # Poisson(span_lambda) lengths. noise "infilling" (BART): each span one [MASK], the target
    # the whole text, and with permute_sentences a row's sentences are shuffled first;
    # "span_corruption" (T5): span k is sentinel k, the target the spans (T5 hid 15%).
    noise: str = "infilling"
    noise_rate: float = 0.3
    span_lambda: float = 3.0
    permute_sentences: bool = False


@dataclass
class TokenizerConfig:
    vocab_size: int = 2000
    joint: bool = True
    model_type: str = "unigram"
    # A SentencePiece .model to use instead of training one (copied into the run as
    # spm.model); "": train one on the training text, or on a seeded sample of this many
    # training sentences (0: all of them).
    model: str = ""
    sample_sentences: int = 0


@dataclass
class ModelConfig:
    preset: str = "tiny"
    overrides: dict[str, Any] = field(default_factory=dict)
    num_classes: int = 0  # task classification: 0 = one more than the largest training label
    pooling: str = "mean"  # task classification: mean | first
    sentence_layers: int = 2  # task extractive_summarization: inter-sentence encoder layers


@dataclass
class TrainingConfig:
    epochs: int = 10
    steps_per_epoch: int = 0  # 0: one pass over the data
    # Batches per optimizer update: their gradients are averaged into one (train.accumulation).
    accumulate_steps: int = 1
    warmup_steps: int = 4000
    # > 0: a run planned for fewer steps than warmup_steps / warmup_fraction (a short run)
    # ends its warm-up at this fraction of the plan, at the highest rate its plan reached
    # before, and decays after it (train.warmup); 0: warmup_steps, however short the run.
    warmup_fraction: float = 0.0
    lr_scale: float = 1.0
    label_smoothing: float = 0.1
    beta_1: float = 0.9
    beta_2: float = 0.98
    epsilon: float = 1e-9
    jit_compile: bool | str = "auto"  # true | false | auto (on for GPU/TPU, off on CPU)
    precision: str = "float32"  # float32 | mixed_float16 | mixed_bfloat16 | auto (for this machine)
    strategy: str = "auto"  # auto | default | mirrored | multiworker
    seed: int = 0
    verbose: int = 1
    save_every_steps: int = 100  # backup for resuming; a kill loses at most this many steps
    keep_checkpoints: int = 5  # per-epoch weights kept for python -m train.average
    # The final model is the mean of the last N epoch checkpoints (the paper's section 6.1);
    # 0 or 1: the weights after the last step. At most keep_checkpoints.
    average_last: int = 0
    # Which weights are model.keras, the ones metrics.json scores: last (after the last step),
    # average (the mean of average_last checkpoints), best (best.keras, by the per-epoch dev
    # score: a time budget that buys more steps on a faster CPU cannot then lose quality
    # past the dev peak); auto: average when average_last is 2 or more, else last.
    final_model: str = "auto"
    early_stopping_patience: int = 0  # epochs without a better dev BLEU; 0: never stop early
    max_minutes: float = 0.0  # wall-clock budget for model.fit, kept across resumes; 0: none
    tensorboard: bool = True
    # Start from another run's weights and tokenizer (train.warm_start): its directory, a
    # model file in it or one of its checkpoints/epoch_NNNN.npz; "": from a fresh model.
    init_from: str = ""
    # The learning-rate schedule's first step (a fine-tune continues): a number, or
    # "continue": the step the weights of init_from were saved at (train.warm_start).
    initial_step: int | str = 0
    # Also take the optimizer's state saved with init_from's .keras file (Adam's moments), for
    # a run that continues the same model: a fresh Adam's first steps undo part of the old
    # run's work. Needs initial_step, whose count Adam's bias correction reads.
    init_optimizer: bool = False
    # task classification: each sentence's loss times its class's weight, as model.fit's
    # class_weight. "": none; "balanced": n / (classes x the class's count in the training
    # split), as scikit-learn's; or a mapping {label name or id: weight}, others 1.
    class_weight: str | dict[str, float] = ""


@dataclass
class EvalConfig:
    beam_size: int = 4
    alpha: float = 0.6
    batch_size: int = 128
    # The final dev and test scores read each split's first this many sentences (translation,
    # classification), articles (summarization, extractive_summarization, content_selection,
    # language_model) or rows (masked_lm, denoising: of the dev rows the per-epoch score
    # reads); 0: the whole split.
    max_sentences: int = 0
    samples: int = 5
    # The dev score after every epoch (BLEU, ROUGE, macro-F1 or perplexity, by the task), which
    # picks the best checkpoint: on this many dev examples (0: off), searched at this beam.
    dev_score_sentences: int = 200
    dev_score_beam: int = 1
    # Search constraints (keras_transformer.decoding); 0: off. Used by task summarization.
    no_repeat_ngram_size: int = 0
    min_length: int = 0
    # task extractive_summarization: the summary is the k best sentences (summary_sentences)
    # or the best up to a length budget (summary_syllables); both 0: the one of
    # keras_transformer.text.extractive.candidate_selections that scores best on dev, with
    # trigram blocking on or off as trigram_blocking says (auto: also chosen on dev).
    summary_sentences: int = 0
    summary_syllables: int = 0
    trigram_blocking: bool | str = "auto"
    # task summarization with copy attention: bottom-up selection (text/bottom_up.py). The
    # copy model reads only the sentences to which the extractive_summarization run `selector`
    # gives a probability >= selector_epsilon (an article with none: read whole), or its
    # selector_top_k best sentences when > 0; "": none. selector_source: "mask" (the article
    # with the other sentences masked) or "extract" (the kept sentences alone).
    selector: str = ""
    selector_epsilon: float = 0.5
    selector_top_k: int = 0
    selector_source: str = "mask"
    # task classification: add to the head's bias the per-class offsets that maximise the dev
    # macro-F1, when they also raise it on dev sentences they were not chosen on
    # (train/class_bias.py).
    tune_class_bias: bool = False


@dataclass
class RunConfig:
    task: str = "translation"
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Where relative data paths are read from when neither data.data_dir nor $KT_DATA_DIR says.
DEFAULT_DATA_DIR = Path("..") / "shared" / "data"


def data_dir(config: DataConfig) -> Path:
    """The folder relative data paths are read from: config, then $KT_DATA_DIR, then ../shared/data."""
    return Path(config.data_dir or os.environ.get("KT_DATA_DIR") or DEFAULT_DATA_DIR)


class ConfigError(ValueError):
    """A config key or value that does not fit the schema; the message says which."""


_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _check_type(where: str, value: Any, annotation: Any) -> Any:
    hint = typing.get_origin(annotation) or annotation
    if hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return value
    if hint is list:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where} must be a list of non-empty strings, got {value!r}")
        return value
    if isinstance(annotation, types.UnionType) and set(annotation.__args__) == {bool, str}:
        if not isinstance(value, bool) and value != "auto":
            raise ConfigError(f"{where} must be true or false or auto, got {value!r}")
        return value
    if isinstance(annotation, types.UnionType) and set(annotation.__args__) == {int, str}:
        if value != "continue" and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{where} must be an integer or continue, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    return value


def _build(cls, values: dict[str, Any], where: str):
    if not isinstance(values, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {values!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(map(str, set(values) - known))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in {where or 'config'}; known: {sorted(known)}")
    kwargs = {}
    for name, value in values.items():
        key = f"{where}.{name}" if where else name
        if dataclasses.is_dataclass(hints[name]):
            kwargs[name] = _build(hints[name], value, key)
        else:
            kwargs[name] = _check_type(key, value, hints[name])
    return cls(**kwargs)


def _apply_override(values: dict[str, Any], assignment: str) -> None:
    if "=" not in assignment:
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    node = values
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {part} is not a section")
    node[parts[-1]] = _parse_yaml(raw, f"--set {key}")


def _parse_yaml(text: str, source: str) -> Any:
    """yaml.safe_load, with a YAML syntax error as a ConfigError naming `source` and the line."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ConfigError(f"{source}{where}: invalid YAML ({problem})") from None


# Keys that were renamed -> their names now. Older runs' configs hold the old names, which
# are still read, with a note printed once per process.
RENAMED = {"eval.dev_bleu_sentences": "eval.dev_score_sentences",
           "eval.dev_bleu_beam": "eval.dev_score_beam"}
_renames_noted: set[str] = set()


def _rename_old_keys(values: dict[str, Any]) -> None:
    for old, new in RENAMED.items():
        section, old_name = old.split(".")
        new_name = new.split(".")[1]
        node = values.get(section)
        if not isinstance(node, dict) or old_name not in node:
            continue
        if new_name in node:
            raise ConfigError(f"{old} is the old name of {new}; keep only {new}")
        node[new_name] = node.pop(old_name)
        if old not in _renames_noted:
            _renames_noted.add(old)
            print(f"note: {old} is now named {new} (it governs every task's dev score); "
                  f"the old name is still read", file=sys.stderr)


def load_config(path: str | Path | None, overrides: list[str] = ()) -> RunConfig:
    """YAML file + `key.sub=value` overrides -> RunConfig (ConfigError on anything unknown)."""
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        check_input_file(path, "config file")
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            raise ConfigError(f"{path} is not UTF-8 text (byte {err.start + 1})") from None
        values = _parse_yaml(text, str(path))
        if values is None:  # an empty file would train every default, not what was meant
            raise ConfigError(f"{path} is empty (or only comments): a config names at least "
                              f"its task and data")
        if not isinstance(values, dict):
            raise ConfigError(f"{path} must hold a YAML mapping of sections, got "
                              f"{type(values).__name__}")
    for assignment in overrides:
        _apply_override(values, assignment)
    _rename_old_keys(values)
    config = _build(RunConfig, values, "")
    _check_ranges(config)
    _check_model(config)
    _check_final_model(config)
    if config.training.warmup_fraction and config.training.initial_step:
        raise ConfigError("training.warmup_fraction shortens a fresh run's warm-up; a run "
                          "that continues another's schedule (training.initial_step) keeps "
                          "training.warmup_steps: set training.warmup_fraction=0 with "
                          "training.initial_step")
    if config.training.init_optimizer and not (config.training.init_from
                                               and config.training.initial_step):
        raise ConfigError("training.init_optimizer continues the optimizer of the run "
                          "training.init_from names, at that run's step: set "
                          "training.init_from and training.initial_step: continue")
    if config.training.average_last > max(config.training.keep_checkpoints, 1):
        raise ConfigError(f"training.average_last ({config.training.average_last}) must be at "
                          f"most training.keep_checkpoints ({config.training.keep_checkpoints}), "
                          f"the epoch checkpoints it averages")
    _check_given_tokenizer(config)
    _check_stream(config)
    _check_class_weight(config)
    if config.data.word_joints not in WORD_JOINTS:
        raise ConfigError(f"data.word_joints must be one of {WORD_JOINTS}, got "
                          f"{config.data.word_joints!r}")
    if config.eval.selector_source not in SELECTOR_SOURCES:
        raise ConfigError(f"eval.selector_source must be one of {SELECTOR_SOURCES}, got "
                          f"{config.eval.selector_source!r}")
    return config


WORD_JOINTS = ("keep", "split")
FINAL_MODELS = ("auto", "last", "average", "best")


def _check_final_model(config: RunConfig) -> None:
    t = config.training
    if t.final_model not in FINAL_MODELS:
        raise ConfigError(f"training.final_model must be one of {FINAL_MODELS}, got "
                          f"{t.final_model!r}")
    # average_last is what averages: with another explicit choice it would silently not.
    if t.final_model == "average" and t.average_last < 2:
        raise ConfigError(f"training.final_model: average needs training.average_last of 2 "
                          f"or more (the checkpoints to average), got {t.average_last}")
    if t.final_model in ("last", "best") and t.average_last >= 2:
        raise ConfigError(f"training.average_last ({t.average_last}) makes the final model a "
                          f"mean, training.final_model says {t.final_model}; set one")
    if t.final_model == "best" and not config.eval.dev_score_sentences:
        raise ConfigError("training.final_model: best needs the per-epoch dev score "
                          "(eval.dev_score_sentences > 0), which picks the best weights")

# (section.key, lowest, highest or None, whether the lowest is excluded): checked when the
# config is loaded, so that a bad value fails before the corpus is read and training starts,
# not in the evaluation after it.
_RANGES = [
    ("data.train_size", 1, None, False), ("data.dev_size", 1, None, False),
    ("data.test_size", 0, None, False), ("data.max_source_length", 2, 4096, False),
    ("data.max_target_length", 2, 4096, False), ("data.tokens_per_batch", 1, None, False),
    ("data.num_buckets", 1, None, False), ("data.shuffle_buffer", 1, None, False),
    ("tokenizer.vocab_size", 8, 1_000_000, False),
    ("tokenizer.sample_sentences", 0, None, False),
    ("training.epochs", 1, None, False), ("training.steps_per_epoch", 0, None, False),
    ("training.accumulate_steps", 1, None, False),
    ("training.warmup_steps", 1, None, False), ("training.warmup_fraction", 0, 1, False),
    ("training.lr_scale", 0, None, True),
    ("training.label_smoothing", 0, 1, False), ("training.beta_1", 0, 1, False),
    ("training.beta_2", 0, 1, False), ("training.epsilon", 0, None, True),
    ("training.save_every_steps", 0, None, False), ("training.keep_checkpoints", 0, None, False),
    ("training.average_last", 0, None, False),
    ("training.early_stopping_patience", 0, None, False),
    ("training.max_minutes", 0, None, False), ("training.verbose", 0, 2, False),
    ("training.initial_step", 0, None, False),
    *((f"eval.{key}", *SEARCH_BOUNDS[key], False) for key in SEQ2SEQ_KEYS),
    ("eval.batch_size", 1, 4096, False), ("eval.max_sentences", 0, None, False),
    ("eval.samples", 0, None, False), ("eval.dev_score_sentences", 0, None, False),
    ("eval.dev_score_beam", *SEARCH_BOUNDS["beam_size"], False),
    ("model.num_classes", 0, 100_000, False),
    ("data.article_sentences", 1, 512, False), ("model.sentence_layers", 1, 64, False),
    ("eval.summary_sentences", 0, 512, False), ("eval.summary_syllables", 0, None, False),
    ("data.mask_rate", 0, 1, True), ("data.max_predictions", 0, None, False),
    ("data.noise_rate", 0, 1, True), ("data.span_lambda", 0, 64, True),
    ("eval.selector_epsilon", 0, 1, False), ("eval.selector_top_k", 0, 64, False),
    ("data.oracle_share", 0, 1, False),
]
# Below 1, not up to it: label smoothing 1 leaves no signal, and Adam's betas must be < 1.
_BELOW_HIGH = {"training.label_smoothing", "training.beta_1", "training.beta_2",
               "data.mask_rate", "data.noise_rate"}


def model_preview(config: RunConfig):
    """The preset with model.overrides as TransformerConfig builds it, before any data or
    tokenizer is made: the vocabulary sizes and lengths the run fills in later stand in as
    values that pass, unless the overrides set them. A ConfigError names what it refuses."""
    from keras_transformer.command_line import one_line
    from keras_transformer.config import TransformerConfig

    overrides = config.model.overrides
    # One stand-in for both vocabularies (a joint one passes share_embeddings), the size an
    # override gives one of them where it does.
    vocab = overrides.get("source_vocab_size", overrides.get("target_vocab_size", 1 << 20))
    stand_ins = {"source_vocab_size": vocab, "target_vocab_size": vocab,
                 "max_source_length": 4096, "max_target_length": 4096}
    try:
        return TransformerConfig.preset(config.model.preset, **{**stand_ins, **overrides})
    except (TypeError, ValueError) as err:
        raise ConfigError(f"model: {one_line(err)}") from None


def _check_model(config: RunConfig) -> None:
    """The model section as TransformerConfig checks it (the task adds its own rules:
    Task.check_config)."""
    model_preview(config)


def _check_given_tokenizer(config: RunConfig) -> None:
    """tokenizer.model brings the run's one tokenizer: nothing else may make it."""
    tok = config.tokenizer
    if not tok.model:
        return
    if tok.sample_sentences:
        raise ConfigError("tokenizer.model brings a tokenizer and tokenizer.sample_sentences "
                          "trains one; set only one of them")
    if config.training.init_from:
        raise ConfigError("tokenizer.model and training.init_from both give the tokenizer "
                          "(a warm start takes its run's); set only one of them")
    if not tok.joint and config.task in ("translation", "summarization"):
        raise ConfigError("tokenizer.model is one model for source and target: set "
                          "tokenizer.joint: true")


TEXT_TASKS = ("masked_lm", "denoising")  # tasks reading data.texts, not data.train_source


def _check_stream(config: RunConfig) -> None:
    """data.stream's needs, each refused in one line before anything is read."""
    d = config.data
    if not d.stream:
        return
    texts = config.task in TEXT_TASKS
    needs = [
        (not (texts and not d.texts), f"for task {config.task} reads data.texts (files or "
                                      f"globs of training text) as shards: set data.texts"),
        (texts or d.corpus == "tsv", f"reads TSV shards: for task {config.task} set "
                                     f"data.corpus: tsv"),
        (texts or not d.tsv, "reads data.train_source, data.dev_source (and data.test_source), "
                             "not data.tsv"),
        (texts or bool(d.train_source and d.dev_source), "needs data.train_source (a TSV file "
                                                         "or a glob of shards) and "
                                                         "data.dev_source"),
        (config.task != "classification" or bool(d.labels or config.model.num_classes),
         "reads the labels as training meets them: name the classes (data.labels) or count "
         "them (model.num_classes)"),
        (not d.extract_sources, "reads whole articles: data.extract_sources needs the "
                                "selector's picks of every training article in memory"),
        (not (d.next_sentence and config.task == "masked_lm"),
         "makes a row of each sentence: data.next_sentence pairs sentences across the "
         "corpus in memory"),
        (config.training.steps_per_epoch > 0, "counts training in steps: set "
                                              "training.steps_per_epoch"),
        (bool(config.tokenizer.sample_sentences or config.tokenizer.model
              or config.training.init_from),
         "trains the tokenizer on a sample: set tokenizer.sample_sentences (or give "
         "tokenizer.model, or training.init_from)"),
    ]
    for met, message in needs:
        if not met:
            raise ConfigError(f"data.stream {message}")


def _check_class_weight(config: RunConfig) -> None:
    """training.class_weight's form (its labels are matched to the classes when the data is
    read: train.tasks.classification.class_weights), and eval.tune_class_bias's task."""
    if config.eval.tune_class_bias and config.task != "classification":
        raise ConfigError(f"eval.tune_class_bias is for task classification, not "
                          f"{config.task}")
    weight = config.training.class_weight
    if weight == "":
        return
    if config.task != "classification":
        raise ConfigError(f"training.class_weight is for task classification, not "
                          f"{config.task}")
    if weight == "balanced":
        return
    if not isinstance(weight, dict) or not weight:
        raise ConfigError(f"training.class_weight must be balanced or a mapping "
                          f"{{label: weight}}, got {weight!r}")
    for label, value in weight.items():
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value <= 0):
            raise ConfigError(f"training.class_weight: the weight of {label!r} must be a "
                              f"positive number, got {value!r}")


def _check_ranges(config: RunConfig) -> None:
    for key, low, high, exclusive in _RANGES:
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        if isinstance(value, str):
            continue  # a word such as initial_step's "continue", checked by _check_type
        # NaN fails every comparison, and no value may be infinite.
        bad = (value <= low if exclusive else value < low) or not math.isfinite(value)
        if high is not None:
            bad |= value >= high if key in _BELOW_HIGH else value > high
        if bad:
            allowed = f"{'>' if exclusive else '>='} {low}"
            if high is not None:
                allowed += f" and {'<' if key in _BELOW_HIGH else '<='} {high}"
            raise ConfigError(f"{key} must be {allowed}, got {value!r}")


def save_config(config: RunConfig, path: str | Path) -> None:
    atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
