"""Decoder-only Transformer (the GPT shape): causal self-attention, no cross-attention."""

from __future__ import annotations

import keras
import numpy as np

from keras_transformer.compiled import inference_function
from keras_transformer.config import TransformerConfig
from keras_transformer.decoding import SearchSettings, sample_search
from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.embedding import PositionalEmbedding
from keras_transformer.models.presets import FromPreset
from keras_transformer.models.transformer import as_config, check_ids, stack_options, vocab_logits


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerLM(FromPreset, keras.Model):
    """ids (B,T) int -> next-token logits (B,T,V) float32 (uses the target-side config).

    Args:
        config: `TransformerConfig`, or its `to_dict()`; the target vocabulary and length, the
            decoder sizes and the special ids are read from it. Defaults to `None`,
            `TransformerConfig()`.
        **kwargs: other `keras.Model` arguments (`name`, `dtype` for a mixed-precision policy).

    Example:

    ```python
    config = TransformerConfig.preset("tiny", target_vocab_size=8000)
    model = TransformerLM(config)
    logits = model(ids)  # (B, T, 8000)
    ```
    """

    def __init__(self, config: TransformerConfig | dict | None = None, **kwargs):
        super().__init__(**kwargs)
        self.config = as_config(config)
        c = self.config
        policy = self.dtype_policy
        self.embedding = PositionalEmbedding(c.target_vocab_size, c.d_model, c.max_target_length,
                                             c.positional, c.dropout, dtype=policy,
                                             name="embedding")
        self.decoder = Decoder(c.num_decoder_layers, cross_attention=False, name="decoder",
                               **stack_options(c, policy))
        self.output_projection = (
            None if c.tie_output
            else keras.layers.Dense(c.target_vocab_size, dtype=policy, name="output_projection")
        )
        self._compiled_step = None

    def build(self, input_shape=None):
        self.embedding.build((None, None))
        self.decoder.build((None, None, self.config.d_model))
        if self.output_projection is not None:
            self.output_projection.build((None, None, self.config.d_model))
        self.built = True

    def logits(self, hidden):
        """Decoder states (..., d_model) -> float32 logits (..., V)."""
        return vocab_logits(hidden, self.embedding, self.output_projection)

    def call(self, ids, training=None):
        check_ids(ids, "ids")
        return self.logits(self.decoder(self.embedding(ids, training=training),
                                        training=training))

    def init_cache(self, batch_size, max_length=None):
        """Zeros [keys_0, values_0, keys_1, ...], each (B, H, max_length, d_model/H)."""
        return self.decoder.init_cache(batch_size, max_length or self.config.max_target_length,
                                       self.compute_dtype)

    def decode_step(self, tokens, cache, index):
        """tokens (B,) at position `index` -> logits (B,V) float32, updated cache."""
        x = self.embedding(tokens[:, None], start_index=index, training=False)
        hidden, cache = self.decoder.step(x, cache, index)
        return self.logits(hidden[:, 0, :]), cache

    def generate(self, prompts: list[list[int]], max_new_tokens: int,
                 settings: SearchSettings | None = None, *, temperature: float | None = None,
                 top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, eos_id: int | None = None) -> list[list[int]]:
        """Continue each prompt: greedy (temperature 0), top-k or top-p (nucleus) sampling
        (decoding.sample_search over this model's cached step); -> the new tokens of each,
        up to and including EOS.

        The search is `settings` (its temperature, top_k, top_p, seed, no_repeat_ngram_size
        and min_length), or the keywords, whose defaults are temperature 1, top_k 0 (off),
        top_p 1 (off) and seed 0; not both.
        """
        keywords = {name: value for name, value in (("temperature", temperature),
                                                    ("top_k", top_k), ("top_p", top_p),
                                                    ("seed", seed)) if value is not None}
        if settings is None:
            settings = SearchSettings(**{"temperature": 1.0, "seed": 0, **keywords})
        elif keywords:
            raise ValueError(f"give the search as settings or as keywords, not both: "
                             f"{', '.join(keywords)} given beside settings")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token (e.g. the BOS id)")
        eos_id = self.config.eos_id if eos_id is None else eos_id
        total = max(len(p) for p in prompts) + max_new_tokens
        if total > self.config.max_target_length:
            raise ValueError(
                f"prompt + max_new_tokens = {total} tokens exceeds max_target_length "
                f"{self.config.max_target_length}; generate fewer tokens or raise it in the config")
        if self._compiled_step is None:
            self._compiled_step = inference_function(self, self.decode_step)
        cache = self.init_cache(len(prompts), total)

        def step(tokens, index):
            nonlocal cache
            logits, cache = self._compiled_step(
                keras.ops.convert_to_tensor(np.asarray(tokens, np.int32)), cache,
                keras.ops.convert_to_tensor(np.int32(index)))
            return keras.ops.convert_to_numpy(logits)

        return sample_search(step, prompts, max_new_tokens, eos_id=eos_id,
                             temperature=settings.temperature, top_k=settings.top_k,
                             top_p=settings.top_p, seed=settings.seed,
                             no_repeat_ngram_size=settings.no_repeat_ngram_size,
                             min_length=settings.min_length, pad_id=self.config.pad_id)

    def get_config(self):
        config = super().get_config()
        config["config"] = self.config.to_dict()
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
