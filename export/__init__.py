"""Export a trained Transformer (SavedModel, ONNX, TFLite) and run it without TensorFlow.

Importing this package, ``export.translate`` or ``export.runtime`` loads neither TensorFlow
nor Keras: a deployment that only has onnxruntime, NumPy, sentencepiece and tqdm can use them.
The exporters (``python -m export``) and the SavedModel/Keras runtimes import TensorFlow when
they are chosen.
"""

# The kinds' registry, handed to export.common before any manifest is read (common cannot
# import it: the kinds import common).
from . import kinds  # noqa: E402, F401
