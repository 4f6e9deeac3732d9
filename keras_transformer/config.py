"""TransformerConfig: every size of the model in one dataclass, with the paper's presets."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

POSITIONAL_KINDS = ("sinusoidal", "learned")


@dataclass
class TransformerConfig:
    """Sizes and switches of the encoder-decoder Transformer (and its one-stack variants).

    The defaults are the paper's base model; `TransformerConfig.preset` gives the named sizes.
    Every value is checked on construction (`validate`).

    Args:
        source_vocab_size: int. Source token ids; defaults to `8000`.
        target_vocab_size: int. Target token ids; defaults to `8000`.
        d_model: int. Model width; defaults to `512`.
        num_heads: int. Attention heads, dividing `d_model`; defaults to `8`.
        d_ff: int. Inner width of the feed-forward networks; defaults to `2048`.
        num_encoder_layers: int. Encoder layers; defaults to `6`.
        num_decoder_layers: int. Decoder layers; defaults to `6`.
        dropout: float in [0, 1). Residual and embedding dropout rate; defaults to `0.1`.
        attention_dropout: float in [0, 1). Dropout on attention weights; defaults to `0.0`.
        max_source_length: int. Longest source, in tokens; defaults to `256`.
        max_target_length: int. Longest target, in tokens; defaults to `256`.
        positional: `"sinusoidal"` (the default) or `"learned"` position embeddings.
        pre_norm: bool. Pre-LN instead of the paper's post-LN; defaults to `False`.
        share_embeddings: bool. One token matrix for source and target (needs equal
            vocabularies); defaults to `False`.
        tie_output: bool. The target embedding, transposed, is the output projection;
            defaults to `True`.
        layer_norm_epsilon: float. LayerNorm epsilon; defaults to `1e-6`.
        copy_attention: bool. The output mixes the vocabulary softmax with the last decoder
            layer's attention over the source's own ids (a pointer-generator,
            `keras_transformer.layers.copy_attention`); needs `share_embeddings`, one
            vocabulary for source and target. Defaults to `False`.
        copy_head: int. The cross-attention head whose weights are the copy distribution, or
            `-1` (the default) for the heads' mean.
        coverage_loss_weight: float >= 0. With copy attention, adds See et al.'s coverage loss
            sum_i min(a_t,i, c_t,i), c_t the sum of the copy distributions of the earlier
            target positions, times this weight, to the training loss (it penalises
            attending again where the summary has already been); `0.0` (the default): off.
        pad_id: int. Padding id; defaults to `0`.
        bos_id: int. Start-of-sequence id; defaults to `2`.
        eos_id: int. End-of-sequence id; defaults to `3`.

    Example:

    ```python
    config = TransformerConfig.preset("small", source_vocab_size=8000, target_vocab_size=8000,
                                      dropout=0.2)
    config.to_dict()  # a dict that TransformerConfig.from_dict turns back into it
    ```
    """

    source_vocab_size: int = 8000
    target_vocab_size: int = 8000
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    max_source_length: int = 256
    max_target_length: int = 256
    positional: str = "sinusoidal"
    pre_norm: bool = False
    share_embeddings: bool = False
    tie_output: bool = True
    layer_norm_epsilon: float = 1e-6
    copy_attention: bool = False
    copy_head: int = -1
    coverage_loss_weight: float = 0.0
    pad_id: int = 0
    bos_id: int = 2
    eos_id: int = 3

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field and the fix for any inconsistent setting."""
        for name in (
            "source_vocab_size",
            "target_vocab_size",
            "d_model",
            "num_heads",
            "d_ff",
            "max_source_length",
            "max_target_length",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("num_encoder_layers", "num_decoder_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads}): "
                f"each head gets d_model / num_heads dimensions. Try num_heads in "
                f"{[h for h in range(1, min(self.d_model, 32) + 1) if self.d_model % h == 0]}."
            )
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= float(value) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        if self.positional not in POSITIONAL_KINDS:
            raise ValueError(f"positional must be one of {POSITIONAL_KINDS}, got {self.positional!r}")
        if self.share_embeddings and self.source_vocab_size != self.target_vocab_size:
            raise ValueError(
                "share_embeddings=True needs one joint vocabulary, but source_vocab_size="
                f"{self.source_vocab_size} and target_vocab_size={self.target_vocab_size}. "
                "Train a joint tokenizer or set share_embeddings=False."
            )
        if self.copy_attention:
            if not self.share_embeddings:
                raise ValueError(
                    "copy_attention=True copies source ids into the output, so it needs one "
                    "vocabulary for both sides: set share_embeddings=True (and a joint "
                    "tokenizer) or copy_attention=False")
            if self.num_decoder_layers < 1:
                raise ValueError("copy_attention=True reads the last decoder layer's "
                                 "attention: num_decoder_layers must be at least 1")
        if not float(self.coverage_loss_weight) >= 0.0 or not math.isfinite(
                float(self.coverage_loss_weight)):
            raise ValueError(f"coverage_loss_weight must be a finite number >= 0, got "
                             f"{self.coverage_loss_weight!r}")
        if self.coverage_loss_weight and not self.copy_attention:
            raise ValueError("coverage_loss_weight covers the copy distribution: set "
                             "copy_attention=True, or coverage_loss_weight=0")
        if not isinstance(self.copy_head, int) or not -1 <= self.copy_head < self.num_heads:
            raise ValueError(f"copy_head must be -1 (the heads' mean) or a head in "
                             f"[0, {self.num_heads}), got {self.copy_head!r}")
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        if len(set(ids.values())) != 3:
            raise ValueError(f"pad_id, bos_id and eos_id must differ, got {ids}")
        for name, value in ids.items():
            if not 0 <= value < min(self.source_vocab_size, self.target_vocab_size):
                raise ValueError(f"{name}={value} is outside the vocabulary")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """The config ``to_dict`` gives, read back; keys in ``_IGNORED`` are dropped."""
        values = {k: v for k, v in values.items() if k not in _IGNORED}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TransformerConfig keys {unknown}; known keys: {sorted(known)}")
        return cls(**values)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """A named size (tiny, small, base, big) with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> TransformerConfig:
        return dataclasses.replace(self, **changes)


# Keys a model_config.json or model.keras may hold that no field reads: dropped when read.
_IGNORED = frozenset({"extra"})

PRESETS: dict[str, dict[str, Any]] = {
    # For tests and the embedded demo: trains in minutes on a laptop CPU.
    "tiny": dict(d_model=64, num_heads=4, d_ff=256, num_encoder_layers=2, num_decoder_layers=2),
    "small": dict(d_model=256, num_heads=4, d_ff=1024, num_encoder_layers=3, num_decoder_layers=3),
    # Table 3 of the paper, "base" and "big".
    "base": dict(d_model=512, num_heads=8, d_ff=2048, num_encoder_layers=6, num_decoder_layers=6),
    "big": dict(
        d_model=1024, num_heads=16, d_ff=4096, num_encoder_layers=6, num_decoder_layers=6,
        dropout=0.3,
    ),
}
