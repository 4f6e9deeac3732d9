"""Learning curves of the pre-training study (docs/experiments/pretraining.md) as pictures,
from the runs' committed metrics.json (bench/results/pretraining/): the masked language model's
dev perplexity against its minutes of model.fit (the continued run after the first), and the
UIT-VSFC fine-tunes' dev macro-F1 after each epoch, from random and from pre-trained weights.

    python -m bench.learning_curves [--out docs/pictures_pretraining]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.common import RESULTS
from keras_transformer.command_line import add_debug_flag, entry_point

SOURCE = RESULTS / "pretraining"
OUT = Path("docs/pictures_pretraining")
# (metrics file, label, whether it continues the run before it: its minutes start where that
# run stopped).
PRETRAINING = (("vi_masked_lm_metrics.json", "vi_masked_lm, first runs", False),
               ("vi_masked_lm_more_metrics.json", "continued (another seed)", True),
               ("vi_masked_lm_recipe_metrics.json", "the recipe's 90 minutes alone", False))
FINE_TUNES = (("uit_random_metrics.json", "random weights"),
              ("uit_pre_lr03_metrics.json", "pre-trained 1,401 steps, lr_scale 0.3"),
              ("uit_pre_lr01_metrics.json", "pre-trained 1,401 steps, lr_scale 0.1"),
              ("uit_pre_more_metrics.json", "pre-trained 2,282 steps, lr_scale 0.1"),
              ("uit_recipe_metrics.json", "pre-trained 7,533 steps (the recipe)"),
              ("uit_recipe_seed1_metrics.json", "the same, fine-tune seed 1"))


def read(name: str, source: Path = SOURCE) -> dict:
    return json.loads((source / name).read_text(encoding="utf-8"))


def pretraining_curves(source: Path = SOURCE) -> list[tuple[str, list[float], list[float]]]:
    """(label, minutes of model.fit at the end of each epoch, dev masked perplexity) per run,
    each continued run's minutes after those of the run before it."""
    curves, offset = [], 0.0
    for name, label, continued in PRETRAINING:
        metrics = read(name, source)
        minutes = [(offset if continued else 0.0) + m for m in metrics["epoch_minutes"]]
        curves.append((label, minutes, list(metrics["epoch_dev"]["masked_perplexity"])))
        offset = minutes[-1]
    return curves


def fine_tune_curves(source: Path = SOURCE) -> list[tuple[str, list[int], list[float]]]:
    """(label, epochs 1..n, dev macro-F1 after each) per fine-tune."""
    curves = []
    for name, label in FINE_TUNES:
        f1 = list(read(name, source)["epoch_dev"]["macro_f1"])
        curves.append((label, list(range(1, len(f1) + 1)), f1))
    return curves


def draw(curves, path: Path, *, xlabel: str, ylabel: str, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    for label, xs, ys in curves:
        axes.plot(xs, ys, marker="o", label=label)
    axes.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


@entry_point
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="directory of the pictures")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    written = [
        draw(pretraining_curves(), args.out / "masked_lm_dev_perplexity.png",
             xlabel="minutes of model.fit (2 cores)", ylabel="dev masked perplexity",
             title="Masked LM pre-training on Vietnamese text"),
        draw(fine_tune_curves(), args.out / "uit_vsfc_dev_macro_f1.png",
             xlabel="epoch (358 steps)", ylabel="dev macro-F1",
             title="UIT-VSFC fine-tunes: random against pre-trained weights"),
    ]
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
