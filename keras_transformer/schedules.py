"""The learning-rate schedule of section 5.3: linear warm-up, then inverse square root."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), step from 1.

    Args:
        d_model: int. The model width; the peak rate scales with d_model^-0.5.
        warmup_steps: int. Steps of linear warm-up before the inverse square-root decay;
            defaults to `4000`, the paper's value.
        scale: float. Multiplies the whole schedule; defaults to `1.0`.
        accumulate_steps: int. The batches of one update when the optimizer accumulates
            gradients (Keras' `gradient_accumulation_steps`); defaults to `1`. Keras hands a
            schedule its count of batches, not of updates, so the schedule divides it: the
            warm-up and decay then count updates, as the paper's step_num does.

    Example:

    ```python
    optimizer = keras.optimizers.Adam(TransformerSchedule(512), beta_1=0.9, beta_2=0.98,
                                      epsilon=1e-9)
    ```
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0,
                 accumulate_steps: int = 1):
        if d_model < 1 or warmup_steps < 1:
            raise ValueError(f"d_model and warmup_steps must be >= 1, got {d_model}, {warmup_steps}")
        if accumulate_steps < 1:
            raise ValueError(f"accumulate_steps must be >= 1, got {accumulate_steps}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.accumulate_steps = int(accumulate_steps)

    def __call__(self, step):
        if self.accumulate_steps > 1:
            step = ops.floor_divide(step, self.accumulate_steps)
        # The optimizer counts updates from 0; the paper's step_num starts at 1.
        step = ops.cast(step, "float32") + 1.0
        warmup = float(self.warmup_steps)
        rate = ops.minimum(ops.rsqrt(step), step * warmup**-1.5)
        return self.scale * float(self.d_model) ** -0.5 * rate

    def get_config(self):
        config = {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}
        if self.accumulate_steps > 1:  # saved models without accumulation keep their config
            config["accumulate_steps"] = self.accumulate_steps
        return config
