"""The Fly LLM forward pass for B token streams at once: one sparse x dense product per step.

:class:`BatchEngine` holds the states of ``B`` streams as the columns of one
``(neurons, B)`` float32 matrix and advances them all with one ``W @ X`` per
step. Each column is exactly what :class:`~flyviz.model.engine.Engine` computes
for that stream alone (fly-formats.md section 1.5)::

    drive[:, b] = concat_j( wte[token_b(t - j)] @ in_proj[j] )     j = 0..delay_k-1
    pre   = rec_gain * (W @ X)          ;  pre[in_index, :] += drive
    X     = (1 - leak) * X + leak * tanh(gain * pre + bias)
    logits[b] = head( LayerNorm(X[out_index, b]) )

with one delay line per stream. The columns may read independent token streams
(a corpus, each stream refilled with the next document when its document
ends: :meth:`BatchEngine.reset` clears single columns) or all read the same
token (:meth:`BatchEngine.step` with a scalar: a teacher-forced comparison of
columns that differ by what :class:`StepHooks` does to them).

Exactness: the sparse product gives each column the same bits as the
single-stream engine's (scipy's ``csr_matvecs`` and the compiled kernel both
add each row's products in CSR order, as ``csr_matvec`` does), and the update
is the same elementwise arithmetic, and the input drive is computed per column
as there: with the scipy kernel the states are bit-identical to the
single-stream engine's (the compiled kernel gives scipy's bits too). The
readout is one GEMM for all columns here and a vector product there, which
BLAS may round differently in the last bits of a logit; the greedy tokens are
the same (``tests/test_model_batch.py``).

Speed (``flyviz bench --batch 64``): the product reads each source row of ``X``
(``B`` floats) once per synapse, so the graph is read once for all columns.
On the development machine (2 cores), a full-size graph and 64 columns took
~103 ms with scipy's kernel and ~39 ms with the compiled one on one thread.
The readout is a GEMM; BLAS stays in the stepping thread during a step (see
:class:`~flyviz.model.engine._SingleThreadedBlas`), since the row blocks of
the product have their own threads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from flyviz.model import kernels
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.engine import _SINGLE_THREADED_BLAS, Engine, _as_f32, default_threads
from flyviz.model.errors import InputError


class StepHooks:
    """Per-column changes to one step of a :class:`BatchEngine`; the base class changes nothing.

    Subclasses override any of the four methods; each receives the engine's
    arrays with one column per stream (``(neurons, columns)``, float32,
    C-contiguous; ``columns`` may exceed the engine's ``streams`` by padding
    columns, which nobody reads) and works in place, except
    :meth:`product_input`, which returns the matrix to multiply.

    The four places cover the interventions of a connectome model:

    * :meth:`product_input`: a per-column mask of ``X`` before ``W @ X``
      removes every outgoing synapse of the masked neurons (cut-out);
    * :meth:`product_output`: a per-column mask of rows of ``W @ X`` removes
      every incoming synapse of those neurons (cut-in);
    * :meth:`before_tanh`: per-column additions to the pre-activation
      (stimulation, steering);
    * :meth:`after_update`: per-column masks or clamps of the new state
      (silencing).
    """

    def product_input(self, x: np.ndarray) -> np.ndarray:
        """The matrix ``W`` multiplies (default: the state itself; do not modify ``x``)."""
        return x

    def product_output(self, recurrent: np.ndarray) -> None:
        """Change ``W @ X`` in place, before ``rec_gain`` and the input drive."""

    def before_tanh(self, pre: np.ndarray) -> None:
        """Change ``gain * pre + bias`` in place, just before the tanh."""

    def after_update(self, x: np.ndarray) -> None:
        """Change the new state in place."""


class BatchEngine:
    """Runs a checkpoint on ``streams`` token streams at once.

    Parameters
    ----------
    checkpoint
        A validated checkpoint.
    streams
        Number of columns (independent streams), at least 1.
    threads
        Threads for the sparse product (rows split between them); default:
        the usable cores (max 4).
    kernel
        ``"scipy"``, ``"llvm"`` or ``None`` (``FLYVIZ_KERNEL``, else the
        default), as for :class:`~flyviz.model.engine.Engine`; llvm falls back
        to scipy where it cannot compile. Both give the same bits.
    hooks
        Per-column changes to every step (:class:`StepHooks`), or ``None``.

    Notes
    -----
    Internally the state has a multiple of 8 columns (the compiled kernel
    works on 8-float vectors); :attr:`state` is the view of the first
    ``streams``. It is overwritten in place by every step: copy it to keep it.
    """

    def __init__(self, checkpoint: Checkpoint, streams: int, threads: int | None = None, *,
                 kernel: str | None = None, hooks: StepHooks | None = None) -> None:
        ck = checkpoint
        cfg = ck.config
        streams = int(streams)
        if streams < 1:
            raise InputError(f"a batch needs at least one stream, not {streams}")
        if kernel is not None and kernel not in kernels.KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; expected one of "
                             f"{', '.join(kernels.KERNELS)}")
        self.checkpoint = ck
        self.config = cfg
        self.streams = streams
        self.columns = -(-streams // kernels.MULTI_LANES) * kernels.MULTI_LANES
        self.hooks = hooks
        n, w = cfg.neurons, self.columns
        self.wte = _as_f32(ck.wte)
        self.in_proj = _as_f32(ck.in_proj)
        self.gain = _as_f32(ck.gain)[:, None]
        self.rec_gain = _as_f32(ck.rec_gain)[:, None]
        self.bias = _as_f32(ck.bias)[:, None]
        self.ln_weight = _as_f32(ck.ln_weight)[:, None]
        self.ln_bias = _as_f32(ck.ln_bias)[:, None]
        self.in_index = np.ascontiguousarray(ck.in_index, dtype=np.intp)
        self.out_index = None if ck.out_index_is_identity() else np.ascontiguousarray(
            ck.out_index, dtype=np.intp)
        self.head = None if ck.head is None else _as_f32(ck.head)
        self.head_a = None if ck.head_a is None else _as_f32(ck.head_a)
        self.head_b = None if ck.head_b is None else _as_f32(ck.head_b)
        self._leak = np.float32(cfg.leak)
        self._keep = np.float32(1.0 - cfg.leak)

        self._kernel_request = kernel
        self.kernel: str | None = None
        self.threads = max(1, threads if threads is not None else default_threads())
        self._blocks = Engine._split_rows(np.asarray(ck.w_offsets), np.asarray(ck.w_indices),
                                          _as_f32(ck.w_values), self.threads)
        self._pool = ThreadPoolExecutor(len(self._blocks), thread_name_prefix="flyviz-spmm") \
            if len(self._blocks) > 1 else None

        self._x = np.zeros((n, w), dtype=np.float32)
        self._pre = np.zeros((n, w), dtype=np.float32)
        self.recent = np.full((w, cfg.delay_k), cfg.pad_token_id, dtype=np.int64)
        #: Tokens each column has read since its last reset.
        self.positions = np.zeros(w, dtype=np.int64)

    # ------------------------------------------------------------------ set-up
    def prepare(self) -> str:
        """Choose the kernel and lay the graph out for it now; return its name."""
        if self.kernel is None:
            name = kernels.resolve_multi(self._kernel_request, self.columns)
            n = self.config.neurons
            for block in self._blocks:
                assert block.indices is not None and block.data is not None
                # The batched engine's own blocks hold multi-column layouts.
                block.layout = kernels.make_multi_block(  # type: ignore[assignment]
                    name, block.indptr, block.indices, block.data, n, self.columns)
                block.indices = block.data = None
            self.kernel = name
        return self.kernel

    @property
    def state(self) -> np.ndarray:
        """``(neurons, streams)`` float32 states, one column per stream (a view)."""
        return self._x[:, :self.streams]

    def reset(self, columns: np.ndarray | list[int] | None = None) -> None:
        """Zero the state and fill the delay line with PAD: of ``columns`` (indices or a
        boolean mask over the streams), or of every column when ``None``."""
        pad = self.config.pad_token_id
        if columns is None:
            self._x.fill(0.0)
            self.recent.fill(pad)
            self.positions.fill(0)
            return
        cols = np.asarray(columns)
        if cols.dtype == bool:
            cols = np.flatnonzero(cols)
        if cols.size == 0:
            return
        if int(cols.min()) < 0 or int(cols.max()) >= self.streams:
            raise InputError(f"stream index outside 0..{self.streams - 1}")
        self._x[:, cols] = 0.0
        self.recent[cols] = pad
        self.positions[cols] = 0

    def close(self) -> None:
        """Stop the worker threads (the engine is unusable afterwards)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    # -------------------------------------------------------------------- step
    def _block_product(self, block, source: np.ndarray) -> None:
        block.layout.matmul(source, self._pre[block.start:block.stop])

    def recurrent_input(self, source: np.ndarray) -> np.ndarray:
        """``W @ source`` for a C-contiguous float32 ``(neurons, columns)`` matrix, into an
        internal buffer."""
        self.prepare()
        if self._pool is None:
            for block in self._blocks:
                self._block_product(block, source)
        else:
            for _ in self._pool.map(lambda b: self._block_product(b, source), self._blocks):
                pass
        return self._pre

    def _tokens(self, tokens: np.ndarray | int) -> np.ndarray:
        """The token of every internal column (padding columns read PAD)."""
        cfg = self.config
        array = np.asarray(tokens, dtype=np.int64)
        if array.ndim == 0:
            array = np.full(self.streams, int(array), dtype=np.int64)
        if array.shape != (self.streams,):
            raise InputError(f"expected {self.streams} tokens (one per stream) or one for all, "
                             f"got shape {list(array.shape)}")
        if array.size and (int(array.min()) < 0 or int(array.max()) >= cfg.vocabulary):
            raise InputError(f"token ids must lie in 0..{cfg.vocabulary - 1}")
        full = np.full(self.columns, cfg.pad_token_id, dtype=np.int64)
        full[:self.streams] = array
        return full

    def step(self, tokens: np.ndarray | int, *, logits: bool = False) -> np.ndarray | None:
        """Feed one token per stream (or one for all); update every state.

        Parameters
        ----------
        tokens
            ``(streams,)`` token ids, or a single id that every stream reads.
        logits
            Also return the next-token logits.

        Returns
        -------
        numpy.ndarray or None
            ``(streams, vocabulary)`` float32 logits when asked for.
        """
        full = self._tokens(tokens)
        with _SINGLE_THREADED_BLAS:
            self._step(full)
            return self.readout() if logits else None

    def drive(self, tokens: np.ndarray) -> np.ndarray:
        """Input drive of every internal column given the delay lines, ``(columns, delay_k, slot)``."""
        k = self.config.delay_k
        history = np.empty((self.columns, k), dtype=np.int64)
        history[:, 0] = tokens
        history[:, 1:] = self.recent[:, ::-1][:, :k - 1]
        embeddings = self.wte[history]                           # (columns, k, d)
        # (1, d) @ (d, slot) per column and slot, as the single-stream engine computes it,
        # so that the drive has the same bits (one GEMM per slot rounds differently and
        # is only ~1 ms per step faster at full size with 64 columns).
        return np.matmul(embeddings[:, :, None, :], self.in_proj[None])[:, :, 0, :]

    def _step(self, tokens: np.ndarray) -> None:
        hooks = self.hooks
        x = self._x
        source = x if hooks is None else hooks.product_input(x)
        pre = self.recurrent_input(source)                       # W @ X_prev
        if hooks is not None:
            hooks.product_output(pre)
        pre *= self.rec_gain
        drive = self.drive(tokens)                               # (columns, k, slot)
        # in_index is unique: a plain fancy-index add scatters.
        pre[self.in_index] += drive.reshape(self.columns, -1).T
        pre *= self.gain
        pre += self.bias
        if hooks is not None:
            hooks.before_tanh(pre)
        np.tanh(pre, out=pre)
        pre *= self._leak
        x *= self._keep
        x += pre
        if hooks is not None:
            hooks.after_update(x)
        self.recent[:, :-1] = self.recent[:, 1:]
        self.recent[:, -1] = tokens
        self.positions += 1

    def layer_norm(self) -> np.ndarray:
        """The readout's LayerNorm of every stream's state, ``(n_out, streams)`` float32."""
        x = self.state
        h = x if self.out_index is None else x[self.out_index]
        mean = h.mean(axis=0, dtype=np.float64).astype(np.float32)
        centred = h - mean
        var = np.square(centred, dtype=np.float32).mean(axis=0, dtype=np.float64)
        inv = (1.0 / np.sqrt(var + self.config.layer_norm_eps)).astype(np.float32)
        centred *= inv
        centred *= self.ln_weight
        centred += self.ln_bias
        return centred

    def readout(self) -> np.ndarray:
        """Next-token logits of every stream, ``(streams, vocabulary)`` float32."""
        normed = self.layer_norm()
        if self.head is not None:
            logits = self.head @ normed
        else:
            assert self.head_a is not None and self.head_b is not None
            logits = self.head_b @ (self.head_a @ normed)
        return np.ascontiguousarray(logits.T)
