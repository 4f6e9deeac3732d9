"""What the encoder-only kinds read of a training run besides its model: its tokenizer and how
it read its text."""

from __future__ import annotations

from pathlib import Path

from keras_transformer.text.tokenizer import SentencePieceTokenizer

from ...module import run_config

TOKENIZER = "spm.model"


def run_tokenizer(run_dir: Path, what: str) -> SentencePieceTokenizer:
    """The run's spm.model, loaded; FileNotFoundError or ValueError saying what is wrong with
    it (`what` names the run's task in the message)."""
    tokenizer_path = run_dir / TOKENIZER
    if not tokenizer_path.is_file():
        raise FileNotFoundError(f"{tokenizer_path} is missing: is {run_dir} a finished "
                                f"{what} run?")
    try:
        return SentencePieceTokenizer(tokenizer_path)
    except Exception as err:  # sentencepiece raises RuntimeError/OSError on a bad file
        raise ValueError(f"{tokenizer_path} is not a valid SentencePiece model: "
                         f"{' '.join(str(err).split())[:200]}") from err


def run_word_joints(run_dir: Path) -> str:
    """The run's data.word_joints (keep or split): how the runtimes read an article."""
    data = run_config(run_dir).get("data")
    mode = data.get("word_joints", "keep") if isinstance(data, dict) else "keep"
    if mode not in ("keep", "split"):
        raise ValueError(f"{run_dir / 'config.yaml'}: data.word_joints is {mode!r}, not keep "
                         f"or split")
    return mode


def run_lowercase(run_dir: Path) -> bool:
    """The run's data.lowercase: whether the runtimes lower-case a line before reading it."""
    data = run_config(run_dir).get("data")
    value = data.get("lowercase", False) if isinstance(data, dict) else False
    if not isinstance(value, bool):
        raise ValueError(f"{run_dir / 'config.yaml'}: data.lowercase is {value!r}, not true "
                         f"or false")
    return value
