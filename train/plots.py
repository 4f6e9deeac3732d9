"""Heatmaps drawn with matplotlib (Agg: files only, no display), for `train.evaluate
--plot-attention` and `train.visualize`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

CELL = 0.28  # inches per labelled token: the pieces stay readable
LABEL_MARGIN = 1.6  # inches for the tick labels and axis title of a labelled panel
MAX_LABELS = 80  # longer axes (a summarization article) go unlabelled: pictures.json has them


def _panel_size(rows: int, columns: int, row_labels, col_labels) -> tuple[float, float]:
    width = CELL * columns + LABEL_MARGIN if col_labels is not None else 6.0
    if row_labels is not None:
        height = CELL * rows + LABEL_MARGIN
    else:  # an unlabelled matrix keeps its aspect ratio, within reason
        height = min(max(2.2, width * rows / columns + 0.8), 8.0)
    return max(width, 3.0), max(height, 2.2)


def heatmap_grid(matrices: np.ndarray, path: Path, *, titles: Sequence[str],
                 row_labels: Sequence[str] | None = None,
                 col_labels: Sequence[str] | None = None, xlabel: str = "", ylabel: str = "",
                 suptitle: str = "", columns: int = 4, cmap: str = "viridis",
                 vmin: float | None = 0.0, vmax: float | None = 1.0,
                 grey_zeros_above_diagonal: bool = False, dpi: int = 80) -> None:
    """One heatmap per matrix of `matrices` (N,R,C), `columns` to a row of panels, one shared
    colour bar; rows labelled by `row_labels`, columns by `col_labels` (the tokens).

    With grey_zeros_above_diagonal, cells above the diagonal that are exactly 0 are drawn
    light grey, so that a causal mask shows as a blank triangle; any other value there keeps
    its colour.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    matrices = np.asarray(matrices)
    if row_labels is not None and len(row_labels) > MAX_LABELS:
        row_labels = None
    if col_labels is not None and len(col_labels) > MAX_LABELS:
        col_labels = None
    count, rows, cols = matrices.shape
    columns = max(1, min(columns, count))
    lines = math.ceil(count / columns)
    width, height = _panel_size(rows, cols, row_labels, col_labels)
    figure, axes = plt.subplots(lines, columns, figsize=(width * columns + 0.8,
                                                         height * lines + 0.6),
                                squeeze=False, layout="constrained")
    colours = matplotlib.colormaps[cmap].with_extremes(bad="#dddddd")
    font = 8 if max(rows, cols) <= 40 else 6
    image = None
    for index, axis in enumerate(axes.ravel()):
        if index >= count:
            axis.axis("off")
            continue
        matrix = matrices[index]
        if grey_zeros_above_diagonal:
            above = np.triu(np.ones(matrix.shape, bool), k=1)
            matrix = np.ma.masked_where(above & (matrix == 0), matrix)
        image = axis.imshow(matrix, cmap=colours, vmin=vmin, vmax=vmax, aspect="auto",
                            interpolation="nearest")
        if col_labels is not None:
            axis.set_xticks(range(len(col_labels)), col_labels, rotation=90, fontsize=font)
        if row_labels is not None:
            axis.set_yticks(range(len(row_labels)), row_labels, fontsize=font)
        axis.set_xlabel(xlabel, fontsize=9)
        axis.set_ylabel(ylabel, fontsize=9)
        axis.set_title(titles[index], fontsize=9)
    figure.colorbar(image, ax=axes.ravel().tolist(), fraction=0.03, pad=0.02)
    if suptitle:
        figure.suptitle(suptitle, fontsize=9)
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
