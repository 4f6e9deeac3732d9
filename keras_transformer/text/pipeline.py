"""``tf.data`` input pipelines for translation, classification, language modelling and
pre-training (masked language modelling, denoising).

Tokenization runs in-graph (tensorflow-text), so the same code path serves
training and exported models. Translation batches are bucketed by length under
a token budget and padded to a few fixed lengths, so an XLA-compiled train step
sees a bounded number of shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

# The batching rules that need no TensorFlow live in `buckets` (the NumPy input path shares
# them); they stay importable from here.
from keras_transformer.text.buckets import (  # noqa: F401
    bucket_batch_sizes_for,
    bucket_boundaries_for,
    budget_buckets,
    check_boundaries,
    check_length_limits,
    count_too_long,
    language_model_rows,
    pair_buckets,
    special_ids_of,
)
from keras_transformer.text.shards import worker_part

AUTOTUNE = tf.data.AUTOTUNE

# Strings are tokenized in chunks: one SentencePiece op call per chunk is far
# cheaper than one per sentence.
_TOKENIZE_CHUNK = 256
_SPLIT_CHUNK = 1024  # lines of TSV shards parsed per call


def _tokenized_pairs(sources, targets, source_tokenizer, target_tokenizer, shuffle, seed, repeat):
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.constant(list(sources), tf.string), tf.constant(list(targets), tf.string))
    )
    ds = ds.batch(_TOKENIZE_CHUNK)
    ds = ds.map(
        lambda s, t: (source_tokenizer.tokenize(s), target_tokenizer.tokenize(t)),
        num_parallel_calls=AUTOTUNE,
        deterministic=True,
    )
    # Tokenize once: later epochs read the ids from memory instead of taking CPU time
    # from the training step.
    ds = ds.unbatch().cache()
    if shuffle:
        # A full-size buffer gives a uniform shuffle; the ids are in memory anyway.
        ds = ds.shuffle(len(sources), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        # Repeating before batching lets batches span epochs, so no short tail batches.
        ds = ds.repeat()
    return ds


def make_translation_dataset(
    sources: Sequence[str],
    targets: Sequence[str],
    source_tokenizer,
    target_tokenizer,
    *,
    max_source_length: int,
    max_target_length: int,
    tokens_per_batch: int,
    bucket_boundaries: Sequence[int] | None = None,
    shuffle: bool = True,
    seed: int = 0,
    repeat: bool = False,
    drop_long: bool = True,
    drop_remainder: bool = False,
    fixed_target_length: bool = False,
    pad_id: int | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
) -> tf.data.Dataset:
    """Bucketed, token-budgeted batches ``((source, target_in), target_out)``, all int32.

    source: (B, L) ids + [EOS], padded with PAD.
    target_in: (B, L) [BOS] + ids, padded with PAD.
    target_out: (B, L) ids + [EOS], padded with PAD (target_in shifted left by one).

    PAD, BOS and EOS are ``pad_id``, ``bos_id``, ``eos_id`` where given, else the
    tokenizers' own (``shared_special_ids``: source and target must agree).

    All three share L (but see ``fixed_target_length`` below), one of ``boundary - 1``
    for ``boundary`` in ``bucket_boundaries`` (default
    ``bucket_boundaries_for(max(max_source_length, max_target_length))``), chosen by the
    longer of source and target; so the model's position table must cover the largest
    padded length. B is
    ``max(1, tokens_per_batch // L)`` except for a bucket's last, partial batch of an
    epoch (none when ``repeat`` or ``drop_remainder``).

    Lengths count the special token: a pair is too long when source ids + EOS exceed
    ``max_source_length`` or target ids + BOS exceed ``max_target_length``. With
    ``drop_long`` such pairs are dropped (``count_too_long`` gives how many); otherwise
    ids are truncated and EOS/BOS kept.

    With ``fixed_target_length`` (long sources, short targets: summarization), batches are
    bucketed by source length alone: sources are padded to their bucket's length (default
    boundaries ``bucket_boundaries_for(max_source_length)``; B counts source tokens) and
    targets to ``max_target_length``, so the decoder never runs over the source's padding.
    """
    boundaries, batch_sizes = pair_buckets(
        sources, targets, max_source_length=max_source_length,
        max_target_length=max_target_length, tokens_per_batch=tokens_per_batch,
        bucket_boundaries=bucket_boundaries, fixed_target_length=fixed_target_length,
        what="make_translation_dataset")
    pad_id, bos_id, eos_id = special_ids_of((source_tokenizer, target_tokenizer), pad_id, bos_id,
                                          eos_id)

    ds = _tokenized_pairs(
        sources, targets, source_tokenizer, target_tokenizer, shuffle, seed, repeat
    )
    return _bucketed(ds, boundaries, batch_sizes, max_source_length=max_source_length,
                     max_target_length=max_target_length, drop_long=drop_long,
                     drop_remainder=drop_remainder, fixed_target_length=fixed_target_length,
                     pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)


def _bucketed(ds, boundaries, batch_sizes, *, max_source_length, max_target_length, drop_long,
              drop_remainder, fixed_target_length, pad_id, bos_id, eos_id):
    """Tokenized (source ids, target ids) pairs -> make_translation_dataset's batches: the
    rules for too-long pairs, the special tokens and the length buckets, whatever the pairs
    were read from."""
    if drop_long:
        ds = ds.filter(
            lambda s, t: tf.logical_and(
                tf.size(s) + 1 <= max_source_length, tf.size(t) + 1 <= max_target_length
            )
        )
    else:
        ds = ds.map(
            lambda s, t: (s[: max_source_length - 1], t[: max_target_length - 1]),
            num_parallel_calls=AUTOTUNE,
            deterministic=True,
        )

    eos = tf.constant([eos_id], tf.int32)
    bos = tf.constant([bos_id], tf.int32)

    def to_example(s, t):
        source = tf.concat([s, eos], axis=0)
        target_in = tf.concat([bos, t], axis=0)
        target_out = tf.concat([t, eos], axis=0)
        return (source, target_in), target_out

    ds = ds.map(to_example, num_parallel_calls=AUTOTUNE, deterministic=True)

    if fixed_target_length:
        def length(inputs, target_out):
            return tf.shape(inputs[0])[0]

        # A fixed dimension stays as given; the open one becomes the bucket's length.
        padded_shapes = (([None], [max_target_length]), [max_target_length])
    else:
        def length(inputs, target_out):
            return tf.maximum(tf.shape(inputs[0])[0], tf.shape(target_out)[0])

        padded_shapes = None
    ds = ds.bucket_by_sequence_length(
        element_length_func=length,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=batch_sizes,
        padded_shapes=padded_shapes,
        padding_values=((pad_id, pad_id), pad_id),
        pad_to_bucket_boundary=True,
        drop_remainder=drop_remainder,
    )
    return ds.prefetch(AUTOTUNE)


def _shard_lines(files: Sequence[str], compressions: Sequence[str], shuffle: bool, seed: int,
                 repeat: bool, cycle_length: int, workers: int = 1, worker: int = 0):
    """The lines of worker `worker`'s part of TSV shards (`shards.worker_part`: whole shards,
    or every `workers`-th line when there are fewer shards than workers), `cycle_length`
    shards read at a time, a line of each in turn; the shard order shuffled anew each pass
    when `shuffle`."""
    chosen, by_line = worker_part(len(files), workers, worker)
    files, compressions = [files[i] for i in chosen], [compressions[i] for i in chosen]
    ds = tf.data.Dataset.from_tensor_slices((tf.constant(list(files), tf.string),
                                             tf.constant(list(compressions), tf.string)))
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    lines = ds.interleave(
        lambda path, compression: tf.data.TextLineDataset(path, compression_type=compression),
        cycle_length=max(1, min(cycle_length, len(files))), block_length=1,
        num_parallel_calls=AUTOTUNE, deterministic=True)
    # Every worker reads the same seeded order of lines, so the n-th lines partition it.
    return lines.shard(workers, worker) if by_line else lines


def tsv_pairs(lines: tf.data.Dataset) -> tf.data.Dataset:
    """`source<TAB>target` lines -> (source, target) strings, each side stripped; lines
    without exactly two columns and pairs with an empty side dropped, as the in-memory reader
    (`tokenizer.load_tsv_pairs`) drops blank lines and empty sides. A caller that must
    refuse other column counts checks the files first (train.shards does)."""
    def split(lines):
        # A chunk of lines at a time: per-line string ops cost tf.data more than the work.
        lines = tf.strings.regex_replace(lines, "^\ufeff", "")  # a byte-order mark
        columns = tf.strings.split(lines, "\t")
        sides = columns.to_tensor(default_value="", shape=[None, 2])
        source, target = tf.strings.strip(sides[:, 0]), tf.strings.strip(sides[:, 1])
        keep = ((columns.row_lengths() == 2) & (tf.strings.length(source) > 0)
                & (tf.strings.length(target) > 0))
        return tf.boolean_mask(source, keep), tf.boolean_mask(target, keep)

    return lines.batch(_SPLIT_CHUNK).map(split, num_parallel_calls=AUTOTUNE,
                                         deterministic=True).unbatch()


def make_tsv_stream_dataset(
    files: Sequence[str],
    compressions: Sequence[str],
    source_tokenizer,
    target_tokenizer,
    *,
    max_source_length: int,
    max_target_length: int,
    tokens_per_batch: int,
    shuffle_buffer: int,
    bucket_boundaries: Sequence[int] | None = None,
    shuffle: bool = True,
    seed: int = 0,
    repeat: bool = True,
    cycle_length: int = 4,
    drop_long: bool = True,
    drop_remainder: bool = False,
    pad_id: int | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    workers: int = 1,
    worker: int = 0,
) -> tf.data.Dataset:
    """make_translation_dataset's batches from `source<TAB>target` TSV shards read as they
    are consumed: `files` with their `compressions` ("GZIP" or ""), shard order shuffled
    each pass, `cycle_length` shards interleaved, pairs shuffled in a buffer of
    `shuffle_buffer` (memory: the buffer, not the corpus), tokenized in the graph, then
    bucketed under the token budget by the same rules. Nothing is cached: a pass reads the
    files again. `workers` > 1: the batches of worker `worker`'s part of the shards alone
    (`shards.worker_part`)."""
    if not files or len(files) != len(compressions):
        raise ValueError(f"make_tsv_stream_dataset needs files, each with its compression; got "
                         f"{len(files)} files and {len(compressions)} compressions")
    if shuffle_buffer < 1:
        raise ValueError(f"shuffle_buffer must be >= 1, got {shuffle_buffer}")
    ds = tsv_pairs(_shard_lines(files, compressions, shuffle, seed, repeat, cycle_length,
                                workers, worker))
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    return make_pair_stream_dataset(
        ds, source_tokenizer, target_tokenizer, max_source_length=max_source_length,
        max_target_length=max_target_length, tokens_per_batch=tokens_per_batch,
        bucket_boundaries=bucket_boundaries, drop_long=drop_long,
        drop_remainder=drop_remainder, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)


def make_pair_stream_dataset(
    pairs: tf.data.Dataset,
    source_tokenizer,
    target_tokenizer,
    *,
    max_source_length: int,
    max_target_length: int,
    tokens_per_batch: int,
    bucket_boundaries: Sequence[int] | None = None,
    drop_long: bool = True,
    drop_remainder: bool = False,
    fixed_target_length: bool = False,
    pad_id: int | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
) -> tf.data.Dataset:
    """make_translation_dataset's batches of a stream of (source, target) strings, in the
    order given (a streamed corpus is shuffled by its reader): tokenized in the graph a chunk
    at a time, then bucketed under the token budget by the same rules."""
    boundaries, batch_sizes = budget_buckets(
        max_source_length=max_source_length, max_target_length=max_target_length,
        tokens_per_batch=tokens_per_batch, bucket_boundaries=bucket_boundaries,
        fixed_target_length=fixed_target_length)
    pad_id, bos_id, eos_id = special_ids_of((source_tokenizer, target_tokenizer), pad_id, bos_id,
                                          eos_id)
    ds = pairs.batch(_TOKENIZE_CHUNK).map(
        lambda s, t: (source_tokenizer.tokenize(s), target_tokenizer.tokenize(t)),
        num_parallel_calls=AUTOTUNE, deterministic=True).unbatch()
    return _bucketed(ds, boundaries, batch_sizes, max_source_length=max_source_length,
                     max_target_length=max_target_length, drop_long=drop_long,
                     drop_remainder=drop_remainder, fixed_target_length=fixed_target_length,
                     pad_id=pad_id, bos_id=bos_id, eos_id=eos_id)


def make_classification_dataset(
    texts: Sequence[str],
    labels: Sequence[int] | np.ndarray,
    tokenizer,
    *,
    max_length: int,
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    drop_remainder: bool = False,
    pad_id: int | None = None,
    eos_id: int | None = None,
) -> tf.data.Dataset:
    """Batches ``(token_ids, labels)``: token_ids (B, max_length) int32, labels (B,) int32.

    token_ids are ids + [EOS] (the same format as a translation source), truncated
    to ``max_length`` with EOS kept last, then padded with PAD to exactly ``max_length``;
    PAD and EOS are ``pad_id`` and ``eos_id`` where given, else the tokenizer's own.
    ``texts`` may instead be a tf.data.Dataset of (text, label) (a streamed corpus, shuffled
    by its reader), with ``labels`` None.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1 (room for EOS), got {max_length}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if isinstance(texts, tf.data.Dataset):  # a streamed corpus: shuffled by its reader
        return _classification_batches(texts, tokenizer, max_length=max_length,
                                       batch_size=batch_size, drop_remainder=drop_remainder,
                                       pad_id=pad_id, eos_id=eos_id)
    labels_arr = np.asarray(labels)
    if len(texts) != len(labels_arr):
        raise ValueError(f"texts and labels differ in length: {len(texts)} vs {len(labels_arr)}")
    if len(texts) == 0:
        raise ValueError("make_classification_dataset got no texts")
    if labels_arr.ndim != 1 or not np.issubdtype(labels_arr.dtype, np.integer):
        raise ValueError(
            f"labels must be a 1-D sequence of integer class ids, got dtype "
            f"{labels_arr.dtype} and shape {labels_arr.shape}"
        )

    ds = tf.data.Dataset.from_tensor_slices(
        (tf.constant(list(texts), tf.string), tf.constant(labels_arr.astype(np.int32)))
    )
    if shuffle:
        ds = ds.shuffle(len(texts), seed=seed, reshuffle_each_iteration=True)
    return _classification_batches(ds, tokenizer, max_length=max_length, batch_size=batch_size,
                                   drop_remainder=drop_remainder, pad_id=pad_id, eos_id=eos_id)


def _classification_batches(ds, tokenizer, *, max_length, batch_size, drop_remainder, pad_id,
                            eos_id):
    """make_classification_dataset's batches of a dataset of (text, label)."""
    pad_id, _, eos_id = special_ids_of((tokenizer,), pad_id, None, eos_id)
    eos = tf.constant([eos_id], tf.int32)

    def to_example(text, label):
        ids = tokenizer.tokenize(text)
        return tf.concat([ids[: max_length - 1], eos], axis=0), label

    ds = ds.map(to_example, num_parallel_calls=AUTOTUNE, deterministic=True)
    ds = ds.padded_batch(
        batch_size,
        padded_shapes=([max_length], []),
        padding_values=(pad_id, 0),
        drop_remainder=drop_remainder,
    )
    return ds.prefetch(AUTOTUNE)


def make_language_model_dataset(
    rows: np.ndarray,
    *,
    batch_size: int,
    pad_id: int,
    bos_id: int,
    shuffle: bool = True,
    seed: int = 0,
    repeat: bool = False,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Batches ``(inputs, targets)`` of ``language_model_rows``, both (B, length) int32;
    ``rows`` may instead be a tf.data.Dataset of them (a streamed corpus, shuffled by its
    reader, endless).

    inputs = ``row[:-1]``, targets = ``row[1:]`` (the next token of each position), with
    every BOS target set to PAD: BOS opens a text and is given, never predicted, so the
    loss, padding masked, covers each text's pieces and its EOS once. Rows are shuffled
    (seeded, a new order each pass) when ``shuffle``; ``repeat`` repeats them before
    batching, so no short batch. B is ``batch_size`` except for a last partial batch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if isinstance(rows, tf.data.Dataset):  # a streamed corpus: shuffled by its reader
        ds = rows
    else:
        rows = np.asarray(rows)
        if rows.ndim != 2 or rows.shape[1] < 2 or len(rows) == 0:
            raise ValueError(f"rows must be (N, length + 1) with N, length >= 1, got "
                             f"{rows.shape}")
        ds = tf.data.Dataset.from_tensor_slices(tf.constant(rows, tf.int32))
        if shuffle:
            ds = ds.shuffle(len(rows), seed=seed, reshuffle_each_iteration=True)
        if repeat:
            ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)

    def split(batch):
        targets = batch[:, 1:]
        return batch[:, :-1], tf.where(targets == bos_id, tf.constant(pad_id, tf.int32), targets)

    return ds.map(split, num_parallel_calls=AUTOTUNE, deterministic=True).prefetch(AUTOTUNE)


def _bucketed_rows(columns: Sequence[Sequence[Sequence[int]]], *, max_length: int,
                   tokens_per_batch: int, padding_values: Sequence[int], num_buckets: int,
                   shuffle: bool, seed: int, repeat: bool, what: str) -> tf.data.Dataset:
    """Rows of ids (each of `columns` one list of rows, row i of every column as long as the
    first's) shuffled (seeded, a new order each pass), bucketed by length under
    ``tokens_per_batch`` like the translation batches, padded by ``padding_values`` (one per
    column): batches (B, L) int32, a tuple of them for several columns.

    ``columns`` may instead be a tf.data.Dataset of such rows (a streamed corpus, shuffled by
    its reader, each row at most ``max_length`` long): it is bucketed as it is."""
    if isinstance(columns, tf.data.Dataset):
        ds = columns
    else:
        ds = _memory_rows(columns, max_length=max_length, what=what)
        if shuffle:
            ds = ds.shuffle(len(columns[0]), seed=seed, reshuffle_each_iteration=True)
        if repeat:
            ds = ds.repeat()
    boundaries = bucket_boundaries_for(max_length, num_buckets)
    return ds.bucket_by_sequence_length(
        element_length_func=lambda *r: tf.shape(r[0])[0],
        bucket_boundaries=boundaries,
        bucket_batch_sizes=bucket_batch_sizes_for(boundaries, tokens_per_batch),
        padding_values=tuple(padding_values) if len(padding_values) > 1 else padding_values[0],
        pad_to_bucket_boundary=True,
    )


def _memory_rows(columns: Sequence[Sequence[Sequence[int]]], *, max_length: int,
                 what: str) -> tf.data.Dataset:
    """_bucketed_rows' rows held in memory, checked, as a dataset of rows (a tuple of one
    row a column for several columns)."""
    rows = columns[0]
    lengths = np.fromiter((len(r) for r in rows), np.int64, count=len(rows))
    if len(rows) == 0 or lengths.min() < 1:
        raise ValueError(f"{what} needs at least one row, none of them empty")
    if lengths.max() > max_length:
        raise ValueError(f"a row of {lengths.max()} ids is longer than max_length={max_length}")
    # Rows as (start, length) into one flat constant per column: one tensor for the whole text.
    flats = [tf.constant(np.fromiter((i for r in column for i in r), np.int32,
                                     count=int(lengths.sum()))) for column in columns]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])

    def row(start, length):
        cut = tuple(flat[start: start + length] for flat in flats)
        return cut if len(cut) > 1 else cut[0]

    return tf.data.Dataset.from_tensor_slices((starts, lengths)).map(row)


def make_masked_lm_dataset(
    rows: Sequence[Sequence[int]],
    *,
    max_length: int,
    tokens_per_batch: int,
    pad_id: int,
    masking: dict,
    num_buckets: int = 4,
    word_starts: np.ndarray | None = None,
    shuffle: bool = True,
    seed: int = 0,
    repeat: bool = False,
    positions: bool = False,
    next_sentence: Sequence[int] | None = None,
) -> tf.data.Dataset:
    """Batches ``(inputs, targets)`` (B, L) int32 for a masked language model, or with
    ``positions`` ``((inputs, positions), labels)``, positions and labels (B, P) int32.
    With ``next_sentence`` (one label a row, ``text.sentence_pairs``'s) the second element
    is ``(targets or labels, next-sentence labels (B,))``.

    ``rows``: each text's ids, EOS included, at most ``max_length`` long, or a tf.data.Dataset
    of them (a streamed corpus: shuffled by its reader, endless). Rows are shuffled
    (seeded, a new order each pass), bucketed by length under ``tokens_per_batch`` like the
    translation batches, then masked by ``keras_transformer.text.masking.mask_batch`` with
    the keyword arguments ``masking`` (rate, mask_id, vocab_size, special_ids, seed, and
    max_predictions, the cap on masked pieces a row); ``word_starts`` (V,) bool, where given,
    masks whole words. ``positions`` (which needs the cap) lists each row's masked positions
    and their targets in P = min(cap, L) slots (``masking.masked_positions``), for a head
    that predicts only there.
    """
    from keras_transformer.text.masking import mask_batch, masked_positions

    cap = masking.get("max_predictions")
    if positions and cap is None:
        raise ValueError("make_masked_lm_dataset with positions needs masking's "
                         "max_predictions (the number of slots a row's positions fill)")

    streamed = isinstance(rows, tf.data.Dataset)
    if streamed and next_sentence is not None:
        raise ValueError("make_masked_lm_dataset: next_sentence labels go with rows in memory, "
                         "not with a stream of rows")
    columns, padding = (rows if streamed else [rows]), [pad_id]
    if next_sentence is not None:
        if len(next_sentence) != len(rows):
            raise ValueError(f"next_sentence holds {len(next_sentence)} labels for "
                             f"{len(rows)} rows; give one a row")
        # A row's label at each of its positions: the bucketing pads columns alike.
        columns.append([[label] * len(row) for row, label in zip(rows, next_sentence,
                                                                 strict=True)])
        padding.append(0)
    ds = _bucketed_rows(columns, max_length=max_length, tokens_per_batch=tokens_per_batch,
                        padding_values=padding, num_buckets=num_buckets, shuffle=shuffle,
                        seed=seed, repeat=repeat, what="make_masked_lm_dataset")
    table = None if word_starts is None else tf.constant(np.asarray(word_starts, bool))

    def masked(index, batch):
        batch, follows = batch if next_sentence is not None else (batch, None)
        starts = None if table is None else tf.gather(table, batch)
        inputs, targets = mask_batch(batch, index, pad_id=pad_id, word_starts=starts,
                                     **masking)
        if positions:
            where, targets = masked_positions(targets, pad_id, cap)
            inputs = (inputs, where)
        if follows is not None:
            targets = (targets, follows[:, 0])
        return inputs, targets

    ds = ds.enumerate().map(masked, num_parallel_calls=AUTOTUNE, deterministic=True)
    return ds.prefetch(AUTOTUNE)


def make_denoising_dataset(
    rows: Sequence[Sequence[int]],
    sentence_ids: Sequence[Sequence[int]],
    *,
    max_length: int,
    tokens_per_batch: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    noising: dict,
    permute_sentences: bool = False,
    noise: str = "infilling",
    num_buckets: int = 4,
    shuffle: bool = True,
    seed: int = 0,
    repeat: bool = False,
) -> tf.data.Dataset:
    """Batches ``((source, target_in), target_out)`` (B, L) int32 for denoising pre-training,
    in make_translation_dataset's format.

    ``rows``: each text's ids, EOS included, at most ``max_length`` long; ``sentence_ids``:
    each piece's sentence index in its row. ``rows`` may instead be a tf.data.Dataset of
    (row, sentence ids) (a streamed corpus, shuffled by its reader, endless), with
    ``sentence_ids`` None. Rows are shuffled and bucketed as
    make_masked_lm_dataset's. ``noise`` "infilling": source the row corrupted by
    ``keras_transformer.text.noising.noise_batch`` with the keyword arguments ``noising``
    (rate, span_lambda, mask_id, seed), its sentences permuted first when
    ``permute_sentences``, and target_out the row; "span_corruption": source and target_out
    by ``noising.span_corruption_batch`` (``noising``: rate, span_lambda, sentinel_ids, seed).
    target_in is BOS + target_out without its EOS.
    """
    from keras_transformer.text.noising import noise_batch, span_corruption_batch

    columns = rows if isinstance(rows, tf.data.Dataset) else [rows, sentence_ids]
    ds = _bucketed_rows(columns, max_length=max_length,
                        tokens_per_batch=tokens_per_batch, padding_values=[pad_id, 0],
                        num_buckets=num_buckets, shuffle=shuffle, seed=seed, repeat=repeat,
                        what="make_denoising_dataset")

    def noised(index, batch):
        ids, sentences = batch
        if noise == "span_corruption":
            source, target = span_corruption_batch(ids, index, pad_id=pad_id, eos_id=eos_id,
                                                   **noising)
        else:
            source = noise_batch(ids, index, pad_id=pad_id, eos_id=eos_id,
                                 sentence_ids=sentences if permute_sentences else None,
                                 **noising)
            target = tf.cast(ids, tf.int32)
        before = tf.where(tf.equal(target, eos_id), pad_id, target)[:, :-1]
        target_in = tf.concat([tf.fill([tf.shape(target)[0], 1], bos_id), before], axis=1)
        return (source, target_in), target

    ds = ds.enumerate().map(noised, num_parallel_calls=AUTOTUNE, deterministic=True)
    return ds.prefetch(AUTOTUNE)
