"""The runtimes of an export directory, one module per format (`onnx`, `tflite`, `tf` for the
SavedModel and the run's Keras model), and what a user runs over one (`base`: Translator,
Generator; `classifier`: Classifier; `extractor`: Summarizer; `masked_lm`: FillMask). An export's
kind (export/kinds/) picks among them: this package knows no kind and imports none.

`onnx` and `tflite` need only NumPy, sentencepiece and their own runtime package;
`savedmodel` and `keras` import TensorFlow when chosen.
"""
