"""Why this token? What explains the value of one logit: :func:`explain` and :class:`Attribution`.

The explained value at the step at position ``P`` is ``L = logit[target] -
mean(logits)`` (or ``logit[target] - logit[versus]``). With the LayerNorm's
scale frozen at its value in ``x_P`` it is affine in the state, ``L = c . x_P
+ const`` (the mean subtraction is linear and stays), so the backward sweep of
:mod:`flyviz.model.attribution` seeded with ``c`` at ``P`` splits ``L`` exactly
into what every source brought (``explain.md`` section 1)::

    L = const + sum(token flows) + pad flow + bias flow (+ stimulation, clamp flows)
        + what the state before the window carries

and gives per neuron and position the *node flow* ``f_i(t) = v_t(i) x_i(t)``
(the part of ``L`` that ``x_i(t)`` carries forward, by every path) and per
synapse the *edge flow* ``v_t(i) lam s_i g_i r_i W'_ij x_j(t-1)``. The pruned
graph and its JSON forms live in :mod:`flyviz.model.explain_graph`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.model.attribution import (DECOMPOSITION, GRADIENT, BackwardEngine, Sweep, Tape,
                                      check_mode, incoming_currents, record_tape)
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.engine import Engine
from flyviz.model.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.explain_graph import Graph
    from flyviz.model.tokenizer import FlyTokenizer

GROUPINGS = ("superclass", "cell_type", "side")

#: Steps a trace sweeps back by default. Freezing the tanh gains makes each step linear,
#: and on the demo brain its product over many steps grows: the cotangents stay of the
#: order of L for about 128 steps and then grow about 3 % a step, so the flows become huge
#: terms that cancel and float32 rounding swamps L (measured on story and random text,
#: positions 199..1999: completeness error at most 1.4e-5 within 128 steps, at most 4.5e-3
#: within 256, up to 1.2e-2 x L at 384 and 2e23 x L at 2,000; docs/why.md).
DEFAULT_WINDOW = 128

#: The completeness error, as a share of ``max(1, |L|)``, above which a decomposition's
#: flows are not presented as adding up to L (:attr:`Attribution.complete`).
COMPLETENESS_TOLERANCE = 1e-3

#: Bytes a trace holds per neuron and step of its window, at its peak (the tape's x and s,
#: the cotangents, the node flows, and the pruned graph's influence and its sort; measured
#: 46 on the demo brain over 2,000 steps), and the gradient mode's slopes on top.
TRACE_BYTES_PER_NEURON_STEP = 48
SLOPE_BYTES_PER_NEURON_STEP = 4


class IncompleteAttributionWarning(UserWarning):
    """A decomposition whose flows do not add up to ``L`` within
    :data:`COMPLETENESS_TOLERANCE` (see :attr:`Attribution.complete`)."""


def readout_cotangent(checkpoint: Checkpoint, x: np.ndarray, target: int,
                      versus: int | None = None, mode: str = DECOMPOSITION
                      ) -> tuple[np.ndarray, float]:
    """``(c, const)`` with ``L = c . x + const`` at the LayerNorm scale of ``x``.

    ``L = logit[target] - mean(logits)``, or ``- logit[versus]``. In the
    ``"gradient"`` mode ``c`` is the true ``dL/dx`` (the scale's own
    dependence on ``x`` included) and ``const`` is what the decomposition's
    would be. ``c`` is float64.
    """
    check_mode(mode)
    vocabulary = checkpoint.config.vocabulary
    # a = head^T e with e = one-hot(target) - 1/V (or - one-hot(versus)), by rows.
    if checkpoint.head is not None:
        head = np.asarray(checkpoint.head)
        a = head[target].astype(np.float64)
        a -= (head[versus].astype(np.float64) if versus is not None
              else head.mean(axis=0, dtype=np.float64))
    else:
        head_a = np.asarray(checkpoint.head_a, dtype=np.float64)
        head_b = np.asarray(checkpoint.head_b, dtype=np.float64)
        e = head_b[target] - (head_b[versus] if versus is not None
                              else head_b.sum(axis=0) / vocabulary)
        a = head_a.T @ e
    return _through_layer_norm(checkpoint, x, a, mode)


def logit_cotangent(checkpoint: Checkpoint, x: np.ndarray, weights: np.ndarray,
                    mode: str = GRADIENT) -> tuple[np.ndarray, float]:
    """``(c, const)`` for ``L = weights . logits(x)``, any weights over the vocabulary.

    The seed of a sweep for any readout-side quantity: with ``weights =
    softmax(logits) - one_hot(next token)`` it is the cross-entropy's gradient
    at one position (teacher-forced losses, estimated lesions), with a one-hot
    minus the mean what :func:`readout_cotangent` computes.
    """
    check_mode(mode)
    e = np.asarray(weights, dtype=np.float64)
    if e.shape != (checkpoint.config.vocabulary,):
        raise InputError(f"logit weights must be one value per token "
                         f"({checkpoint.config.vocabulary})")
    if checkpoint.head is not None:
        a = (e.astype(np.float32) @ np.asarray(checkpoint.head)).astype(np.float64)
    else:
        a = np.asarray(checkpoint.head_a, dtype=np.float64).T @ (
            e @ np.asarray(checkpoint.head_b, dtype=np.float64))
    return _through_layer_norm(checkpoint, x, a, mode)


def _through_layer_norm(checkpoint: Checkpoint, x: np.ndarray, a: np.ndarray,
                        mode: str) -> tuple[np.ndarray, float]:
    """``(c, const)`` of ``a . LayerNorm(x[out_index])``: ``a`` is the head's cotangent."""
    cfg = checkpoint.config
    out_index = None if checkpoint.out_index_is_identity() else np.asarray(
        checkpoint.out_index, dtype=np.intp)
    h = np.asarray(x, dtype=np.float32)
    h = h if out_index is None else h[out_index]
    # The scale as the engine's readout computes it (float32 where it does).
    mean = h.mean(dtype=np.float64)
    var = np.square(h - np.float32(mean), dtype=np.float32).mean(dtype=np.float64)
    inv = float(np.float32(1.0 / np.sqrt(var + cfg.layer_norm_eps)))
    q = a * np.asarray(checkpoint.ln_weight, dtype=np.float64)
    const = float(a @ np.asarray(checkpoint.ln_bias, dtype=np.float64))
    c_h = inv * (q - q.mean())
    if mode == GRADIENT:
        normed = (h.astype(np.float64) - mean) * inv
        c_h -= inv * normed * float(np.mean(q * normed))
    if out_index is None:
        return c_h, const
    c = np.zeros(cfg.neurons)
    np.add.at(c, out_index, c_h)
    return c, const


def explained_value(logits: np.ndarray, target: int, versus: int | None = None) -> float:
    """``logit[target] - mean(logits)`` or ``logit[target] - logit[versus]`` (float64)."""
    z = np.asarray(logits, dtype=np.float64)
    return float(z[target] - (z[versus] if versus is not None else z.mean()))


def token_id(tokenizer: "FlyTokenizer", vocabulary: int, value: int | str, what: str) -> int:
    """One token id from an id, ``"id:N"``, or a text that is exactly one token."""
    if isinstance(value, str) and value.startswith("id:"):
        # "id:N" is always an id (a negative or a word after it is a bad id, not text).
        try:
            value = int(value[3:].strip())
        except ValueError:
            raise InputError(f"{what} {value!r} is not a token id: give id:N with N a whole "
                             f"number 0..{vocabulary - 1}") from None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if not 0 <= int(value) < vocabulary:
            raise InputError(f"{what} token id {int(value)} is outside the vocabulary "
                             f"0..{vocabulary - 1}")
        return int(value)
    text = str(value)
    ids = tokenizer.encode(text, what=f"the {what} token") if text else []
    if len(ids) != 1:
        shown = " + ".join(repr(tokenizer.token_text(i)) for i in ids[:6])
        detail = f"{len(ids)} tokens ({shown})" if ids else "no token"
        raise InputError(f"{what} {text!r} is {detail}, not one token of this model's "
                         "vocabulary; give a single token (often with its leading space, "
                         "e.g. ' Lily')")
    return int(ids[0])


class Attribution:
    """What explains the value ``L`` of one logit at one position (see :func:`explain`).

    Attributes
    ----------
    mode
        ``"decomposition"`` (flows add up to ``L``) or ``"gradient"``
        (``v_t = dL/dx_t``; flows are gradient × activation, a sensitivity).
    position, target, versus, value
        The step explained, the token ids, and ``L``.
    prompt_ids, token_texts
        The tokens read at positions ``0..position`` and their texts.
    target_text, versus_text
        Texts of the tokens.
    window_start
        The first position of the window (``0``: the whole run).
    token_flows
        ``(position + 1,)`` float64: the flow of the token read at each position,
        summed over the delay slots it entered through within the window.
    pad_flow, bias_flow, stimulation_flow, clamp_flow
        The delay line's padding, every step's bias, stimulations and clamps.
    earlier_flow
        What the state before the window carries (0 for the whole run).
    constant
        ``const`` of ``L = c . x_P + const``.
    completeness_error
        ``L - (sum of all sources + constant)`` (decomposition; ``None`` in the
        gradient mode, where flows do not add up).
    tolerance
        The largest completeness error that still counts as adding up:
        :data:`COMPLETENESS_TOLERANCE` × ``max(1, |L|)``.
    complete
        True when the flows add up to ``L`` within :attr:`tolerance`; False when
        they do not (a long window: the sweep's cotangents grew until float32
        rounding swamped ``L``; :meth:`holding_window` says how far back they
        still add up); ``None`` in the gradient mode.
    """

    def __init__(self, *, checkpoint: Checkpoint, backward: BackwardEngine, tape: Tape,
                 sweep: Sweep, mode: str, position: int, target: int, versus: int | None,
                 value: float, constant: float, token_texts: list[str], target_text: str,
                 versus_text: str | None, model_name: str = "") -> None:
        self.checkpoint = checkpoint
        self.backward = backward
        self.tape = tape
        self.sweep = sweep
        self.mode = mode
        self.position = int(position)
        self.target = int(target)
        self.versus = None if versus is None else int(versus)
        self.value = float(value)
        self.constant = float(constant)
        self.prompt_ids = [int(t) for t in tape.tokens[:position + 1]]
        self.token_texts = token_texts
        self.target_text = target_text
        self.versus_text = versus_text
        self.model_name = model_name or checkpoint.name
        self.window_start = sweep.first
        k = checkpoint.config.delay_k
        flows = np.zeros(self.position + 1)
        pad = 0.0
        for row in range(sweep.slot_flow.shape[0]):
            t = sweep.first + row
            for j in range(k):
                if t - j >= 0:
                    flows[t - j] += sweep.slot_flow[row, j]
                else:
                    pad += sweep.slot_flow[row, j]
        self.token_flows = flows
        self.pad_flow = float(pad)
        self.bias_flow = float(sweep.bias_flow.sum())
        self.stimulation_flow = float(sweep.stimulation_flow.sum())
        self.clamp_flow = float(sweep.clamp_flow.sum())
        self.earlier_flow = float(sweep.before)
        with np.errstate(over="ignore", invalid="ignore"):     # an overflowed sweep: NaN
            total = (flows.sum() + self.pad_flow + self.bias_flow + self.stimulation_flow
                     + self.clamp_flow + self.earlier_flow + self.constant)
        self.completeness_error: float | None = (float(self.value - total)
                                                 if mode == DECOMPOSITION else None)
        self.tolerance = COMPLETENESS_TOLERANCE * max(1.0, abs(self.value))
        self.complete: bool | None = None if self.completeness_error is None else \
            bool(abs(self.completeness_error) <= self.tolerance)   # NaN/inf: False
        self._holding: int | None = None
        self._node_flows: np.ndarray | None = None
        self._masks: dict[int, np.ndarray] = {}
        self._factors: dict[int, np.ndarray] = {}
        self._graphs: dict[tuple[Any, ...], "Graph"] = {}

    # ------------------------------------------------------------ exactness
    def window_errors(self) -> np.ndarray:
        """``(window,)`` float64: the completeness error the decomposition would have had
        with a window starting at each of this window's positions (rows follow
        :attr:`positions`; the last row is a window of 1 step, the first this one), from
        this sweep's cotangents: ``L - const - (the sources of steps t..P) - v_{t-1} .
        x_{t-1}``. A shorter window's sweep takes the same steps, so these are its errors."""
        if self.mode != DECOMPOSITION:
            raise ValueError("the gradient mode's flows do not add up: it has no "
                             "completeness error")
        sweep = self.sweep
        assert sweep.cotangents is not None
        per_step = (sweep.bias_flow + sweep.stimulation_flow + sweep.clamp_flow
                    + sweep.slot_flow.sum(axis=1))
        later = np.cumsum(per_step[::-1])[::-1]        # sources of steps t..P
        before = np.empty(per_step.size)
        before[0] = sweep.before
        with np.errstate(over="ignore", invalid="ignore"):     # an overflowed sweep: NaN
            for row in range(1, per_step.size):
                t = self.window_start + row
                before[row] = float(np.dot(sweep.cotangents[row - 1].astype(np.float64),
                                           self.tape.x(t - 1).astype(np.float64)))
            return self.value - self.constant - later - before

    def holding_window(self) -> int | None:
        """The longest window, in steps, up to this one, over which the flows add up: this
        window's length when :attr:`complete`, else the longest shorter window that, with
        every window shorter still, has a completeness error within :attr:`tolerance`
        (:meth:`window_errors`); 0 when not even one step does. ``None`` in the gradient
        mode."""
        if self.complete is None:
            return None
        if self.complete:
            return len(self.positions)
        if self._holding is None:
            errors = self.window_errors()[::-1]         # 1 step, 2 steps, ...
            bad = ~(np.abs(errors) <= self.tolerance)
            self._holding = int(np.argmax(bad)) if bad.any() else int(errors.size)
        return self._holding

    def incompleteness(self, window_option: str = "window=") -> str | None:
        """One sentence saying that the flows do not add up, by how much and what window
        does, naming it as ``window_option`` and the number (``--window `` on the command
        line); ``None`` when they add up, and in the gradient mode."""
        if self.complete is not False:
            return None
        steps = len(self.positions)
        holding = self.holding_window()
        advice = (f"trace again with {window_option}{holding} or fewer steps back (the "
                  "longest window that adds up here)" if holding
                  else "no window of this run adds up")
        error = self.completeness_error
        assert error is not None
        size = (f"completeness error {error:+.3g}" if np.isfinite(error)
                else "the sweep's cotangents overflowed float32")
        return (f"the flows do not add up to L = {self.value:+.4g}: {size} over a window "
                f"of {steps} steps (over long windows the sweep's cotangents grow until "
                f"float32 rounding swamps L), so they are not exact; {advice}")

    # ------------------------------------------------------------ the window
    @property
    def positions(self) -> np.ndarray:
        """The window's positions, ``window_start .. position``."""
        return np.arange(self.window_start, self.position + 1)

    @property
    def neurons(self) -> int:
        """Neurons per state."""
        return int(self.checkpoint.config.neurons)

    def cotangent(self, t: int) -> np.ndarray:
        """``v_t``: what a unit of ``x_i(t)`` is worth in units of ``L`` (float32)."""
        self._check_position(t)
        return self.sweep.cotangent(t)

    def _check_position(self, t: int) -> int:
        if not self.window_start <= int(t) <= self.position:
            raise InputError(f"position {t} is outside the window {self.window_start}.."
                             f"{self.position}")
        return int(t)

    def node_flows(self) -> np.ndarray:
        """``(window, neurons)`` float64: ``f_i(t) = v_t(i) x_i(t)`` for every position of
        the window (rows follow :attr:`positions`)."""
        if self._node_flows is None:
            assert self.sweep.cotangents is not None
            x = np.stack([self.tape.x(t) for t in self.positions]).astype(np.float64)
            self._node_flows = x * self.sweep.cotangents
        return self._node_flows

    def node_flow(self, t: int) -> np.ndarray:
        """``f(t)`` for one position of the window."""
        return self.node_flows()[self._check_position(t) - self.window_start]

    def mask(self, t: int) -> np.ndarray:
        """``m_t / v_t``: False where a silence or clamp set the neuron at step ``t``."""
        if t not in self._masks:
            mask, _ = self.backward.set_at(self.tape.interventions, t)
            self._masks[t] = ~mask
        return self._masks[t]

    def post_factor(self, t: int) -> np.ndarray:
        """``m_t(i) lam d_i g_i r_i`` (float64): turns a current ``W'_ij x_j(t-1)`` into
        units of ``L`` (kept per step: the graph asks for it node by node)."""
        self._check_position(t)
        if t not in self._factors:
            bw = self.backward
            d = self.tape.s(t) if self.mode == DECOMPOSITION else self.tape.slope(t)
            m = self.cotangent(t).astype(np.float64) * self.mask(t)
            self._factors[t] = m * float(bw.leak) * d * bw.gain * bw.rec_gain
        return self._factors[t]

    # ------------------------------------------------------------ edges
    def edge_flows(self, post: int, position: int | None = None,
                   limit: int | None = None) -> dict[str, np.ndarray]:
        """The flows of the synapses into ``post`` at ``position`` (default: the explained
        one), strongest first: ``{"pre", "flow", "current", "weight"}``.

        One computation with the Inspector's currents
        (:func:`~flyviz.model.attribution.incoming_currents`): ``flow = current ×
        m_t(post) lam d g r``.
        """
        t = self.position if position is None else self._check_position(position)
        currents = incoming_currents(self.checkpoint, post, self.tape.x(t - 1),
                                     interventions=self.tape.interventions, position=t,
                                     limit=limit)
        factor = self.post_factor(t)[int(post)]
        return {"pre": currents.pre, "flow": currents.currents.astype(np.float64) * factor,
                "current": currents.currents, "weight": currents.weights}

    def step_edge_flows(self, position: int | None = None, top: int = 50
                        ) -> dict[str, np.ndarray]:
        """The ``top`` synapses of the whole brain into ``position`` by ``|flow|``:
        ``{"pre", "post", "flow"}`` (one pass over the graph's weights)."""
        t = self.position if position is None else self._check_position(position)
        bw = self.backward
        weights = bw.weights(self.tape.interventions, t)
        factor = self.post_factor(t).astype(np.float32)
        offsets = bw.w_offsets
        per_row = np.repeat(factor, np.diff(offsets))
        flows = per_row * weights * self.tape.x(t - 1)[bw.w_indices]
        top = max(0, min(int(top), flows.size))
        if top == 0:
            empty = np.zeros(0, dtype=np.int64)
            return {"pre": empty, "post": empty, "flow": np.zeros(0)}
        pick = np.argpartition(-np.abs(flows), top - 1)[:top]
        pick = pick[np.argsort(-np.abs(flows[pick]), kind="stable")]
        post = np.searchsorted(offsets, pick, side="right") - 1
        return {"pre": np.asarray(bw.w_indices[pick], dtype=np.int64),
                "post": post.astype(np.int64), "flow": flows[pick].astype(np.float64)}

    # ------------------------------------------------------------ groups
    def labels(self, by: str) -> list[str]:
        """Every neuron's label of grouping ``by`` (``superclass``, ``cell_type``, ``side``)."""
        if by not in GROUPINGS:
            raise InputError(f"group by {by!r}: expected one of {', '.join(GROUPINGS)}")
        anatomy = self.checkpoint.anatomy
        values = None if anatomy is None else getattr(anatomy, by)
        if values is None:
            return ["unlabelled"] * self.neurons
        return [str(v) if str(v).strip() else "unlabelled" for v in values]

    def group_flows(self, by: str = "superclass") -> tuple[list[str], np.ndarray]:
        """``(names, flows)``: the node flows summed by label, ``(window, groups)`` float64
        (rows follow :attr:`positions`; the connectome's own supernodes)."""
        labels = self.labels(by)
        names, inverse = np.unique(np.asarray(labels, dtype=object).astype(str),
                                   return_inverse=True)
        flows = self.node_flows()
        out = np.zeros((flows.shape[0], names.size))
        for row in range(flows.shape[0]):
            out[row] = np.bincount(inverse, weights=flows[row], minlength=names.size)
        return [str(n) for n in names], out

    def top_neurons(self, position: int | None = None, count: int = 10) -> list[int]:
        """The ``count`` neurons with the largest ``|f_i|`` at ``position`` (default P)."""
        f = self.node_flow(self.position if position is None else position)
        order = np.argsort(-np.abs(f), kind="stable")[:count]
        return [int(i) for i in order]

    # ------------------------------------------------------------ graph and forms
    def graph(self, nodes: int = 500, node_threshold: float = 0.8,
              edge_threshold: float = 0.98) -> "Graph":
        """The pruned graph (:func:`flyviz.model.explain_graph.prune`), computed once."""
        from flyviz.model.explain_graph import prune

        key = (int(nodes), float(node_threshold), float(edge_threshold))
        if key not in self._graphs:
            self._graphs[key] = prune(self, nodes=nodes, node_threshold=node_threshold,
                                      edge_threshold=edge_threshold)
        return self._graphs[key]

    def to_json(self, nodes: int = 500, top: int = 50) -> dict[str, Any]:
        """The JSON object ``flyviz trace --json`` prints (see :func:`flyviz.model.explain_graph.to_json`)."""
        from flyviz.model.explain_graph import to_json

        return to_json(self, nodes=nodes, top=top)

    def to_circuit_tracer_json(self, nodes: int = 500) -> dict[str, Any]:
        """The pruned graph as the circuit-tracer / Neuronpedia front end reads it."""
        from flyviz.model.explain_graph import to_circuit_tracer_json

        return to_circuit_tracer_json(self, nodes=nodes)

    def to_xarray(self, model: Any = None) -> Any:
        """Node flows, states and cotangents as an :class:`xarray.Dataset` (position ×
        neuron) with the neurons' labels (``model``: what :func:`flyviz.load` returned,
        a checkpoint or an anatomy; default this attribution's checkpoint)."""
        from flyviz.model.explain_graph import to_xarray

        return to_xarray(self, model)

    def __repr__(self) -> str:
        error = "" if self.completeness_error is None else \
            f", completeness error {self.completeness_error:.2e}" + \
            ("" if self.complete else " (the flows do not add up)")
        return (f"<flyviz.Attribution {self.mode}: L = {self.value:+.4f} for "
                f"{self.target_text!r} at position {self.position}, window "
                f"{self.window_start}..{self.position}{error}>")


def check_position_type(position: Any) -> int:
    """``position`` as an int when it is a whole number of steps (not a bool: ``True``
    would be read as step 1), else an :class:`InputError`."""
    if isinstance(position, bool) or not isinstance(position, (int, np.integer)):
        raise InputError(f"position {position!r} is not a whole number: give the step to "
                         "explain, 0 for BOS")
    return int(position)


def available_memory() -> int | None:
    """Bytes of memory the system can give without swapping (``MemAvailable``), or ``None``
    where that cannot be read."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - psutil is optional; the kernel's own figure next
        pass
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def trace_memory(neurons: int, vocabulary: int, window: int, mode: str = DECOMPOSITION) -> int:
    """Bytes a trace over ``window`` steps holds at its peak, besides the model
    (:data:`TRACE_BYTES_PER_NEURON_STEP`; the tape keeps the window's steps only)."""
    per_step = TRACE_BYTES_PER_NEURON_STEP + (SLOPE_BYTES_PER_NEURON_STEP
                                              if mode == GRADIENT else 0)
    return int(window + 1) * (int(neurons) * per_step + int(vocabulary) * 4)


def check_trace_memory(neurons: int, vocabulary: int, window: int, mode: str = DECOMPOSITION,
                       available: int | None = None) -> None:
    """Refuse, before any work, a trace whose window would not fit in the memory
    available (``available``: bytes, default :func:`available_memory`).

    Raises
    ------
    InputError
        Naming what it needs, what there is, and the longest window that fits.
    """
    free = available_memory() if available is None else int(available)
    need = trace_memory(neurons, vocabulary, window, mode)
    if free is None or need <= free:
        return
    per_step = max(1, trace_memory(neurons, vocabulary, 1, mode) // 2)
    fits = max(0, int(0.8 * free) // per_step - 1)
    advice = (f"give a window of at most {fits:,} steps back (--window {fits}; the flows add "
              f"up over far fewer: the default is {DEFAULT_WINDOW})" if fits
              else "close other programs")
    raise InputError(f"this trace over {window:,} steps would need about {_size(need)} of "
                     f"memory ({neurons:,} neurons a step) but {_size(free)} is available: "
                     f"{advice}")


def _size(count: int) -> str:
    """``"3.1 GiB"``, ``"250 MiB"``: a memory size in words."""
    return f"{count / 2**30:.1f} GiB" if count >= 2**30 else f"{count / 2**20:.0f} MiB"


def check_window(window: int | None, position: int) -> int:
    """The first position of a window of ``window`` steps ending at ``position``
    (``None``: the whole run; longer than the run: the whole run)."""
    if window is None:
        return 0
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)):
        raise InputError(f"window {window!r} must be a whole number of steps")
    if window < 1:
        raise InputError(f"window {int(window)} is empty: give at least 1 step back "
                         "(or none for the whole run)")
    return max(0, position - int(window) + 1)


def explain(engine: Engine, backward: BackwardEngine, tokenizer: "FlyTokenizer",
            ids: Sequence[int], *, position: int | None = None,
            target: int | str | None = None, versus: int | str | None = None,
            window: int | None = DEFAULT_WINDOW, mode: str = DECOMPOSITION,
            interventions: Any = None, tape: Tape | None = None, model_name: str = "",
            should_stop: Callable[[], bool] | None = None) -> Attribution:
    """Run ``ids`` (BOS first) up to ``position`` and explain the logit chosen there.

    Parameters
    ----------
    engine, backward
        The forward and the backward engine of one checkpoint.
    tokenizer
        For texts of tokens and a text ``target``/``versus``.
    ids
        The tokens read, one per step.
    position
        The step explained (default: the last of ``ids``).
    target
        Token id or one-token text (default: the most likely token there).
    versus
        Explain ``logit[target] - logit[versus]`` instead of ``- mean(logits)``.
    window
        Steps back to sweep (default :data:`DEFAULT_WINDOW`; ``None``: all of the run).
        Over long windows the flows stop adding up (see :attr:`Attribution.complete`).
    mode
        ``"decomposition"`` or ``"gradient"``.
    interventions
        Set on ``engine`` for this run (default: the engine's own).
    tape
        A tape of this run already recorded (skips the forward pass).
    should_stop
        Polled between the backward steps (cancel).

    Raises
    ------
    InputError
        For a position outside the run, a target that is not one token, an
        empty window, a mode that is not known, a window that would not fit in
        the memory available.

    Warns
    -----
    IncompleteAttributionWarning
        When the decomposition's flows do not add up to ``L``
        (:meth:`Attribution.incompleteness` says by how much and what window does).
    """
    check_mode(mode)
    ck = backward.checkpoint
    vocabulary = ck.config.vocabulary
    ids = [int(t) for t in ids]
    if not ids:
        raise InputError("nothing to explain: the run reads no token")
    last = len(ids) - 1
    if position is None:
        position = last
    position = check_position_type(position)
    if not 0 <= position <= last:
        raise InputError(f"position {position} is outside the run: give one of 0..{last} "
                         "(0 is BOS)")
    first = check_window(window, position)
    versus_id = None if versus is None else token_id(tokenizer, vocabulary, versus, "versus")
    target_id = None if target is None else token_id(tokenizer, vocabulary, target, "target")
    check_trace_memory(ck.config.neurons, vocabulary, position - first + 1, mode)
    keep_from = max(0, first - 1)                  # the sweep reads x_{first-1}
    if tape is None or tape.steps <= position or tape.keep_from > keep_from \
            or (mode == GRADIENT and not tape.keeps_slopes):
        tape = record_tape(engine, ids[:position + 1], slopes=mode == GRADIENT,
                           interventions=interventions, keep_from=keep_from)
    logits = tape.logits(position)
    if target_id is None:
        target_id = int(np.argmax(logits))
    if versus_id is not None and versus_id == target_id:
        raise InputError(f"versus is the target itself ({tokenizer.token_text(target_id)!r}): "
                         "the difference is 0")
    c, const = readout_cotangent(ck, tape.x(position), target_id, versus_id, mode)
    sweep = backward.sweep(tape, {position: c}, mode=mode, first=first,
                           should_stop=should_stop)
    attribution = Attribution(
        checkpoint=ck, backward=backward, tape=tape, sweep=sweep, mode=mode,
        position=position, target=target_id, versus=versus_id,
        value=explained_value(logits, target_id, versus_id), constant=const,
        token_texts=[tokenizer.token_text(t) for t in ids[:position + 1]],
        target_text=tokenizer.token_text(target_id),
        versus_text=None if versus_id is None else tokenizer.token_text(versus_id),
        model_name=model_name)
    note = attribution.incompleteness()
    if note is not None:
        warnings.warn(note, IncompleteAttributionWarning, stacklevel=2)
    return attribution
