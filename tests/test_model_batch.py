"""The batched engine: every column is the single-stream engine, bit for bit in the state."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from flyviz.model import kernels
from flyviz.model.batch import BatchEngine, LesionHooks, StepHooks
from flyviz.model.engine import Engine
from flyviz.model.interventions import Cut, Silence
from flyviz.model.errors import InputError
from flyviz.model.synthetic import make_random_checkpoint


def _checkpoint(rank: int | None = 7, neurons: int = 611, index_dtype=np.int32):
    ckpt = make_random_checkpoint(neurons=neurons, edges=23 * neurons, d_embed=12,
                                  vocabulary=301, readout_rank=rank, seed=3)
    return dataclasses.replace(ckpt, w_indices=np.asarray(ckpt.w_indices).astype(index_dtype))


def _single(ckpt, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    engine = Engine(ckpt, threads=1, kernel="scipy")
    states, logits = [], []
    for token in tokens:
        logits.append(engine.step(int(token)).copy())
        states.append(engine.state.copy())
    engine.close()
    return np.array(states), np.array(logits)


@pytest.mark.parametrize("kernel", kernels.KERNELS)
@pytest.mark.parametrize("rank,index_dtype", [(7, np.uint16), (None, np.int32)])
def test_every_column_equals_the_single_stream_engine(kernel, rank, index_dtype):
    ckpt = _checkpoint(rank, index_dtype=index_dtype)
    rng = np.random.default_rng(0)
    streams, steps = 5, 30  # 5 columns: the compiled kernel pads them to 8
    tokens = rng.integers(3, 301, (steps, streams))
    engine = BatchEngine(ckpt, streams, threads=2, kernel=kernel)
    states, logits = [], []
    for row in tokens:
        logits.append(engine.step(row, logits=True))
        states.append(engine.state.copy())
    assert engine.prepare() in (kernel, "scipy")
    engine.close()
    for b in range(streams):
        want_states, want_logits = _single(ckpt, tokens[:, b])
        got_states = np.array([s[:, b] for s in states])
        got_logits = np.array([g[b] for g in logits])
        np.testing.assert_array_equal(got_states, want_states)
        # One GEMM for all columns against a vector product: the last bits may differ.
        np.testing.assert_allclose(got_logits, want_logits, rtol=1e-5,
                                   atol=1e-5 * np.abs(want_logits).max())
        assert np.array_equal(got_logits.argmax(axis=1), want_logits.argmax(axis=1))


def test_refilled_and_teacher_forced_columns():
    ckpt = _checkpoint()
    first, second = [5, 9, 200, 17], [44, 3, 3, 120, 7]
    engine = BatchEngine(ckpt, 3, threads=1)
    # Column 0 reads `first` then is reset and reads `second`; column 1 reads `second`
    # throughout from the start; column 2 idles on PAD.
    for t in range(len(first)):
        engine.step([first[t], second[t], 0])
    engine.reset([0])
    assert engine.positions[0] == 0 and engine.positions[1] == len(first)
    column0 = []
    for token in second:
        engine.step([token, 0, 0])
        column0.append(engine.state[:, 0].copy())
    want, _ = _single(ckpt, np.array(second))
    np.testing.assert_array_equal(np.array(column0), want)
    # All columns reading one token stream stay identical.
    engine = BatchEngine(ckpt, 4, threads=1)
    for token in second:
        engine.step(token)
    state = engine.state
    assert all(np.array_equal(state[:, 0], state[:, c]) for c in range(1, 4))
    np.testing.assert_array_equal(state[:, 0], want[-1])


class _Cut(StepHooks):
    """Column 1 loses the outgoing (cut-out) or incoming (cut-in) synapses of `group`."""

    def __init__(self, group: np.ndarray, kind: str) -> None:
        self.group, self.kind = group, kind

    def product_input(self, x):
        if self.kind != "out":
            return x
        masked = x.copy()
        masked[self.group, 1] = 0.0
        return masked

    def product_output(self, recurrent):
        if self.kind == "in":
            recurrent[self.group, 1] = 0.0


@pytest.mark.parametrize("kind", ["out", "in"])
def test_hooks_on_the_product_are_cut_out_and_cut_in(kind):
    ckpt = _checkpoint(neurons=300)
    n = ckpt.config.neurons
    group = np.arange(10, 80)
    w = sp.csr_matrix((ckpt.w_values, ckpt.w_indices, ckpt.w_offsets), shape=(n, n)).tolil()
    if kind == "out":
        w[:, group] = 0.0
    else:
        w[group, :] = 0.0
    w = w.tocsr()
    w.eliminate_zeros()
    cut = dataclasses.replace(ckpt, w_offsets=w.indptr.astype(np.int32),
                              w_indices=w.indices.astype(np.int32),
                              w_values=w.data.astype(np.float32))
    tokens = [5, 9, 200, 17, 44, 3]
    engine = BatchEngine(ckpt, 2, threads=1, hooks=_Cut(group, kind))
    for token in tokens:
        engine.step(token)
    untouched, _ = _single(ckpt, np.array(tokens))
    lesioned, _ = _single(cut, np.array(tokens))
    np.testing.assert_array_equal(engine.state[:, 0], untouched[-1])
    np.testing.assert_allclose(engine.state[:, 1], lesioned[-1], atol=1e-6)
    assert not np.allclose(untouched[-1], lesioned[-1], atol=1e-3)


@pytest.mark.parametrize("kernel", kernels.KERNELS)
@pytest.mark.parametrize("mode", ["silence", "cut-out", "cut-in"])
def test_lesion_hooks_equal_the_single_stream_engine_with_that_intervention(mode, kernel):
    """Column 0 untouched; columns 1..4 each lose one group, as Engine does with Silence,
    Cut(group, all) or Cut(all, group): the same states, bit for bit."""
    ckpt = _checkpoint(neurons=300)
    rng = np.random.default_rng(5)
    groups = [np.sort(rng.choice(300, size, replace=False)) for size in (1, 7, 40, 150)]
    tokens = [5, 9, 200, 17, 44, 3, 3, 120]
    interventions = {"silence": lambda g: Silence(g), "cut-out": lambda g: Cut(g, "all"),
                     "cut-in": lambda g: Cut("all", g)}[mode]
    states = {}
    for path in ("flat", "mask"):
        engine = BatchEngine(ckpt, 5, threads=1, kernel=kernel)
        hooks = LesionHooks(mode, 300, engine.columns, groups, [1, 2, 3, 4])
        # Force each way of writing the zeros once; both must give the same values.
        if path == "mask" and hooks.mask is None:
            rows = np.concatenate(groups)
            hooks.mask = np.ones(hooks.shape, dtype=np.float32)
            hooks.mask[rows, np.repeat([1, 2, 3, 4], [g.size for g in groups])] = 0.0
            hooks.flat = None
        engine.hooks = hooks
        for token in tokens:
            engine.step(token)
        states[path] = engine.state.copy()
        engine.close()
    np.testing.assert_array_equal(states["flat"], states["mask"])
    untouched, _ = _single(ckpt, np.array(tokens))
    np.testing.assert_array_equal(states["flat"][:, 0], untouched[-1])
    for column, group in enumerate(groups, start=1):
        engine = Engine(ckpt, threads=1, kernel=kernel, interventions=[interventions(group)])
        for token in tokens:
            engine.step(token)
        np.testing.assert_array_equal(states["flat"][:, column], engine.state,
                                      err_msg=f"group {column}")
        engine.close()
    assert not np.allclose(states["flat"][:, 4], untouched[-1], atol=1e-3)


def test_lesion_hooks_choose_a_mask_for_large_groups_and_check_their_input():
    big = LesionHooks("silence", 100, 8, [np.arange(60), np.arange(50)], [1, 2])
    small = LesionHooks("silence", 100, 8, [np.arange(3)], [7])
    assert big.mask is not None and big.flat is None
    assert small.flat is not None and small.flat.tolist() == [7, 15, 23]
    with pytest.raises(InputError, match="unknown lesion"):
        LesionHooks("remove", 100, 8, [np.arange(3)], [1])
    with pytest.raises(ValueError):
        LesionHooks("silence", 100, 8, [np.arange(3), np.arange(2)], [1, 1])


@pytest.mark.parametrize("columns", [8, 24, 72, 136])
def test_the_compiled_multi_column_kernel_gives_scipys_bits(columns):
    if kernels.resolve_multi("llvm", columns) != "llvm":
        pytest.skip(f"the llvm kernel does not build here: {kernels.status()['error']}")
    rng = np.random.default_rng(columns)
    lengths = np.array([0, 1, 0, 7, 8, 9, 700, 0, 15, 17, 2, 0, 64, 63, 1, 5, 0, 0, 33])
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    cases = [(900, False), (70_000, False), (70_000, True)]  # 16- and 32-bit indices
    for neurons, ascending in cases:
        indices = rng.integers(0, neurons, indptr[-1]).astype(np.int32)
        if ascending:  # rows in source order: the compiled kernel runs panel by panel
            indices = np.concatenate([np.sort(indices[a:b]) for a, b in
                                      zip(indptr[:-1], indptr[1:])]).astype(np.int32)
        data = rng.standard_normal(indptr[-1]).astype(np.float32)
        x = rng.standard_normal((neurons, columns)).astype(np.float32)
        out = {k: np.full((lengths.size, columns), np.nan, dtype=np.float32)
               for k in kernels.KERNELS}
        for kind in kernels.KERNELS:
            block = kernels.make_multi_block(kind, indptr, indices, data, neurons, columns)
            block.matmul(x, out[kind])
            if kind == "llvm":
                assert (block.panels > 1) == ascending
        np.testing.assert_array_equal(out["llvm"], out["scipy"])
        exact = np.stack([data[a:b].astype(np.float64) @ x[indices[a:b]].astype(np.float64)
                          for a, b in zip(indptr[:-1], indptr[1:])])
        np.testing.assert_allclose(out["llvm"], exact, rtol=1e-4, atol=1e-4)


def test_bad_tokens_and_streams_are_input_errors():
    ckpt = _checkpoint()
    with pytest.raises(InputError):
        BatchEngine(ckpt, 0)
    engine = BatchEngine(ckpt, 3, threads=1)
    with pytest.raises(InputError, match="0..300"):
        engine.step([1, 2, 301])
    with pytest.raises(InputError, match="3 tokens"):
        engine.step([1, 2])
    with pytest.raises(InputError):
        engine.reset([3])
