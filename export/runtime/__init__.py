"""The runtimes of an export directory, one module per format (`onnx`, `tflite`, `tf` for the
SavedModel and the run's Keras model), and what a user runs over one (`base`: Translator,
Generator; `classifier`: Classifier; `extractor`: Summarizer; `masked_lm`: FillMask). An export's
kind (export/kinds/) picks among them: this package knows no kind and imports none.

`onnx` and `tflite` need only NumPy, sentencepiece and their own runtime package;
`savedmodel` and `keras` import TensorFlow when chosen.
"""

import os
from typing import NamedTuple


class Threads(NamedTuple):
    """The threads a runtime (onnx, tflite) runs a model on: `count` (0: the runtime's own
    choice, one per core) and, for onnxruntime, whether idle ones spin waiting for the next
    node (fastest for one caller alone; a server's event loop and its other workers need the
    cores between batches, so export.api's sleep)."""

    count: int = 0
    spinning: bool = True


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
