"""SentencePiece training and tokenization, plus loaders for parallel text.

The tokenizer has two faces: a Python one (the ``sentencepiece`` package) for
preprocessing and evaluation, and an in-graph one (``tensorflow_text``) for
``tf.data`` pipelines and exported models. Both read the same serialized model,
so they produce identical ids.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import sentencepiece as spm

from keras_transformer.text.lines import read_lines

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

logger = logging.getLogger(__name__)

# The special ids train_sentencepiece gives a model unless told otherwise; a trained model
# carries its own, which SentencePieceTokenizer reads back (pad_id, bos_id, eos_id, unk_id).
PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

_MODEL_TYPES = ("unigram", "bpe", "char", "word")


def train_sentencepiece(
    texts: Iterable[str],
    model_prefix: str | Path,
    vocab_size: int,
    *,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    seed: int = 0,
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    user_defined_symbols: Sequence[str] = (),
) -> Path:
    """Train a SentencePiece model on in-memory ``texts``; return the ``<prefix>.model`` path.

    Also writes ``<prefix>.vocab``. The model holds its special ids: ``pad_id``, ``bos_id``
    and ``eos_id`` as given (by default PAD=0, BOS=2, EOS=3), and UNK at the smallest id
    below 4 none of them takes (by default 1). ``vocab_size`` is an upper bound: a corpus
    too small to support it yields a smaller vocabulary (read it back from
    ``SentencePieceTokenizer.vocab_size``). ``user_defined_symbols`` are pieces of their own
    (a masked language model's ``[MASK]``), never split, at the ids after the special ones.
    """
    if model_type not in _MODEL_TYPES:
        raise ValueError(f"model_type must be one of {_MODEL_TYPES}, got {model_type!r}")
    if vocab_size <= 4:
        raise ValueError(f"vocab_size must exceed the 4 special pieces, got {vocab_size}")
    specials = {"pad_id": pad_id, "bos_id": bos_id, "eos_id": eos_id}
    if len(set(specials.values())) != 3 or not all(
            isinstance(v, int) and 0 <= v < vocab_size for v in specials.values()):
        raise ValueError(f"pad_id, bos_id and eos_id must be different ids below vocab_size="
                         f"{vocab_size}, got {specials}")
    unk_id = min(set(range(4)) - set(specials.values()))
    # Blank lines carry no statistics and an all-blank corpus must fail here,
    # not deep inside the C++ trainer with an empty message.
    sentences = [t.strip() for t in texts if t is not None and t.strip()]
    if not sentences:
        raise ValueError("train_sentencepiece got no non-empty texts to train on")

    prefix = Path(model_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    # The trainer draws from a process-global RNG; seeding it (with one thread)
    # makes a rerun on the same corpus give the same vocabulary.
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_prefix=str(prefix),
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            pad_id=pad_id,
            unk_id=unk_id,
            bos_id=bos_id,
            eos_id=eos_id,
            pad_piece="<pad>",
            unk_piece="<unk>",
            bos_piece="<s>",
            eos_piece="</s>",
            num_threads=1,
            # Soft limit: small corpora shrink the vocabulary instead of failing.
            hard_vocab_limit=False,
            # Use every sentence; sampling would make the result depend on the RNG.
            input_sentence_size=0,
            shuffle_input_sentence=False,
            user_defined_symbols=list(user_defined_symbols),
            minloglevel=2,
        )
    except RuntimeError as err:
        raise ValueError(_training_failure(prefix, err, vocab_size, user_defined_symbols)) from err

    model_path = prefix.with_name(prefix.name + ".model")
    actual = spm.SentencePieceProcessor(model_file=str(model_path)).get_piece_size()
    if actual < vocab_size:
        logger.info(
            "SentencePiece vocabulary for %s has %d pieces (requested %d): corpus too small",
            model_path,
            actual,
            vocab_size,
        )
    return model_path


def _training_failure(prefix, err: RuntimeError, vocab_size: int,
                      symbols: Sequence[str]) -> str:
    """SentencePiece's failure in one line. Its message for a vocabulary smaller than the
    pieces it must hold names neither what they are nor the size to give, and the pieces of
    their own (a denoising run's 100 sentinels) may be most of them."""
    short = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(err))
    if not short:
        return f"SentencePiece training for {prefix} failed: {err}"
    needed = int(short.group(2))
    own = f", {len(symbols)} pieces of their own ({symbols[0]}, ...)" if symbols else ""
    return (f"vocab_size {vocab_size} is smaller than the {needed} pieces the tokenizer must "
            f"hold (every character of the text, the special pieces{own}); raise vocab_size "
            f"to at least {needed}, or more to leave room for learned pieces")


class SentencePieceTokenizer:
    """One SentencePiece model, usable from Python and inside TensorFlow graphs.

    The model must use the project's special ids: pad 0, unk 1, bos 2, eos 3
    (`train_sentencepiece` makes such models).

    Args:
        model: path of a ``.model`` file, or the serialized model's bytes.

    Example:

    ```python
    tokenizer = SentencePieceTokenizer("runs/demo/spm_source.model")
    ids = tokenizer.encode(["three red cats"])  # [[...]], without BOS/EOS
    tokenizer.decode(ids)  # ["three red cats"]
    ```
    """

    def __init__(self, model: str | Path | bytes):
        """Load from a ``.model`` path or from serialized model bytes."""
        if isinstance(model, (bytes, bytearray)):
            self._model_path: Path | None = None
            data = bytes(model)
            source = "<serialized model bytes>"
        else:
            path = Path(model)
            if not path.is_file():
                raise FileNotFoundError(f"SentencePiece model file not found: {path}")
            self._model_path = path
            data = path.read_bytes()
            source = str(path)
        if not data:
            raise ValueError(f"SentencePiece model is empty: {source}")
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=data)
        except RuntimeError as err:
            raise ValueError(f"Could not parse SentencePiece model from {source}: {err}") from err
        # Canonical bytes (re-serialized) so equal models compare equal.
        self._model_bytes = self._sp.serialized_model_proto()
        specials = (self._sp.pad_id(), self._sp.unk_id(), self._sp.bos_id(), self._sp.eos_id())
        if min(specials) < 0:
            # Batches are padded with pad_id and the decoder starts at bos_id, stops at eos_id.
            raise ValueError(
                f"SentencePiece model {source} has special ids (pad, unk, bos, eos) = "
                f"{specials}; this project needs all four (-1 is none): train it with "
                f"train_sentencepiece"
            )
        self._pad_id, self._unk_id, self._bos_id, self._eos_id = specials
        self._tf_tokenizer = None

    # ------------------------------------------------------------------ properties
    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def pad_id(self) -> int:
        return self._pad_id

    @property
    def unk_id(self) -> int:
        return self._unk_id

    @property
    def bos_id(self) -> int:
        return self._bos_id

    @property
    def eos_id(self) -> int:
        return self._eos_id

    @property
    def special_ids(self) -> dict[str, int]:
        """{"pad_id", "bos_id", "eos_id"}: the ids a TransformerConfig must hold to match."""
        return {"pad_id": self._pad_id, "bos_id": self._bos_id, "eos_id": self._eos_id}

    def piece_id(self, piece: str) -> int | None:
        """The id of a whole piece (e.g. ``[MASK]``), or None when the model lacks it."""
        found = self._sp.piece_to_id(piece)
        return None if found == self._unk_id and piece != self._sp.id_to_piece(found) else found

    @property
    def pieces(self) -> list[str]:
        """Every piece, in id order."""
        return [self._sp.id_to_piece(i) for i in range(self.vocab_size)]

    @property
    def model_path(self) -> Path | None:
        """Path the model was loaded from, or None when built from bytes."""
        return self._model_path

    @property
    def model_bytes(self) -> bytes:
        """The serialized ModelProto."""
        return self._model_bytes

    def __repr__(self) -> str:
        where = self._model_path if self._model_path is not None else "<bytes>"
        return f"SentencePieceTokenizer({where}, vocab_size={self.vocab_size})"

    # ------------------------------------------------------------------ Python side
    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """list[str] -> list[list[int]] piece ids, without BOS/EOS."""
        if isinstance(texts, str):
            raise TypeError("encode expects a list of strings, not a single str")
        return self._sp.encode(list(texts), out_type=int)

    def decode(self, ids: Sequence[Sequence[int]] | np.ndarray) -> list[str]:
        """(batch, T) ids -> list[str]; stops at the first EOS, skips PAD and BOS."""
        if isinstance(ids, np.ndarray) or hasattr(ids, "numpy"):
            arr = np.asarray(ids)
            if arr.ndim != 2:
                raise ValueError(f"decode expects a 2-D array (batch, T), got shape {arr.shape}")
            rows: Iterable[Sequence[int]] = arr.tolist()
        else:
            rows = ids
        return self._sp.decode([self._clean_row(row) for row in rows])

    def _clean_row(self, row: Iterable[int]) -> list[int]:
        out = []
        for token in row:
            token = int(token)
            if token == self._eos_id:
                break
            if token in (self._pad_id, self._bos_id):
                continue
            out.append(token)
        return out

    # ------------------------------------------------------------------ in-graph side
    def _tf(self):
        # Built on first use so that importing this module, or using only the
        # Python side, creates no TensorFlow state (and doesn't import TF-Text).
        if self._tf_tokenizer is None:
            import tensorflow as tf
            import tensorflow_text as tf_text

            # First use may be while tracing a tf.function or tf.data map; the
            # model resource must live eagerly, not in that one traced graph.
            # tf.random.set_seed (and keras.utils.set_random_seed) clears TF's kernel
            # cache and with it this resource: seed before the first tokenize call.
            with tf.init_scope():
                self._tf_tokenizer = tf_text.SentencepieceTokenizer(
                    model=self._model_bytes, out_type=tf.int32
                )
        return self._tf_tokenizer

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """String tensor (batch,) -> int32 RaggedTensor (batch, None); a scalar gives (None,)."""
        return self._tf().tokenize(texts)

    def detokenize(self, ids: tf.Tensor) -> tf.Tensor:
        """int tensor (batch, T) -> string tensor (batch,); drops the first EOS onward, PAD, BOS."""
        import tensorflow as tf

        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=self._pad_id)
        ids = tf.convert_to_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        squeeze = ids.shape.rank == 1
        if squeeze:
            ids = ids[tf.newaxis, :]
        before_eos = tf.equal(
            tf.cumsum(tf.cast(tf.equal(ids, self._eos_id), tf.int32), axis=1), 0)
        keep = before_eos & tf.not_equal(ids, self._pad_id) & tf.not_equal(ids, self._bos_id)
        text = self._tf().detokenize(tf.ragged.boolean_mask(ids, keep))
        return text[0] if squeeze else text

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path, name: str = "spm") -> Path:
        """Write the model to ``directory/<name>.model`` (plus ``.vocab`` if known); return it."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        stem = name[: -len(".model")] if name.endswith(".model") else name
        target = directory / f"{stem}.model"
        target.write_bytes(self._model_bytes)
        if self._model_path is not None:
            vocab = self._model_path.with_suffix(".vocab")
            if vocab.is_file() and vocab.resolve() != target.with_suffix(".vocab").resolve():
                shutil.copyfile(vocab, target.with_suffix(".vocab"))
        return target

    @classmethod
    def load(cls, path: str | Path) -> SentencePieceTokenizer:
        """Load from a ``.model`` file."""
        return cls(Path(path))


def shared_special_ids(*tokenizers) -> dict[str, int]:
    """The ``special_ids`` of tokenizers that must agree on them (source and target of one
    model); ValueError naming both sets when they differ."""
    ids = [dict(t.special_ids) for t in tokenizers]
    for other in ids[1:]:
        if other != ids[0]:
            raise ValueError(
                f"the tokenizers have different special ids ({ids[0]} and {other}); one model "
                f"needs one set: train both with the same pad_id, bos_id and eos_id")
    return ids[0]


# ---------------------------------------------------------------------- text loaders
class ParallelText(NamedTuple):
    """Aligned sentence pairs; unpacks as ``sources, targets, dropped``."""

    sources: list[str]
    targets: list[str]
    dropped: int


def load_parallel_text(src_path: str | Path, tgt_path: str | Path) -> ParallelText:
    """Read two line-aligned UTF-8 files; drop (and count) pairs with an empty side."""
    src_lines = read_lines(src_path)
    tgt_lines = read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise ValueError(
            f"Parallel files differ in line count: {src_path} has {len(src_lines)} lines, "
            f"{tgt_path} has {len(tgt_lines)} lines"
        )
    return _keep_nonempty(zip(src_lines, tgt_lines, strict=True))


def load_tsv_pairs(path: str | Path, src_col: int = 0, tgt_col: int = 1) -> ParallelText:
    """Read ``src<TAB>tgt[<TAB>...]`` lines; blank lines and pairs with an empty side are dropped."""
    pairs = []
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            pairs.append(("", ""))
            continue
        cols = line.split("\t")
        if max(src_col, tgt_col) >= len(cols):
            raise ValueError(
                f"{path}:{lineno}: expected at least {max(src_col, tgt_col) + 1} "
                f"tab-separated columns, found {len(cols)}"
            )
        pairs.append((cols[src_col], cols[tgt_col]))
    return _keep_nonempty(pairs)


def _keep_nonempty(pairs: Iterable[tuple[str, str]]) -> ParallelText:
    sources: list[str] = []
    targets: list[str] = []
    dropped = 0
    for src, tgt in pairs:
        src, tgt = src.strip(), tgt.strip()
        if not src or not tgt:
            dropped += 1
            continue
        sources.append(src)
        targets.append(tgt)
    return ParallelText(sources, targets, dropped)
