"""A run that starts from another run's weights (`training.init_from`): a fine-tuning phase
such as See et al.'s coverage phase, which continues a trained summarizer with one more loss,
or a fine-tune of a pre-trained run (a masked language model's encoder in a classifier or an
extractive summarizer).

The new run takes the old run's tokenizers (the weights mean nothing with another vocabulary)
and its weights, from a saved model (`model.keras`, `average.keras`, ...) or an epoch
checkpoint (`checkpoints/epoch_NNNN.npz`). A model of the same class takes every weight (the
config must build the same weights: a loss weight such as `coverage_loss_weight` may differ, a
layer size may not); a model of another class, or with other weights (a fine-tune), takes the
weights whose names match, like a Hugging Face or keras-hub checkpoint loaded into a task
model. What was loaded, what is new (the task's head) and what was left (the pre-training
head) is logged, and a same-named weight of another shape is refused.
`training.initial_step` starts the learning-rate schedule where the old run's was, so that a
fine-tune continues its decay instead of warming up again; `continue` reads that step from the
old run's metrics.json, so that a recipe keeps continuing on a CPU that gave the old run more
steps. Adam's moments start afresh, unless `training.init_optimizer` takes those saved with a
.keras file of the same model (epoch checkpoints hold no optimizer state).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from pathlib import Path

from keras_transformer.models.presets import load_by_name, local_name

from .accumulation import set_updates
from .callbacks import load_weights_npz
from .config import RunConfig, load_config
from .run_directory import TOKENIZER_FILES
from .tasks import WORD_JOINT_TASKS


def weights_file(config: RunConfig, out: Path | None = None) -> Path | None:
    """The file training.init_from names (a run directory means its model.keras), checked:
    None when it is not set. With `out`, the new run's directory, also refused when the file
    belongs to that directory, which the new run would replace (checked before it does)."""
    given = config.training.init_from
    if not given:
        return None
    path = Path(given)
    if path.is_dir():
        path = path / "model.keras"
    if not path.is_file():
        raise FileNotFoundError(f"training.init_from: {path} not found; give a run directory, "
                                f"a model file in it (model.keras, average.keras) or one of "
                                f"its checkpoints/epoch_NNNN.npz")
    if path.suffix not in (".keras", ".npz"):
        raise ValueError(f"training.init_from: {path} is neither a .keras model nor an epoch "
                         f"checkpoint (.npz)")
    run = source_run(path)
    if out is not None and run.resolve() == Path(out).resolve():
        raise ValueError(f"training.init_from names a file of the run directory itself ({out}); "
                         f"start the new run in another --out")
    check_text_reading(config, run)
    return path


def check_text_reading(config: RunConfig, run: Path) -> None:
    """A ValueError when the run the weights come from read its text otherwise than this run
    will: in another case (data.lowercase), or with VNDS's word joints kept where this run
    splits them or the reverse (data.word_joints, where both tasks read them). Its tokenizer
    and weights know the pieces of that text only, and the fine-tune would read mostly unknown
    pieces without an error."""
    if not (run / "config.yaml").is_file():
        return
    source = load_config(run / "config.yaml")
    case = source.data.lowercase
    if case != config.data.lowercase:
        said = str(case).lower()
        raise ValueError(f"training.init_from: {run} read its text "
                         f"{'lower-cased' if case else 'as written'} (data.lowercase {said}); "
                         f"set data.lowercase: {said} so that this run reads text as it did")
    joints = source.data.word_joints
    if (joints != config.data.word_joints
            and {source.task, config.task} <= set(WORD_JOINT_TASKS)):
        raise ValueError(f"training.init_from: {run} read VNDS's word joints as "
                         f"data.word_joints: {joints}; set data.word_joints: {joints} so that "
                         f"this run reads text as it did")


def source_run(weights: Path) -> Path:
    """The run directory a weights file belongs to: the nearest folder, its own or its
    parent's (for checkpoints/), that holds the run's tokenizer."""
    for folder in (weights.parent, weights.parent.parent):
        if any((folder / name).is_file() for name in TOKENIZER_FILES if name.endswith(".model")):
            return folder
    raise FileNotFoundError(f"training.init_from: no spm.model beside {weights} or in its "
                            f"parent folder; give a file inside a trained run's directory")


def initial_step(given: int | str, weights: Path | None) -> int:
    """The schedule's first step: `given`, or with "continue" the step `weights` (the file
    training.init_from names) were saved at, from their run's metrics.json (`best_step` for
    best.keras, `epoch_steps` for an epoch checkpoint, the run's last step for model.keras and
    average.keras)."""
    if given != "continue":
        return int(given)
    if weights is None:
        raise ValueError("training.initial_step: continue takes the step of the weights "
                         "training.init_from names; set training.init_from (the run to "
                         "continue), or give the step as a number")
    metrics_file = source_run(weights) / "metrics.json"
    fix = "give the step as a number (training.initial_step: N)"
    try:
        metrics = json.loads(metrics_file.read_text())
        if not isinstance(metrics, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError):
        raise ValueError(f"training.initial_step: continue reads the step from {metrics_file}, "
                         f"which is missing or unreadable (the run has not finished); {fix}") from None
    epoch = re.fullmatch(r"epoch_(\d+)\.npz", weights.name)
    if epoch:
        steps, index = metrics.get("epoch_steps", []), int(epoch.group(1)) - 1
        step = steps[index] if 0 <= index < len(steps) else None
    else:
        step = metrics.get("best_step" if weights.name == "best.keras" else "steps")
    if not isinstance(step, int):
        raise ValueError(f"training.initial_step: continue found no step for {weights.name} in "
                         f"{metrics_file}; {fix}")
    return step


def copy_tokenizers(weights: Path, out: Path) -> None:
    """The old run's tokenizer files, copied into the new run's directory."""
    run = source_run(weights)
    for name in TOKENIZER_FILES:
        if (run / name).is_file():
            shutil.copyfile(run / name, out / name)


def load_source_model(weights: Path):
    import keras

    import keras_transformer  # noqa: F401  (registers the layers the file names)

    return keras.saving.load_model(weights, compile=False)


def start_from(model, weights: Path, initial_step: int,
               optimizer_state: bool = False) -> dict | None:
    """Set `model`'s weights from `weights` and its optimizer's step count to initial_step.
    From a saved model of another class, or of this class with other weights (a denoising
    run without copy attention into a summarizer with it): the weights that match by name
    (load_by_name). Otherwise every weight, in order. The report of what was loaded, new and
    left ({"loaded", "new", "left"}) is returned; None from an epoch checkpoint, which holds
    no names. With `optimizer_state`, the optimizer's variables saved with `weights` too
    (load_optimizer_state), which needs a .keras file of this very model."""
    report = None
    if weights.suffix == ".npz":
        if optimizer_state:
            raise ValueError(f"training.init_optimizer: {weights} is an epoch checkpoint, "
                             f"which holds no optimizer state; give the run's model.keras")
        values = load_weights_npz(weights)
    else:
        source = load_source_model(weights)
        names = [local_name(v) for v in model.weights]
        if type(source) is not type(model) or [local_name(v) for v in source.weights] != names:
            if optimizer_state:
                raise ValueError(f"training.init_optimizer continues the same model, and "
                                 f"{weights} holds another ({type(source).__name__}, "
                                 f"{len(source.weights)} weights); drop training.init_optimizer "
                                 f"for a fine-tune")
            report = load_by_name(model, source, f"training.init_from: {weights}")
            set_updates(model.optimizer, initial_step)
            return report
        values = source.get_weights()
        report = {"loaded": names, "new": [], "left": []}
    have = [tuple(w.shape) for w in model.get_weights()]
    given = [tuple(v.shape) for v in values]
    if have != given:
        if len(have) != len(given):
            where = f"{len(given)} weights against {len(have)}"
        else:
            first = next(i for i, (a, b) in enumerate(zip(have, given, strict=True)) if a != b)
            where = f"weight {first}: {given[first]} against {have[first]}"

        raise ValueError(f"training.init_from: {weights} holds another model's weights "
                         f"({where}); the config must build the model it was trained as")
    model.set_weights(values)
    if optimizer_state:
        load_optimizer_state(model, weights)
    set_updates(model.optimizer, initial_step)
    return report


def load_optimizer_state(model, weights: Path) -> None:
    """Set `model.optimizer`'s variables (its step count, Adam's moments) from those Keras
    saved in the .keras file `weights`, one for one in order: a run with the same weights and
    the same optimizer settings (precision's loss scaling and gradient accumulation add
    variables) saved them, else a ValueError that says which differs."""
    optimizer = model.optimizer
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    try:
        saved = saved_optimizer_variables(weights)
    except (OSError, KeyError, zipfile.BadZipFile) as err:
        raise ValueError(f"training.init_optimizer: cannot read the optimizer state in "
                         f"{weights} ({err})") from err
    if not any(value.ndim for value in saved):  # at most its step count and rate: no moments
        raise ValueError(f"training.init_optimizer: {weights} holds no optimizer state (saved "
                         f"before training, or without its optimizer); drop "
                         f"training.init_optimizer")
    have = [tuple(v.shape) for v in optimizer.variables]
    given = [tuple(v.shape) for v in saved]
    if have != given:
        raise ValueError(f"training.init_optimizer: the optimizer saved in {weights} has "
                         f"{len(given)} variables, this run's {len(have)} (another precision's "
                         f"loss scaling or training.accumulate_steps?); train with the old "
                         f"run's settings, or drop training.init_optimizer")
    for variable, value in zip(optimizer.variables, saved, strict=True):
        variable.assign(value)


def saved_optimizer_variables(weights: Path) -> list:
    """The optimizer's variables Keras saved in the .keras file `weights`, in its order (the
    step count first, then Adam's two moments of each trainable weight); [] when none."""
    import h5py

    with zipfile.ZipFile(weights) as archive:
        data = archive.read("model.weights.h5")
    with h5py.File(io.BytesIO(data), "r") as store:
        group = store.get("optimizer/vars")
        return [group[str(i)][()] for i in range(len(group))] if group is not None else []
