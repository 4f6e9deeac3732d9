"""The self-attention key/value cache of incremental decoding.

`layout` (NumPy and the standard library only) owns the layout every runtime shares; `tensors`
writes it with Keras ops inside a model's graph; `variables` keeps it in TF variables written
in place. Importing this package imports neither TensorFlow nor Keras.
"""
