"""The sparse kernels: scipy always, the compiled one where llvmlite builds it; same bits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from flyviz.errors import InputError
from flyviz.model import kernels
from flyviz.model.engine import Engine
from flyviz.model.synthetic import make_random_checkpoint

TOKENS = [1, 17, 300, 5, 5, 900, 2, 44, 61, 1000, 3, 3, 7, 7, 7, 250]


def _trace(engine: Engine) -> list[np.ndarray]:
    out = []
    for token in TOKENS:
        out += [engine.step(token).copy(), engine.state.copy()]
    engine.close()
    return out


def _checkpoint(rank: int | None = 9, index_dtype: type = np.int32, neurons: int = 1203):
    ckpt = make_random_checkpoint(neurons=neurons, edges=40 * neurons, d_embed=12,
                                  readout_rank=rank, seed=5)
    return dataclasses.replace(ckpt, w_indices=np.asarray(ckpt.w_indices).astype(index_dtype))


def _llvm_or_skip() -> None:
    if kernels.resolve("llvm") != "llvm":
        pytest.skip(f"the llvm kernel does not build here: {kernels.status()['error']}")


@pytest.mark.parametrize("index_dtype", [np.int32, np.uint16, np.int64])
@pytest.mark.parametrize("rank", [9, None])
def test_both_kernels_give_the_same_bits(rank, index_dtype):
    ckpt = _checkpoint(rank, index_dtype)
    scipy_engine = Engine(ckpt, threads=2, kernel="scipy")
    other = Engine(ckpt, threads=2, kernel="llvm")  # scipy again where llvmlite is missing
    assert scipy_engine.prepare() == "scipy"
    assert other.prepare() in ("llvm", "scipy")
    # Each lane of the compiled kernel adds its row's products in CSR order, as scipy does.
    for a, b in zip(_trace(scipy_engine), _trace(other)):
        np.testing.assert_array_equal(a, b)


def test_the_compiled_kernel_matches_a_float64_product_on_awkward_rows():
    _llvm_or_skip()
    rng = np.random.default_rng(3)
    # Empty rows, a row of one edge, a very long row, lengths not multiples of 8,
    # 70,000 columns (32-bit indices), and rows out of length order.
    lengths = np.array([0, 1, 0, 7, 8, 9, 3000, 0, 15, 17, 2, 0, 64, 63, 1, 5, 0, 0, 33])
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    for neurons in (900, 70_000):
        indices = rng.integers(0, neurons, indptr[-1]).astype(np.int32)
        data = rng.standard_normal(indptr[-1]).astype(np.float32)
        x = rng.standard_normal(neurons).astype(np.float32)
        out = {k: np.full(lengths.size, np.nan, dtype=np.float32) for k in kernels.KERNELS}
        for kind in kernels.KERNELS:
            kernels.make_block(kind, indptr, indices, data, neurons).matvec(x, out[kind])
        np.testing.assert_array_equal(out["llvm"], out["scipy"])
        exact = [np.dot(data[a:b].astype(np.float64), x[indices[a:b]]) for a, b in
                 zip(indptr[:-1], indptr[1:])]
        np.testing.assert_allclose(out["llvm"], exact, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [1, 8, 9, 16, 17, 24, 40])
def test_the_compiled_kernel_pairs_slices_of_any_count(rows):
    """Slices run in pairs, the first at least as wide as the second: an odd count of
    slices, a partly filled last slice and pairs of unequal widths give scipy's bits."""
    _llvm_or_skip()
    rng = np.random.default_rng(rows)
    lengths = rng.integers(0, 40, rows)
    lengths[rng.integers(0, rows)] = 300  # one long row: its slice's partner is far shorter
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = rng.integers(0, 500, indptr[-1]).astype(np.int32)
    data = rng.standard_normal(indptr[-1]).astype(np.float32)
    x = rng.standard_normal(500).astype(np.float32)
    out = {k: np.full(rows, np.nan, dtype=np.float32) for k in kernels.KERNELS}
    for kind in kernels.KERNELS:
        kernels.make_block(kind, indptr, indices, data, 500).matvec(x, out[kind])
    np.testing.assert_array_equal(out["llvm"].view(np.uint32), out["scipy"].view(np.uint32))


def test_each_kernel_is_bit_identical_across_threads_and_blocks():
    ckpt = _checkpoint(9, np.uint16)
    for kernel in kernels.KERNELS:
        runs = [_trace(Engine(ckpt, threads=t, kernel=kernel, blocks_per_thread=b, overlap=o))
                for t, b, o in ((1, 1, False), (2, 1, True), (3, 4, True))]
        for other in runs[1:]:
            for a, b in zip(runs[0], other):
                np.testing.assert_array_equal(a, b)


def test_the_compiled_layout_holds_16_bit_indices_when_they_fit():
    _llvm_or_skip()
    engine = Engine(_checkpoint(9, np.int64), threads=2, kernel="llvm")
    assert engine.kernel is None  # chosen on first use, not on construction
    engine.step(4)
    assert engine.kernel == "llvm"
    assert {b.layout.sidx.dtype for b in engine.row_blocks} == {np.dtype(np.uint16)}
    engine.close()


def test_environment_variable_chooses_a_kernel(monkeypatch):
    monkeypatch.delenv(kernels.ENV_VAR, raising=False)
    assert kernels.resolve() == kernels.resolve(kernels.DEFAULT_KERNEL)
    for kind in kernels.KERNELS:
        monkeypatch.setenv(kernels.ENV_VAR, kind)
        engine = Engine(_checkpoint(), threads=1)
        engine.step(5)
        assert engine.kernel == kernels.resolve(kind)
        engine.close()
    monkeypatch.setenv(kernels.ENV_VAR, "fortran")
    # A bad setting is the user's to fix: one line, not a traceback.
    with pytest.raises(InputError, match="FLYVIZ_KERNEL='fortran' names no sparse kernel"):
        Engine(_checkpoint(), threads=1).step(5)
    with pytest.raises(ValueError, match="unknown kernel"):
        Engine(_checkpoint(), kernel="fortran")


def test_a_kernel_that_cannot_compile_falls_back_to_scipy(monkeypatch):
    def broken() -> None:
        raise ImportError("no llvmlite here")

    monkeypatch.setattr(kernels, "_compile", broken)
    monkeypatch.setattr(kernels, "_compiled", None)
    monkeypatch.setattr(kernels, "_error", None)
    assert kernels.resolve("llvm") == "scipy"
    assert "no llvmlite here" in kernels.status()["error"]
    engine = Engine(_checkpoint(), threads=2, kernel="llvm")
    engine.step(3)
    assert engine.kernel == "scipy"
    engine.close()
