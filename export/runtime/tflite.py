"""The signatures of a .tflite model in the ai_edge_litert interpreter: `encode` and
`decode_step` behind the Backend interface (TFLiteBackend), or an encoder-only export's one
function as a callable (TFLiteFunction).

The step's cache lives in the interpreter's own input tensors (`ResidentCache`): the base
class's write and beam reorder work there in place, so no step copies the cache into the
interpreter. The signature runner would resize, re-plan and copy every input at each call: the
cache, which grows with the output, and the encoder's keys/values, which never change. A
language model's export has the `decode_step` signature alone, without the encoder's inputs.
"""

from __future__ import annotations

import os
import weakref

import numpy as np

from ..common import ExportError, Manifest
from ..runtime.base import Backend


def signature_runners(manifest: Manifest, variant: str, names, threads: int | None = None):
    """(interpreter, [runner per signature of `names`]) of one variant's .tflite model; None
    for a signature it lacks (a language model's has no `encode`); ExportError when LiteRT is
    missing or the file does not load."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as err:
        raise ExportError("the tflite runtime needs LiteRT: pip install ai-edge-litert==2.3.0"
                          ) from err
    path = manifest.file(manifest.format_files("tflite", variant)["model"])
    try:
        # LiteRT picks its own default (often one thread); use every core, as onnxruntime and
        # TF do, unless told otherwise.
        interpreter = Interpreter(model_path=str(path), num_threads=threads or os.cpu_count())
        present = interpreter.get_signature_list()
        return interpreter, [interpreter.get_signature_runner(name) if name in present else None
                             for name in names]
    except (ValueError, RuntimeError) as err:
        raise ExportError(f"{path} could not be loaded as a TFLite model: {err}") from err


class TFLiteFunction:
    """The one signature of an encoder-only export's .tflite model (`classify`, `extract`,
    `fill`) as a callable ids -> its output `output`."""

    def __init__(self, manifest: Manifest, variant: str, signature: str,
                 output: str = "probabilities", threads: int | None = None):
        self.output = output
        self.interpreter, (self._runner,) = signature_runners(manifest, variant, [signature],
                                                              threads)
        if self._runner is None:
            raise ExportError(f"{manifest.root}'s {variant} TFLite model has no {signature} "
                              f"signature; export it again")

    def __call__(self, ids):
        return self._runner(ids=ids)[self.output]


class ResidentCache:
    """[keys_0, values_0, ...] (B,H,T,dh) float32, held in the decode_step inputs of one
    interpreter while its search steps. Before its first step, and after another search on
    the same interpreter has taken the inputs, the arrays are held here instead."""

    def __init__(self, backend: TFLiteBackend, arrays: list[np.ndarray]):
        self.backend = backend
        self.pending: list[np.ndarray] | None = arrays
        self.epoch = None  # the backend's allocation whose input tensors hold this cache

    def arrays(self) -> list[np.ndarray]:
        """The cache's arrays: views of the interpreter's tensors while it is installed (not
        to be kept across a step)."""
        if self.pending is not None:
            return self.pending
        return self.backend._cache_views(self)

    def __iter__(self):
        return iter(self.arrays())

    def __getitem__(self, i):
        return self.arrays()[i]

    def __len__(self):
        return len(self.backend._cache_names)


class TFLiteBackend(Backend):
    name = "tflite"

    def __init__(self, manifest: Manifest, variant: str = "float32", threads: int | None = None):
        super().__init__(manifest)
        self.interpreter, (self.encode_runner, step) = signature_runners(
            manifest, variant, ("encode", "decode_step"), threads)
        # decode_step through the interpreter's own wrapper: sized once per search, not per call.
        self._wrapper = self.interpreter._interpreter
        self._subgraph = step._subgraph_index
        self._inputs = dict(step._inputs)
        self._outputs = dict(step._outputs)
        self._epoch = 0
        self._installed = None  # weakref to the ResidentCache held in the step's inputs
        self._memory_set = None  # (memory list, mask) last written into the interpreter
        self._source_shape = None  # memory_mask's shape the inputs are sized for

    def encode(self, source_ids):
        out = self.encode_runner(source_ids=source_ids)
        return [out[name] for name in self._memory_names], out["memory_mask"]

    def init_cache(self, batch, length):
        return ResidentCache(self, list(super().init_cache(batch, length)))

    def cache_from(self, cache):
        return ResidentCache(self, list(super().cache_from(cache)))

    def _cache_views(self, cache: ResidentCache) -> list[np.ndarray]:
        if cache.epoch != self._epoch:
            raise RuntimeError("internal error: a TFLite cache read after it was moved out of "
                               "the interpreter")
        return [self._wrapper.tensor(self._wrapper, self._inputs[name], self._subgraph)
                for name in self._cache_names]

    def _install(self, cache: ResidentCache, tokens, memory, memory_mask) -> None:
        """Size every decode_step input for this search and move the cache into them."""
        current = self._installed() if self._installed is not None else None
        if current is not None and current is not cache and current.pending is None:
            # Another search still holds the inputs: keep its cache outside, so that both
            # searches can go on (interleaved, each re-installs its own).
            current.pending = [view.copy() for view in self._cache_views(current)]
            current.epoch = None
        arrays = cache.pending
        if arrays is None:  # this cache, installed, resized for another source shape
            arrays = [view.copy() for view in self._cache_views(cache)]
        shapes = {"tokens": tokens.shape, "index": ()}
        if memory_mask is not None:  # a language model's step has no encoder inputs
            shapes["memory_mask"] = memory_mask.shape
            shapes.update((n, m.shape) for n, m in zip(self._memory_names, memory, strict=True))
        shapes.update((n, a.shape) for n, a in zip(self._cache_names, arrays, strict=True))
        for name, shape in shapes.items():
            self._wrapper.ResizeInputTensor(self._inputs[name], np.array(shape, np.int32), False,
                                            self._subgraph)
        self._wrapper.AllocateTensors(self._subgraph)
        self._source_shape = None if memory_mask is None else memory_mask.shape
        self._epoch += 1
        cache.epoch, cache.pending = self._epoch, None
        self._installed = weakref.ref(cache)
        self._memory_set = None
        for view, array in zip(self._cache_views(cache), arrays, strict=True):
            view[...] = array

    def _set(self, name, value) -> None:
        self._wrapper.SetTensor(self._inputs[name], value, self._subgraph)

    def decode_step(self, tokens, memory, memory_mask, cache, index):
        if not isinstance(cache, ResidentCache):
            cache = ResidentCache(self, [np.asarray(a, np.float32) for a in cache])
        tokens = np.asarray(tokens, np.int32)
        source_shape = None if memory_mask is None else memory_mask.shape
        if cache.epoch != self._epoch or source_shape != self._source_shape:
            self._install(cache, tokens, memory, memory_mask)
        if memory_mask is not None and (self._memory_set is None
                                        or self._memory_set[0] is not memory
                                        or self._memory_set[1] is not memory_mask):
            # The interpreter keeps its inputs between calls: the encoder's output is
            # written once per search, not once per step.
            for name, array in zip(self._memory_names, memory, strict=True):
                self._set(name, array)
            self._set("memory_mask", memory_mask)
            self._memory_set = (memory, memory_mask)
        self._set("tokens", tokens)
        self._set("index", np.asarray(index, np.int32))
        self._wrapper.Invoke(self._subgraph)
        return (self._wrapper.GetTensor(self._outputs["logits"], self._subgraph),
                self._wrapper.GetTensor(self._outputs["step_key_values"], self._subgraph))
