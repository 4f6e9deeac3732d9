"""training.warmup_fraction: a run planned for fewer steps than its warm-up reaches the
recipe's peak rate at that fraction of the plan and decays after it (train.warmup)."""

import math
from pathlib import Path

import numpy as np
import pytest

from train.config import ConfigError, load_config
from train.warmup import make_schedule, planned_steps, schedule_warmup

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "train" / "configs" / "demo.yaml"


def paper_rate(step: int, d_model: int, warmup: int, scale: float) -> float:
    """Section 5.3's rate at step_num = step + 1 (the optimizer counts from 0)."""
    n = step + 1
    return scale * d_model**-0.5 * min(n**-0.5, n * warmup**-1.5)


def rates(schedule, steps: int) -> np.ndarray:
    return np.asarray(schedule(np.arange(steps)), np.float64)


def test_a_short_plan_peaks_at_its_highest_former_rate_inside_the_plan_and_decays():
    training = load_config(DEMO, ["training.warmup_fraction=0.25"]).training
    assert (training.warmup_steps, training.lr_scale) == (1000, 2.0)
    # Without the fraction, the demo's 426 steps end still climbing, at 42.6% of the peak.
    plain = rates(make_schedule(load_config(DEMO, ["training.warmup_fraction=0"]).training,
                                128, 426), 426)
    np.testing.assert_allclose(plain, [paper_rate(s, 128, 1000, 2.0) for s in range(426)],
                               rtol=1e-5)
    assert np.all(np.diff(plain) > 0)
    highest = plain[-1]

    warmup, scale = schedule_warmup(training, 426)
    assert warmup == 107  # ceil(0.25 * 426)
    short = rates(make_schedule(training, 128, 426), 426)
    np.testing.assert_allclose(short, [paper_rate(s, 128, 107, scale) for s in range(426)],
                               rtol=1e-5)
    # Its peak, at step_num 107, is the highest rate the plain run reached (its last)...
    assert int(short.argmax()) == 106 and short.max() == pytest.approx(highest, rel=1e-5)
    # ...and from there the inverse square root: at the plan's end sqrt(107 / 426) of it.
    assert short[-1] == pytest.approx(highest * math.sqrt(107 / 426), rel=1e-5)


def test_a_plan_past_the_warmup_but_short_keeps_the_recipes_peak():
    training = load_config(DEMO, ["training.warmup_fraction=0.25"]).training
    warmup, scale = schedule_warmup(training, 2000)
    assert warmup == 500
    short = rates(make_schedule(training, 128, 2000), 2000)
    recipe_peak = 2.0 * 128**-0.5 * 1000**-0.5
    assert int(short.argmax()) == 499 and short.max() == pytest.approx(recipe_peak, rel=1e-5)


def test_a_plan_that_holds_the_warmup_or_no_fraction_keeps_the_config():
    training = load_config(DEMO, ["training.warmup_fraction=0.25"]).training
    assert schedule_warmup(training, 4000) == (1000, 2.0)  # 0.25 * 4000 = the warm-up
    assert schedule_warmup(training, 100_000) == (1000, 2.0)
    assert schedule_warmup(training, None) == (1000, 2.0)  # plan unknown
    warmup, scale = schedule_warmup(training, 1)  # one step: the rate of step_num 1
    assert warmup == 1 and paper_rate(0, 128, 1, scale) == pytest.approx(
        paper_rate(0, 128, 1000, 2.0))
    plain = load_config(DEMO, ["training.warmup_fraction=0"]).training
    assert schedule_warmup(plain, 40) == (1000, 2.0)


def test_the_committed_demo_warms_up_inside_its_plans():
    """The demo's 2 one-pass epochs (426 steps on its 60,000 pairs) and make demo-jax-tiny's
    40 steps both pass their peak rate before they end."""
    training = load_config(DEMO).training
    for plan in (426, 40):
        warmup, _ = schedule_warmup(training, plan)
        assert warmup < plan / 2, (plan, warmup)


def test_planned_steps_counts_a_pass_where_the_epochs_are_passes():
    training = load_config(DEMO, ["training.epochs=3"]).training
    spe = load_config(DEMO, ["training.epochs=3", "training.steps_per_epoch=7"]).training
    assert planned_steps(spe, lambda: pytest.fail("a fixed plan reads no data")) == 21

    class Batches:  # a NumPy stream (text.numpy_pipeline) knows its length
        def __len__(self):
            return 11

    assert planned_steps(training, Batches) == 33
    tf = pytest.importorskip("tensorflow")
    # A filtered (or bucketed) tf.data pass has no known length: it is read.
    data = tf.data.Dataset.range(10).filter(lambda x: x % 2 == 0).map(lambda x: (x, x))
    assert int(data.cardinality()) < 0
    assert planned_steps(training, lambda: data) == 15
    assert planned_steps(training, lambda: tf.data.Dataset.range(4).batch(2)) == 6


def test_warmup_fraction_is_checked():
    with pytest.raises(ConfigError, match=r"^training.warmup_fraction must be >= 0 and <= 1, "
                                          r"got 1.5$"):
        load_config(DEMO, ["training.warmup_fraction=1.5"])
    with pytest.raises(ConfigError, match="warmup_fraction shortens a fresh run's warm-up"):
        load_config(DEMO, ["training.warmup_fraction=0.25", "training.initial_step=100"])
