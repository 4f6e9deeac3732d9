"""encoder.onnx and decoder_step.onnx in onnxruntime.

decoder_step.onnx (export/onnx_graph.py) reads the cross-attention keys/values and the cache
as one head-major (B,H,S or T,dh) array per layer and kind: lists of contiguous NumPy arrays,
which onnxruntime reads without a copy. The base class writes the cache slot of each step in
place. A language model's export has decoder_step.onnx alone, without the encoder's inputs.
A translator's float32 export may also hold search.onnx (export/onnx_search.py): the whole
search in one session.run, which `search_in_runtime` runs instead of the NumPy search; the
stepwise sessions are then made only if something steps (LazySessions).
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping

import numpy as np

from keras_transformer.generation import trimmed

from ..common import ExportError, Manifest
from ..runtime.base import Backend

# onnxruntime's fusion of a residual Add and LayerNormalization into SkipLayerNormalization,
# whose CPU kernel measured 2-6x slower than the pair (export/onnx_optimize.py).
DISABLED_OPTIMIZERS = ["SkipLayerNormFusion"]


def onnxruntime():
    """The onnxruntime module, or ExportError naming the package to install."""
    try:
        import onnxruntime as ort
    except ImportError as err:
        raise ExportError("the onnx runtime needs onnxruntime: pip install onnxruntime==1.31.1"
                          ) from err
    return ort


def session_options(threads: int = 0, spinning: bool = True):
    """onnxruntime SessionOptions: `threads` intra-op threads (0: onnxruntime's choice), quiet;
    without `spinning`, idle workers sleep (a session that runs seldom, beside a busy one)."""
    options = onnxruntime().SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def inference_session(path, options=None):
    """An onnxruntime CPU session of one file, or ExportError saying it could not be loaded."""
    try:
        return onnxruntime().InferenceSession(str(path), options or session_options(),
                                              providers=["CPUExecutionProvider"],
                                              disabled_optimizers=DISABLED_OPTIMIZERS)
    except Exception as err:  # onnxruntime raises its own Fail/InvalidProtobuf types
        raise ExportError(f"{path} could not be loaded by onnxruntime: {err}") from err


class OnnxFunction:
    """An encoder-only export's ONNX graph (role `role`: classifier.onnx, extractor.onnx,
    masked_lm.onnx) as a callable ids -> its output `output`."""

    def __init__(self, manifest: Manifest, variant: str, role: str, threads: int = 0,
                 output: str = "probabilities", spinning: bool = True):
        self.output = output
        self.session = inference_session(
            manifest.file(manifest.format_files("onnx", variant)[role]),
            session_options(threads, spinning))

    def __call__(self, ids):
        return self.session.run([self.output], {"ids": ids})[0]


class LazySessions(MutableMapping):
    """Role -> onnxruntime session, each made by its maker on first use and then kept. Roles
    added with `add` are listed (`in`, iteration) before they are made; `made` names those
    made so far. Thread-safe: `export.serve` searches from several threads."""

    def __init__(self):
        self._made: dict = {}
        self._makers: dict = {}
        self._lock = threading.Lock()

    def add(self, role: str, maker) -> None:
        with self._lock:
            self._made.pop(role, None)
            self._makers[role] = maker

    def made(self) -> list[str]:
        return sorted(self._made)

    def __getitem__(self, role):
        with self._lock:
            if role not in self._made:
                maker = self._makers[role]  # KeyError for a role never added
                self._made[role] = maker()
                del self._makers[role]
            return self._made[role]

    def __setitem__(self, role, session) -> None:
        with self._lock:
            self._makers.pop(role, None)
            self._made[role] = session

    def __delitem__(self, role) -> None:
        with self._lock:
            if role in self._made:
                del self._made[role]
            else:
                del self._makers[role]

    def __contains__(self, role) -> bool:  # Mapping's would make the session to find out
        return role in self._made or role in self._makers

    def __iter__(self):
        return iter([*self._made, *self._makers])

    def __len__(self) -> int:
        return len(self._made) + len(self._makers)


class OnnxBackend(Backend):
    name = "onnx"

    def __init__(self, manifest: Manifest, variant: str = "float32", threads: int = 0,
                 search_graph: bool = True, spinning: bool = True):
        super().__init__(manifest)
        onnxruntime()  # ExportError naming the package, before any file is read
        files = manifest.format_files("onnx", variant)
        self._threads = threads
        self._attention_lock = threading.Lock()
        self.sessions = LazySessions()
        # A language model's export has no encoder.
        for role in [r for r in ("encoder", "decoder_step") if r in files]:
            # Each session has its own thread pool whose idle workers spin waiting for work.
            # The encoder's would spin through the steps that follow it, taking a core from
            # the step's; the encoder runs once per batch, so its workers sleep instead.
            options = session_options(threads, spinning=spinning and role != "encoder")
            path = manifest.file(files[role])
            check = self._check_step if role == "decoder_step" else None
            self.sessions.add(role, lambda path=path, options=options, check=check:
                              self._session(path, options, check))
        if search_graph and "search" in files:
            # The whole search in one session.run (export/onnx_search.py). The stepwise
            # sessions above then serve only the NumPy search (export.parity, the attention
            # explorer) and are made on first use: the search graph holds the decoder's
            # matrices already, and loading them a second time costs memory for nothing.
            self.sessions["search"] = self._session(manifest.file(files["search"]),
                                                    session_options(threads, spinning))
        else:
            self.sessions["decoder_step"]  # made now: a stale export fails here, not mid-search

    @staticmethod
    def _check_step(session, path) -> None:
        names = {i.name for i in session.get_inputs()}
        outputs = {o.name for o in session.get_outputs()}
        if "cache_keys_0" not in names or "log_normalizer" not in outputs:
            raise ExportError(
                f"{path} has the inputs {sorted(names)}, not the per-layer "
                f"cache_keys_l/cache_values_l (and the log_normalizer output) of this "
                f"version; export it again")

    def _session(self, path, options, check=None):
        session = inference_session(path, options)
        if check is not None:
            check(session, path)
        return session

    def attention(self, source_ids, target_ids, selection=None) -> dict[str, np.ndarray]:
        """One sentence pair's attention weights from attention.onnx (an export made with
        --with-attention): source_ids (1,S) ending in EOS and target_ids (1,T), BOS followed
        by the generated tokens -> {"encoder_self": (L,H,S,S), "decoder_self": (L,H,T,T),
        "cross": (L,H,T,S)} float32, and for a copy-attention model "copy" (T,S) and
        "copy_gate" (T,). Row i of the decoder's weights is the step that produced generated
        token i. `selection` (1,S) bool restricts the decoder to the source positions it
        keeps, as the search's (an export from before that input refuses it). The session
        is made on first use, once."""
        with self._attention_lock:
            if "attention" not in self.sessions:
                # Runs once per sentence, between searches whose step pool must keep its cores.
                self.sessions["attention"] = self._session(
                    self.manifest.attention_file(), session_options(self._threads, False))
        names = ("encoder_self", "decoder_self", "cross")
        if self.copy_attention:
            names += ("copy", "copy_gate")
        session = self.sessions["attention"]
        source_ids = np.asarray(source_ids, np.int32).reshape(1, -1)
        feeds = {"source_ids": source_ids,
                 "target_ids": np.asarray(target_ids, np.int32).reshape(1, -1)}
        if "memory_mask" in {i.name for i in session.get_inputs()}:
            feeds["memory_mask"] = (np.ones(source_ids.shape, bool) if selection is None else
                                    np.asarray(selection, bool).reshape(1, -1))
        elif selection is not None:
            raise ExportError(f"{self.manifest.attention_file()} takes no selection: re-export "
                              f"the run with --with-attention")
        return dict(zip(names, session.run(list(names), feeds), strict=True))

    def search_in_runtime(self, source_ids, settings, row_limits=None):
        if "search" not in self.sessions:
            return None
        source_ids = np.asarray(source_ids, np.int32)
        session = self.sessions["search"]
        feeds = {"source_ids": source_ids,
                 "max_length": np.asarray(settings.max_length, np.int32),
                 "beam_size": np.asarray(settings.beam_size, np.int32),
                 "alpha": np.asarray(settings.alpha, np.float64),
                 "no_repeat_ngram_size": np.asarray(settings.no_repeat_ngram_size, np.int32),
                 "min_length": np.asarray(settings.min_length, np.int32)}
        if "row_max_length" in {i.name for i in session.get_inputs()}:
            feeds["row_max_length"] = np.asarray(
                np.full(len(source_ids), settings.max_length) if row_limits is None
                else row_limits, np.int32)
        elif (row_limits is not None and settings.beam_size > 1
              and (np.asarray(row_limits) != settings.max_length).any()):
            return None  # an older search.onnx ends every source at one limit: step in NumPy
        tokens, scores = session.run(["tokens", "scores"], feeds)
        special = self.manifest.special_ids
        return trimmed(tokens, scores, special["eos"], row_limits, special["pad"])

    def encode(self, source_ids):
        *memory, memory_mask = self.sessions["encoder"].run(
            [*self._memory_names, "memory_mask"], {"source_ids": source_ids})
        return memory, memory_mask

    def _run_step(self, outputs, tokens, memory, memory_mask, cache, index):
        feeds = {"tokens": tokens, "index": np.asarray(index, np.int32)}
        if memory_mask is not None:  # a language model's step has no encoder inputs
            feeds["memory_mask"] = memory_mask
            feeds.update(zip(self._memory_names, memory, strict=True))
        feeds.update(zip(self._cache_names, cache, strict=True))
        return self.sessions["decoder_step"].run(outputs, feeds)

    def decode_step(self, tokens, memory, memory_mask, cache, index):
        return self._run_step(["logits", "step_key_values"], tokens, memory, memory_mask,
                              cache, index)

    def decode_step_normalized(self, tokens, memory, memory_mask, cache, index):
        return self._run_step(["logits", "step_key_values", "log_normalizer"], tokens, memory,
                              memory_mask, cache, index)
