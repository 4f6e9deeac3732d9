"""Translation: parallel sentence pairs, an encoder-decoder Transformer, BLEU and chrF."""

from __future__ import annotations

import logging
from pathlib import Path

from keras_transformer.file_safety import atomic_write_text
from keras_transformer.text.buckets import bucket_boundaries_for, count_too_long
from keras_transformer.text.lines import read_lines
from keras_transformer.translator import translate

from ..data import Split, load_corpus
from ..scoring import bleu_chrf, fitting_mask, fitting_pairs, score_translations
from ..shards import check_pairs, scan_shards, shard_files
from ..tasks.base import DevScore, final_split, score_prefix, transformer_config
from ..tasks.seq2seq import Seq2SeqTask
from ..tokenizers import build_tokenizers

log = logging.getLogger("train")


class TranslationTask(Seq2SeqTask):
    """data.corpus demo, parallel or tsv (train.data); scored on dev and test with sacreBLEU."""

    def prepare(self, out: Path):
        config, d = self.config, self.config.data
        self.corpus = corpus = load_corpus(d)
        self.shards = None
        train = corpus.train
        if d.stream:
            # The training pairs are read as training consumes them; this pass checks and
            # counts them and draws the tokenizer's sample (train.shards).
            self.shards = scan_shards(shard_files(d), config.tokenizer.sample_sentences,
                                      d.seed, self.part)
            self.reads_part = True  # each worker reads its part of the shards
            train = Split(self.shards.sample_sources, self.shards.sample_targets)
            log.info("streamed training pairs: %d in %d shards%s (%d empty lines dropped); "
                     "the tokenizer and the too-long count use a sample of %d",
                     self.shards.pairs, len(self.shards.files),
                     f", worker {self.part[1]} of {self.part[0]}'s part" if self.part[0] > 1
                     else "", self.shards.dropped_empty, len(train))
        log.info("corpus: %s%d dev, %s test pairs (%d empty lines dropped)",
                 "" if self.shards else f"{len(train)} train, ", len(corpus.dev),
                 len(corpus.test) if corpus.test else 0, corpus.dropped_empty)
        self.source_tok, self.target_tok = build_tokenizers(config, train.sources,
                                                            train.targets, out)
        limits = dict(max_source_length=d.max_source_length,
                      max_target_length=d.max_target_length)
        self.too_long = count_too_long(train.sources, train.targets, self.source_tok,
                                       self.target_tok, **limits) if len(train) else 0
        log.info("%d of %d training pairs%s are longer than max_source_length=%d / "
                 "max_target_length=%d tokens and are left out", self.too_long, len(train),
                 " (of the sample)" if self.shards else "", d.max_source_length,
                 d.max_target_length)
        dev_too_long = count_too_long(corpus.dev.sources, corpus.dev.targets, self.source_tok,
                                      self.target_tok, **limits)
        for split, count, total in (("training", self.too_long, len(train) or 1),
                                    ("dev", dev_too_long, len(corpus.dev))):
            if count == total:  # an empty stream: training would wait forever for a batch
                raise ValueError(
                    f"all {total} {split} pairs are longer than data.max_source_length="
                    f"{d.max_source_length} / data.max_target_length={d.max_target_length} "
                    f"tokens (EOS included); raise them")
        # Batches pad source and target to one bucket length, so both tables cover the longer.
        longest = max(d.max_source_length, d.max_target_length)
        self.model_config = transformer_config(config, self.source_tok, self.target_tok,
                                               max_source_length=longest,
                                               max_target_length=longest)
        return self.model_config

    def combine_parts(self, total) -> None:
        if self.shards is not None:
            self.shards.pairs, self.shards.dropped_empty = total(
                [self.shards.pairs, self.shards.dropped_empty])
            check_pairs(self.shards)
            if self.part[0] > 1:
                log.info("streamed training pairs of all workers: %d (%d empty lines dropped)",
                         self.shards.pairs, self.shards.dropped_empty)

    def datasets(self):
        d, corpus = self.config.data, self.corpus
        longest = max(d.max_source_length, d.max_target_length)
        if self.shards is not None:
            return self.stream_datasets(
                self.shards, (corpus.dev.sources, corpus.dev.targets),
                max_source_length=d.max_source_length, max_target_length=d.max_target_length,
                tokens_per_batch=d.tokens_per_batch,
                bucket_boundaries=bucket_boundaries_for(longest, d.num_buckets))
        return self.pair_datasets(
            (corpus.train.sources, corpus.train.targets), (corpus.dev.sources, corpus.dev.targets),
            max_source_length=d.max_source_length, max_target_length=d.max_target_length,
            tokens_per_batch=d.tokens_per_batch,
            bucket_boundaries=bucket_boundaries_for(longest, d.num_buckets))

    def dev_score(self):
        e = self.config.eval
        if not e.dev_score_sentences:
            return None
        dev = self.corpus.dev
        sources, references, _ = fitting_pairs(dev.sources[: e.dev_score_sentences],
                                               dev.targets[: e.dev_score_sentences],
                                               self.source_tok,
                                               self.model_config.max_source_length)

        settings = self.search_settings(beam_size=e.dev_score_beam)

        def score(model):
            hypotheses = translate(model, self.source_tok, self.target_tok, sources, settings,
                                   batch_size=e.batch_size)
            return bleu_chrf(hypotheses, references)["bleu"]

        return DevScore(score, {"dev_score_sentences": min(e.dev_score_sentences, len(dev))})

    def data_metrics(self):
        if self.shards is not None:  # the too-long count is the sample's
            return {"streamed_train_pairs": self.shards.pairs, "stream_shards":
                    len(self.shards.files), "too_long_dropped_in_sample": self.too_long,
                    "empty_dropped": self.corpus.dropped_empty + self.shards.dropped_empty}
        return {"too_long_dropped": self.too_long, "empty_dropped": self.corpus.dropped_empty}

    def evaluate(self, model, out: Path, strategy, metrics: dict) -> None:
        e, corpus = self.config.eval, self.corpus
        max_source_length = self.model_config.max_source_length
        last = final_split(corpus.test is not None)
        for name, split in (("dev", corpus.dev), ("test", corpus.test)):
            if split is None:
                continue
            sources, references = split.sources, split.targets
            if e.max_sentences:
                sources, references = sources[: e.max_sentences], references[: e.max_sentences]
            sources, references, skipped = fitting_pairs(sources, references, self.source_tok,
                                                         max_source_length)
            if skipped:
                log.info("%s: %d sentences longer than max_source_length=%d tokens are not "
                         "scored", name, skipped, max_source_length)
                metrics[f"{name}_skipped_too_long"] = skipped
            # The scored sentences, so that `train.evaluate` can score other weights on them
            # (e.g. averaged checkpoints) after the run.
            for suffix, lines in (("src", sources), ("ref", references)):
                atomic_write_text(out / f"{name}.{suffix}", "".join(f"{x}\n" for x in lines))
            scores = score_translations(model, self.source_tok, self.target_tok, sources,
                                        references, self.search_settings(),
                                        batch_size=e.batch_size,
                                        hypotheses_path=out / f"{name}.hyp")
            prefix = score_prefix(name, last, metrics)
            metrics.update({f"{prefix}{k}": v for k, v in scores.items()})
            print(f"{name}: BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  "
                  f"({len(sources)} sentences, beam {e.beam_size})")
            print(f"  {scores['sacrebleu_signature']}")
            if name == last:
                hypotheses = read_lines(out / f"{name}.hyp")
                for src, hyp, ref in list(zip(sources, hypotheses, references, strict=True))[
                        : e.samples]:
                    print(f"  EN  {src}\n  OUT {hyp}\n  REF {ref}")

    def scorable(self, sources, max_source_length):
        # Sentences longer than the model are left out (train.scoring.fitting_mask), as the
        # run's own dev and test scores leave them out.
        return fitting_mask(sources, self.source_tok, max_source_length)

    def generate(self, model, sources, progress=None):
        return translate(model, self.source_tok, self.target_tok, sources,
                         self.search_settings(), batch_size=self.config.eval.batch_size,
                         progress=progress)

    def score(self, hypotheses, references, sources):
        scores = bleu_chrf(hypotheses, references)
        return scores, [f"BLEU {scores['bleu']:.2f}  {scores['sacrebleu_signature']}",
                        f"chrF {scores['chrf']:.2f}  {scores['chrf_signature']}"]

