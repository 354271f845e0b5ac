"""Bring a rendering back to an exact size by area averaging (a high-DPI canvas renders more pixels)."""

from __future__ import annotations

from typing import Any

import numpy as np


def _area_matrix(n_in: int, n_out: int) -> Any:
    """Sparse ``(n_out, n_in)`` box-filter resampling: each output pixel averages what it covers."""
    import scipy.sparse as sp

    scale = n_in / n_out
    rows, cols, weights = [], [], []
    for i in range(n_out):
        lo, hi = i * scale, (i + 1) * scale
        for j in range(int(np.floor(lo)), min(n_in, int(np.ceil(hi)))):
            overlap = min(hi, j + 1) - max(lo, j)
            if overlap > 0:
                rows.append(i)
                cols.append(j)
                weights.append(overlap / scale)
    return sp.csr_matrix((np.asarray(weights, np.float32), (rows, cols)), shape=(n_out, n_in))


class AreaResampler:
    """Resize ``(H, W, C)`` uint8 images to one fixed ``(width, height)``, averaging what each pixel covers.

    Integer factors are a reshape and a mean; other factors use two sparse
    box-filter matrices, built once for the input shape and kept.
    """

    def __init__(self, size: tuple[int, int]) -> None:
        self.size = (int(size[0]), int(size[1]))
        self._matrices: dict[tuple[int, int], tuple[Any, Any]] = {}

    def __call__(self, image: np.ndarray) -> np.ndarray:
        w, h = self.size
        if image.shape[:2] == (h, w):
            return image
        fy, fx = image.shape[0] / h, image.shape[1] / w
        if fy == fx and fy == int(fy) and fy >= 1:
            f = int(fy)
            return image.reshape(h, f, w, f, -1).mean(axis=(1, 3)).round().astype(np.uint8)
        key = image.shape[:2]
        if key not in self._matrices:
            self._matrices[key] = (_area_matrix(image.shape[0], h), _area_matrix(image.shape[1], w))
        rows, cols = self._matrices[key]
        c = image.shape[2]
        tall = rows @ image.reshape(image.shape[0], -1).astype(np.float32)
        tall = tall.reshape(h, image.shape[1], c).transpose(1, 0, 2).reshape(image.shape[1], -1)
        out = (cols @ tall).reshape(w, h, c).transpose(1, 0, 2)
        return np.clip(np.round(out), 0, 255).astype(np.uint8)
