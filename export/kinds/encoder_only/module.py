"""What every encoder-only export is made of: the float32 rebuild of the trained model and
its one function of token ids as a tf.Module.

The graph takes the ids the training pipeline made (pieces + EOS, right-padded with PAD; an
extractor's article as a grid of such sentences) and returns what the kind's runtimes read;
tokenizing, truncating and reading the outputs run outside it, in NumPy and sentencepiece.
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from ...module import run_model_config


def load_float32(run_dir: Path, trained):
    """A float32 rebuild of a trained encoder-only model: its config from model_config.json
    when the run has one (as for the translator), its head's arguments as trained
    (EncoderBackbone.head_arguments)."""
    head = {name: getattr(trained, name) for name in trained.head_arguments}
    model = type(trained)(run_model_config(run_dir, trained), dtype="float32", **head)
    model.build()
    model.set_weights(trained.get_weights())
    return model


class FunctionModule(tf.Module):
    """`signature`: ids int32 of rank `ids_rank`, every dimension dynamic -> {`output`:
    activation(logits), "logits": logits} float32 (one entry when `output` is "logits")."""

    def __init__(self, model, signature: str, ids_rank: int, output: str, activation,
                 name=None):
        super().__init__(name=name)
        self.model = model
        self.output = output
        self.activation = activation
        # Without the variables tracked directly, the TFLite converter writes no weights.
        self.vars = [v.value for v in model.weights]
        setattr(self, signature, tf.function(self._run, input_signature=[
            tf.TensorSpec([None] * ids_rank, tf.int32, name="ids")]))

    def _run(self, ids):
        logits = self.model(ids, training=False)
        outputs = {"logits": tf.identity(logits, name="logits")}
        if self.output == "logits":
            return outputs
        return {self.output: tf.identity(self.activation(logits), name=self.output), **outputs}
