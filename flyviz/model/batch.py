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
:class:`~flyviz.model.engine_core._SingleThreadedBlas`), since the row blocks of
the product have their own threads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from flyviz.model import kernels
from flyviz.model.checkpoint import Checkpoint, require_fly_llm_operator
from flyviz.model.engine import SINGLE_THREADED_BLAS, as_f32, default_threads, split_rows
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


#: The lesions :class:`LesionHooks` applies, one group per column.
LESION_MODES = ("silence", "cut-out", "cut-in")
#: A scattered write costs about this many streamed multiplies (measured at full size,
#: 64 columns: 1.56M scattered zeros 1.9 ms, a (49,393, 64) mask multiply 0.3 ms).
_SCATTER_COST = 12


class LesionHooks(StepHooks):
    """One lesion per column: column ``columns[g]`` loses group ``g`` of neurons.

    ``"silence"``
        after every step ``x[group, column] = 0`` (:meth:`after_update`): the
        single-stream engine's ``Silence(group)``;
    ``"cut-out"``
        the group's entries of ``X`` are 0 in the product ``W @ X``
        (:meth:`product_input`): every outgoing synapse of the group removed,
        the engine's ``Cut(group, "all")``;
    ``"cut-in"``
        the group's rows of ``W @ X`` are 0 (:meth:`product_output`): every
        incoming synapse removed, the engine's ``Cut("all", group)``.

    Columns without a group (an untouched reference column, padding) are left
    alone. Each column's state equals the single-stream engine's with the
    same intervention (``tests/test_model_batch.py``): a weight set to 0
    and a source set to 0 both add a zero product.

    Parameters
    ----------
    mode
        One of :data:`LESION_MODES`.
    neurons, columns
        The engine's state shape, ``(neurons, BatchEngine.columns)``.
    groups
        Sorted neuron indices of each group.
    group_columns
        The column each group acts on (distinct).

    Notes
    -----
    The zeros are written through flat indices into the C-contiguous state
    (cheap for small groups: a few hundred entries per step for 63 cell
    types), or, when the groups together hold more than 1/12 of the
    entries, by multiplying with a 0/1 mask (a streamed multiply beats that
    many scattered writes). Both give the same values.
    """

    def __init__(self, mode: str, neurons: int, columns: int, groups: "list[np.ndarray]",
                 group_columns: "list[int] | np.ndarray") -> None:
        if mode not in LESION_MODES:
            raise InputError(f"unknown lesion {mode!r}; expected one of {', '.join(LESION_MODES)}")
        group_columns = np.asarray(group_columns, dtype=np.intp)
        if len(groups) != group_columns.size or np.unique(group_columns).size != group_columns.size:
            raise ValueError("give one distinct column per group")
        if group_columns.size and (group_columns.min() < 0 or group_columns.max() >= columns):
            raise ValueError(f"group columns must lie in 0..{columns - 1}")
        self.mode = mode
        self.shape = (int(neurons), int(columns))
        sizes = [int(np.asarray(g).size) for g in groups]
        rows = np.concatenate([np.asarray(g, dtype=np.intp) for g in groups]) if groups else \
            np.zeros(0, dtype=np.intp)
        cols = np.repeat(group_columns, sizes)
        self.flat: np.ndarray | None = None
        self.mask: np.ndarray | None = None
        if rows.size * _SCATTER_COST < neurons * columns:
            self.flat = rows * columns + cols
        else:
            self.mask = np.ones(self.shape, dtype=np.float32)
            self.mask[rows, cols] = 0.0
        self._source = np.empty(self.shape, dtype=np.float32) if mode == "cut-out" else None

    def _zero(self, a: np.ndarray) -> None:
        assert a.flags.c_contiguous and a.shape == self.shape
        if self.flat is not None:
            a.reshape(-1)[self.flat] = 0.0  # a view: the engine's arrays are C-contiguous
        else:
            a *= self.mask

    def product_input(self, x: np.ndarray) -> np.ndarray:
        if self._source is None:
            return x
        if self.flat is not None:
            np.copyto(self._source, x)
            self._source.reshape(-1)[self.flat] = 0.0
        else:
            assert self.mask is not None  # no flat indices: the group is a mask
            np.multiply(x, self.mask, out=self._source)
        return self._source

    def product_output(self, recurrent: np.ndarray) -> None:
        if self.mode == "cut-in":
            self._zero(recurrent)

    def after_update(self, x: np.ndarray) -> None:
        if self.mode == "silence":
            self._zero(x)


class PatchHooks(StepHooks):
    """One activation patch per column: column ``columns[c]`` has group ``c`` restored to a
    source run's state over its window of positions.

    After the step at position ``p`` (counted by the hooks since :meth:`rewind`),
    for every column ``c`` whose window ``[lo_c, hi_c)`` holds ``p``::

        x[group_c, column_c] = source[p + shift, group_c]

    which is what the single-stream engine's
    :class:`~flyviz.model.patching.Patch` does (the same float32 values copied,
    so the same bits; ``tests/test_analysis_patch.py``). Columns without a group
    are left alone.

    Parameters
    ----------
    neurons, columns
        The engine's state shape, ``(neurons, BatchEngine.columns)``.
    source
        ``(positions, neurons)`` float32 states of the source run.
    groups
        Neuron indices of each group.
    group_columns
        The column each group acts on (distinct).
    windows
        ``(groups, 2)`` half-open position windows ``[lo, hi)``.
    shift
        Source row = position + ``shift`` (positions aligned from the end).
    """

    def __init__(self, neurons: int, columns: int, source: np.ndarray,
                 groups: "list[np.ndarray]", group_columns: "list[int] | np.ndarray",
                 windows: "np.ndarray | list[tuple[int, int]]", shift: int = 0) -> None:
        group_columns = np.asarray(group_columns, dtype=np.intp)
        windows = np.asarray(windows, dtype=np.int64).reshape(-1, 2)
        if len(groups) != group_columns.size or windows.shape[0] != group_columns.size or \
                np.unique(group_columns).size != group_columns.size:
            raise ValueError("give one distinct column and one window per group")
        if group_columns.size and (group_columns.min() < 0 or group_columns.max() >= columns):
            raise ValueError(f"group columns must lie in 0..{columns - 1}")
        source = np.ascontiguousarray(source, dtype=np.float32)
        if source.ndim != 2 or source.shape[1] != neurons:
            raise ValueError(f"the source must be (positions, {neurons}) states")
        self.shape = (int(neurons), int(columns))
        self.source = source
        self.groups = [np.asarray(g, dtype=np.intp) for g in groups]
        self.group_columns = group_columns
        self.windows = windows
        self.shift = int(shift)
        self.position = 0
        self._plans: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}

    def rewind(self) -> None:
        """The next step is position 0 again (call it with :meth:`BatchEngine.reset`)."""
        self.position = 0

    def _plan(self, position: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Flat indices into the state and into the source of the entries patched after the
        step at ``position`` (kept: a trace steps through the same positions every pass)."""
        if position in self._plans:
            return self._plans[position]
        row = position + self.shift
        active = np.flatnonzero((self.windows[:, 0] <= position) & (position < self.windows[:, 1]))
        plan = None
        if active.size and 0 <= row < self.source.shape[0]:
            rows = np.concatenate([self.groups[i] for i in active])
            cols = np.repeat(self.group_columns[active], [self.groups[i].size for i in active])
            plan = (rows * self.shape[1] + cols, row * self.shape[0] + rows)
        self._plans[position] = plan
        return plan

    def after_update(self, x: np.ndarray) -> None:
        assert x.flags.c_contiguous and x.shape == self.shape
        plan = self._plan(self.position)
        self.position += 1
        if plan is not None:
            x.reshape(-1)[plan[0]] = self.source.reshape(-1)[plan[1]]


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
        if hooks is not None:  # the hooks of the analyses assume one update per token
            require_fly_llm_operator(ck, "the batch engine with hooks")
        self.checkpoint = ck
        self.config = cfg
        self.streams = streams
        self.columns = kernels.padded_columns(streams)
        self.hooks = hooks
        n, w = cfg.neurons, self.columns
        self.wte = as_f32(ck.wte)
        self.in_proj = as_f32(ck.in_proj)
        self.gain = as_f32(ck.gain)[:, None]
        self.rec_gain = as_f32(ck.rec_gain)[:, None]
        self.bias = as_f32(ck.bias)[:, None]
        self.ln_weight = as_f32(ck.ln_weight)[:, None]
        self.ln_bias = as_f32(ck.ln_bias)[:, None]
        self.in_index = np.ascontiguousarray(ck.in_index, dtype=np.intp)
        self.out_index = None if ck.out_index_is_identity() else np.ascontiguousarray(
            ck.out_index, dtype=np.intp)
        self.head = None if ck.head is None else as_f32(ck.head)
        self.head_a = None if ck.head_a is None else as_f32(ck.head_a)
        self.head_b = None if ck.head_b is None else as_f32(ck.head_b)
        self._leak: np.float32 | np.ndarray = np.float32(cfg.leak)
        self._keep: np.float32 | np.ndarray = np.float32(1.0 - cfg.leak)
        if ck.leak_vector is not None:  # as the single-stream engine
            leak64 = np.asarray(ck.leak_vector, dtype=np.float64)[:, None]
            self._leak = leak64.astype(np.float32)
            self._keep = (1.0 - leak64).astype(np.float32)
        self.in_bias = None if ck.in_bias is None else as_f32(ck.in_bias)[:, None]
        self.head_bias = None if ck.head_bias is None else as_f32(ck.head_bias)[:, None]
        self._microsteps = int(cfg.microsteps)

        self._kernel_request = kernel
        self.kernel: str | None = None
        self.threads = max(1, threads if threads is not None else default_threads())
        self._blocks = split_rows(np.asarray(ck.w_offsets), np.asarray(ck.w_indices),
                                          as_f32(ck.w_values), self.threads)
        self._pool = ThreadPoolExecutor(len(self._blocks), thread_name_prefix="flyviz-spmm") \
            if len(self._blocks) > 1 else None

        self._x = np.zeros((n, w), dtype=np.float32)
        self._pre = np.zeros((n, w), dtype=np.float32)
        # Scratch of every step, kept: a fresh (neurons, columns) temporary per step costs
        # its page faults again wherever malloc returns freed memory at once (Dask workers
        # set MALLOC_TRIM_THRESHOLD_): 15 % of a full-size step with 64 columns.
        self._drive = np.empty((w, cfg.delay_k, 1, cfg.neurons_per_slot), dtype=np.float32)
        self._gathered = np.empty((self.in_index.size, w), dtype=np.float32)
        self._norm: dict[str, np.ndarray] = {}
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
        with SINGLE_THREADED_BLAS:
            self._step(full)
            return self.readout() if logits else None

    def drive(self, tokens: np.ndarray) -> np.ndarray:
        """Input drive of every internal column given the delay lines, ``(columns, delay_k,
        slot)`` (an internal buffer, overwritten by the next call)."""
        k = self.config.delay_k
        history = np.empty((self.columns, k), dtype=np.int64)
        history[:, 0] = tokens
        history[:, 1:] = self.recent[:, ::-1][:, :k - 1]
        embeddings = self.wte[history]                           # (columns, k, d)
        # (1, d) @ (d, slot) per column and slot, as the single-stream engine computes it,
        # so that the drive has the same bits (one GEMM per slot rounds differently and
        # is only ~1 ms per step faster at full size with 64 columns).
        return np.matmul(embeddings[:, :, None, :], self.in_proj[None],
                         out=self._drive)[:, :, 0, :]

    def _step(self, tokens: np.ndarray) -> None:
        drive_t = None
        for _ in range(self._microsteps):  # FlyGPT: more than one update, the drive held
            drive_t = self._update(tokens, drive_t)
        self.recent[:, :-1] = self.recent[:, 1:]
        self.recent[:, -1] = tokens
        self.positions += 1

    def _update(self, tokens: np.ndarray, drive_t: np.ndarray | None) -> np.ndarray:
        """One update of every column's state; return the drive ``(n_inputs, columns)`` it
        used (``drive_t``, or the tokens' drive computed after ``W @ X`` when ``None``, the
        order the Fly LLM's batch step always had)."""
        hooks = self.hooks
        x = self._x
        source = x if hooks is None else hooks.product_input(x)
        pre = self.recurrent_input(source)                       # W @ X_prev
        if hooks is not None:
            hooks.product_output(pre)
        pre *= self.rec_gain
        if drive_t is None:
            drive_t = self.drive(tokens).reshape(self.columns, -1).T   # (n_inputs, columns)
            if self.in_bias is not None:  # FlyGPT: a biased input map (a new array)
                drive_t = drive_t + self.in_bias
        # pre[in_index] += drive (in_index is unique, so gather, add, scatter is that add;
        # mode="clip" because take buffers its out= in a temporary under the default
        # mode, and a checkpoint's in_index is checked when it is loaded).
        gathered = np.take(pre, self.in_index, axis=0, out=self._gathered, mode="clip")
        gathered += drive_t
        pre[self.in_index] = gathered
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
        return drive_t

    def _scratch(self, name: str) -> np.ndarray:
        """A kept ``(n_out, streams)`` float32 buffer of the readout."""
        buffer = self._norm.get(name)
        if buffer is None:
            n_out = self.config.neurons if self.out_index is None else self.out_index.size
            buffer = self._norm[name] = np.empty((n_out, self.streams), dtype=np.float32)
        return buffer

    def layer_norm(self) -> np.ndarray:
        """The readout's LayerNorm of every stream's state, ``(n_out, streams)`` float32 (an
        internal buffer, overwritten by the next call)."""
        x = self.state
        h = x if self.out_index is None else np.take(x, self.out_index, axis=0, mode="clip",
                                                     out=self._scratch("read"))
        mean = h.mean(axis=0, dtype=np.float64).astype(np.float32)
        centred = np.subtract(h, mean, out=self._scratch("centred"))
        squares = np.square(centred, out=self._scratch("squares"))
        var = squares.mean(axis=0, dtype=np.float64)
        inv = (1.0 / np.sqrt(var + self.config.layer_norm_eps)).astype(np.float32)
        centred *= inv
        centred *= self.ln_weight
        centred += self.ln_bias
        return centred

    def readout(self) -> np.ndarray:
        """Next-token logits of every stream, ``(streams, vocabulary)`` float32."""
        if self.config.layer_norm:
            normed = self.layer_norm()
        else:  # FlyGPT: the read-out neurons' states as they are
            x = self.state
            normed = x if self.out_index is None else np.take(
                x, self.out_index, axis=0, mode="clip", out=self._scratch("read"))
        if self.head is not None:
            logits = self.head @ normed
        else:
            assert self.head_a is not None and self.head_b is not None
            logits = self.head_b @ (self.head_a @ normed)
        if self.head_bias is not None:
            logits += self.head_bias
        return np.ascontiguousarray(logits.T)
