"""The engine's sparse product ``W @ x`` on a block of rows: scipy, or a compiled SIMD kernel.

Two kernels, bit-for-bit the same results:

``scipy``
    scipy's ``_sparsetools.csr_matvec`` on the CSR rows as loaded. Always
    available; it releases the GIL. It runs one scalar multiply-add chain
    per row, about 1 ns per edge per thread on the development machine.
``llvm``
    A small kernel written in LLVM IR and compiled for this CPU by llvmlite
    (~50 ms, on first use, in the thread that first steps an engine; nothing
    is cached or compiled at import). The rows are laid out in slices of 8
    (SELL-8): the 8 rows of a slice sit in the 8 lanes of one vector, edge
    ``e`` of each row side by side, so one iteration loads 8 weights and 8
    source indices with two vector loads, gathers the 8 ``x`` values and
    adds 8 products into 8 running sums. Each lane adds its own row's
    products in CSR order with separate multiply and add, exactly as scipy
    does, so the sums are identical; padding lanes are masked and add +0.
    Rows are sorted by length (longest first) before slicing, which keeps
    the padding to a fraction of a percent. Slices run two at a time, so
    that two independent chains of adds are in flight (one slice's adds wait
    on each other; measured ~10% faster than one slice at a time on the
    full-size graph, same bits). It is called through ctypes,
    which releases the GIL, so the engine's threads and background overlap
    work as with scipy. Source indices are 16-bit when the graph has at most
    65,536 neurons (6 bytes per edge instead of 8). The layout is a copy of
    the graph (6 or 8 bytes per edge), made once per engine.

An engine runs the kernel its caller names, else the one ``FLYVIZ_KERNEL``
(``scipy`` or ``llvm``) names, else :data:`DEFAULT_KERNEL`. Where llvm is
wanted but llvmlite is missing or cannot compile the IR, scipy runs and
:func:`status` says why.
"""

from __future__ import annotations

import copy
import ctypes
import os
import threading
import time
from typing import Any, Protocol

import numpy as np
from scipy.sparse import _sparsetools

ENV_VAR = "FLYVIZ_KERNEL"
KERNELS = ("scipy", "llvm")
#: The kernel an engine runs when neither its caller nor ``FLYVIZ_KERNEL`` chooses.
#: Still scipy until ``flyviz bench``'s test of the floor's byte count (which
#: assumes CSR arrays) covers the llvm layout.
DEFAULT_KERNEL = "scipy"
LANES = 8  # rows per slice: one 256-bit vector of float32 (16 lanes measured no faster)


class RowBlock(Protocol):
    """What the engine needs from a block of rows laid out for one kernel."""

    def matvec(self, x: np.ndarray, out: np.ndarray) -> None:
        """Write this block's rows of ``W @ x`` into ``out``."""

    def buffers(self) -> dict[str, np.ndarray]:
        """The arrays one product reads in full, by name."""

    def with_values(self, data: np.ndarray) -> "RowBlock":
        """The same rows with other weights (same sparsity structure): shares the indices."""


class CsrBlock:
    """CSR rows for scipy's kernel (int32 or int64 indices, as it requires)."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                 neurons: int) -> None:
        index_dtype = indptr.dtype  # scipy wants the same type for both
        self.indptr = indptr
        self.indices = np.ascontiguousarray(indices, dtype=index_dtype)
        self.data = data
        self.neurons = neurons

    def matvec(self, x: np.ndarray, out: np.ndarray) -> None:
        """``out = W_block @ x`` (scipy adds into ``out``, hence the clear)."""
        out.fill(0.0)
        _sparsetools.csr_matvec(out.shape[0], self.neurons, self.indptr, self.indices,
                                self.data, x, out)

    def buffers(self) -> dict[str, np.ndarray]:
        """Row offsets, indices, weights."""
        return {"w_offsets": self.indptr, "w_indices": self.indices, "w_values": self.data}

    def with_values(self, data: np.ndarray) -> "CsrBlock":
        """The same rows with the weights ``data`` (one per edge, in CSR order)."""
        if data.shape != self.data.shape:
            raise ValueError("with_values needs one weight per edge of the block")
        return CsrBlock(self.indptr, self.indices, data, self.neurons)


def _gather_add(tag: str, offset: str, live: str, acc: str, out: str) -> str:
    """IR of one step of a slice: load 8 weights and 8 source indices at ``%offset``,
    gather the live lanes' ``x``, multiply, and add into ``%acc`` giving ``%out`` (names
    of this step's values end in ``tag``)."""
    return f"""  %pv{tag} = getelementptr float, ptr %sval, i64 %{offset}
  %v{tag} = load <{{w}} x float>, ptr %pv{tag}, align 4
  %pi{tag} = getelementptr {{ity}}, ptr %sidx, i64 %{offset}
  %iv{tag} = load <{{w}} x {{ity}}>, ptr %pi{tag}, align {{ialign}}
  %iz{tag} = zext <{{w}} x {{ity}}> %iv{tag} to <{{w}} x i64>
  %ptrs{tag} = getelementptr float, ptr %x, <{{w}} x i64> %iz{tag}
  %g{tag} = call <{{w}} x float> @llvm.masked.gather.v{{w}}f32.v{{w}}p0(
           <{{w}} x ptr> %ptrs{tag}, i32 4, <{{w}} x i1> %{live}, <{{w}} x float> zeroinitializer)
  %p{tag} = fmul <{{w}} x float> %v{tag}, %g{tag}
  %{out} = fadd <{{w}} x float> %{acc}, %p{tag}
"""


# One function per source-index type, {w} lanes. Per slice s: one row per lane,
# `slen` their lengths, edge e of a row at sptr[s] + {w} * e + lane. Slices go in pairs
# (2q, 2q + 1), the first at least as wide as the second (rows are sorted longest
# first), so that two independent sums are in flight: one slice's additions wait on
# each other (the add's latency), the other's fill that wait. The pair runs together
# over the second slice's width, then the first runs on alone. `nslices` is even (the
# layout pads with an empty slice). No fast-math flags anywhere: the multiply and the
# add are rounded separately, as in scipy's loop, and each lane adds its row's products
# in CSR order from +0.
_IR_TEMPLATE = (r"""
define void @sell{w}_{ity}(i64 %nslices, ptr noalias %sptr, ptr noalias %slen,
                        ptr noalias %sidx, ptr noalias %sval, ptr noalias %x,
                        ptr noalias %out) nounwind {{
entry:
  %npairs = lshr i64 %nslices, 1
  %any = icmp ugt i64 %npairs, 0
  br i1 %any, label %pair, label %done
pair:
  %q = phi i64 [0, %entry], [%q1, %store]
  %sa = shl i64 %q, 1
  %sb = add i64 %sa, 1
  %sc = add i64 %sa, 2
  %q1 = add i64 %q, 1
  %ppa = getelementptr i64, ptr %sptr, i64 %sa
  %loa = load i64, ptr %ppa, align 8
  %ppb = getelementptr i64, ptr %sptr, i64 %sb
  %lob = load i64, ptr %ppb, align 8
  %ppc = getelementptr i64, ptr %sptr, i64 %sc
  %hib = load i64, ptr %ppc, align 8
  %owa = mul i64 %sa, {w}
  %owb = add i64 %owa, {w}
  %pla = getelementptr i32, ptr %slen, i64 %owa
  %lensa = load <{w} x i32>, ptr %pla, align 4
  %plb = getelementptr i32, ptr %slen, i64 %owb
  %lensb = load <{w} x i32>, ptr %plb, align 4
  %nb = sub i64 %hib, %lob
  %jend = add i64 %loa, %nb
  %joint = icmp ult i64 %loa, %jend
  br i1 %joint, label %both, label %alone
both:
  %offa = phi i64 [%loa, %pair], [%offa1, %both]
  %offb = phi i64 [%lob, %pair], [%offb1, %both]
  %e = phi i32 [0, %pair], [%e1, %both]
  %acca = phi <{w} x float> [zeroinitializer, %pair], [%acca1, %both]
  %accb = phi <{w} x float> [zeroinitializer, %pair], [%accb1, %both]
  %ev0 = insertelement <{w} x i32> poison, i32 %e, i64 0
  %ev = shufflevector <{w} x i32> %ev0, <{w} x i32> poison, <{w} x i32> zeroinitializer
  %livea = icmp ult <{w} x i32> %ev, %lensa
  %liveb = icmp ult <{w} x i32> %ev, %lensb
""" + _gather_add("a", "offa", "livea", "acca", "acca1")
                + _gather_add("b", "offb", "liveb", "accb", "accb1") + r"""
  %offa1 = add i64 %offa, {w}
  %offb1 = add i64 %offb, {w}
  %e1 = add i32 %e, 1
  %more = icmp ult i64 %offa1, %jend
  br i1 %more, label %both, label %alone
alone:
  %ta0 = phi i64 [%loa, %pair], [%offa1, %both]
  %te0 = phi i32 [0, %pair], [%e1, %both]
  %tacc0 = phi <{w} x float> [zeroinitializer, %pair], [%acca1, %both]
  %resb = phi <{w} x float> [zeroinitializer, %pair], [%accb1, %both]
  %tany = icmp ult i64 %ta0, %lob
  br i1 %tany, label %tail, label %store
tail:
  %ta = phi i64 [%ta0, %alone], [%ta1, %tail]
  %te = phi i32 [%te0, %alone], [%te1, %tail]
  %tacc = phi <{w} x float> [%tacc0, %alone], [%tacc1, %tail]
  %tev0 = insertelement <{w} x i32> poison, i32 %te, i64 0
  %tev = shufflevector <{w} x i32> %tev0, <{w} x i32> poison, <{w} x i32> zeroinitializer
  %tlive = icmp ult <{w} x i32> %tev, %lensa
""" + _gather_add("t", "ta", "tlive", "tacc", "tacc1") + r"""  %ta1 = add i64 %ta, {w}
  %te1 = add i32 %te, 1
  %tmore = icmp ult i64 %ta1, %lob
  br i1 %tmore, label %tail, label %store
store:
  %resa = phi <{w} x float> [%tacc0, %alone], [%tacc1, %tail]
  %poa = getelementptr float, ptr %out, i64 %owa
  store <{w} x float> %resa, ptr %poa, align 4
  %pob = getelementptr float, ptr %out, i64 %owb
  store <{w} x float> %resb, ptr %pob, align 4
  %again = icmp ult i64 %q1, %npairs
  br i1 %again, label %pair, label %done
done:
  ret void
}}
""")


def _ir(w: int) -> str:
    """The module for ``w`` lanes: the gather intrinsic and one function per index type."""
    return (f"declare <{w} x float> @llvm.masked.gather.v{w}f32.v{w}p0(<{w} x ptr>, i32 immarg, "
            f"<{w} x i1>, <{w} x float>)\n"
            + _IR_TEMPLATE.format(ity="i16", ialign=2, w=w)
            + _IR_TEMPLATE.format(ity="i32", ialign=4, w=w))


_Sell = Any  # a ctypes function: (nslices, sptr, slen, sidx, sval, x, out) -> None


class SellBlock:
    """The same rows in SELL-8 layout for the compiled kernel.

    Parameters
    ----------
    indptr, indices, data
        The block's CSR rows (``indptr`` starting at 0).
    neurons
        Columns of ``W``; picks 16-bit source indices when they fit.
    functions
        The compiled kernels by index type (``"i16"``, ``"i32"``).
    """

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                 neurons: int, functions: dict[str, _Sell]) -> None:
        rows = indptr.shape[0] - 1
        # The kernel does not check bounds: an index outside x would read stray memory.
        if indices.size and (int(indices.max()) >= neurons or int(indices.min()) < 0):
            raise ValueError(f"presynaptic indices must lie in 0..{neurons - 1}")
        self.neurons = neurons
        lengths = np.diff(indptr.astype(np.int64))
        # Longest rows first, so that the 8 rows of a slice have nearly equal lengths.
        order = np.argsort(-lengths, kind="stable")
        # An even number of slices: the kernel takes them in pairs (an empty one pads).
        slices = -(-rows // (2 * LANES)) * 2
        slen = np.zeros(slices * LANES, dtype=np.int64)
        slen[:rows] = lengths[order]
        width = slen.reshape(slices, LANES).max(axis=1)
        sptr = np.zeros(slices + 1, dtype=np.int64)
        np.cumsum(width * LANES, out=sptr[1:])
        # position[r]: row r's lane in the slices; edge e of row r goes to
        # sptr[slice] + 8 * e + lane.
        position = np.empty(rows, dtype=np.int64)
        position[order] = np.arange(rows, dtype=np.int64)
        total = int(sptr[-1])
        wide = neurons > 2**16
        self._function = functions["i32" if wide else "i16"]
        self.indptr = indptr
        self.sptr = sptr
        self.slen = slen.astype(np.int32)
        self.position = position
        self.slices = slices
        self.sidx = np.zeros(total, dtype=np.uint32 if wide else np.uint16)
        self.sval = np.zeros(total, dtype=np.float32)
        self._scatter((indices, self.sidx), (data, self.sval))
        self._result = np.zeros(slices * LANES, dtype=np.float32)

    def _scatter(self, *pairs: tuple[np.ndarray, np.ndarray]) -> None:
        """Copy per-edge arrays from CSR order into the SELL-8 layout (``(source, dest)``)."""
        indptr, position, sptr = self.indptr, self.position, self.sptr
        rows = indptr.shape[0] - 1
        lengths: np.ndarray = np.diff(indptr.astype(np.int64))
        # In pieces of rows, so the temporary edge arrays stay small.
        step = max(1, (1 << 20) * rows // max(1, int(indptr[-1])))
        for a in range(0, rows, step):
            b = min(rows, a + step)
            lo, hi = int(indptr[a]), int(indptr[b])
            row = np.repeat(np.arange(a, b, dtype=np.int64), lengths[a:b])
            edge = np.arange(lo, hi, dtype=np.int64) - indptr[row].astype(np.int64)
            dest = sptr[position[row] // LANES] + LANES * edge + position[row] % LANES
            for source, target in pairs:
                target[dest] = source[lo:hi]

    def with_values(self, data: np.ndarray) -> "SellBlock":
        """The same rows with the weights ``data`` (CSR order): shares the indices and
        offsets, lays out only the weights."""
        if data.shape[0] != int(self.indptr[-1]):
            raise ValueError("with_values needs one weight per edge of the block")
        other = copy.copy(self)
        other.sval = np.zeros_like(self.sval)
        other._scatter((data, other.sval))
        other._result = np.zeros_like(self._result)
        return other

    def matvec(self, x: np.ndarray, out: np.ndarray) -> None:
        """``out = W_block @ x``: the kernel fills lanes, then each row takes its lane."""
        if x.dtype != np.float32 or not x.flags.c_contiguous or x.shape[0] != self.neurons:
            raise ValueError("x must be a contiguous float32 vector with one value per neuron")
        self._function(self.slices, self.sptr.ctypes.data, self.slen.ctypes.data,
                       self.sidx.ctypes.data, self.sval.ctypes.data, x.ctypes.data,
                       self._result.ctypes.data)
        np.take(self._result, self.position, out=out)

    def buffers(self) -> dict[str, np.ndarray]:
        """Slice offsets and lengths, indices, weights, the row positions."""
        return {"w_slices": self.sptr, "w_lengths": self.slen, "w_indices": self.sidx,
                "w_values": self.sval, "w_positions": self.position}


_lock = threading.Lock()
_compiled: dict[str, _Sell] | None = None
_keep: list[Any] = []  # the execution engine owns the machine code: keep it alive
_error: str | None = None
_compile_s: float | None = None


def compile_ir(ir: str, functions: dict[str, Any]) -> dict[str, Any]:
    """Compile LLVM IR for this CPU; return ``{name: ctypes function}``.

    ``functions`` maps each function's name in the IR to its ctypes
    signature (``ctypes.CFUNCTYPE(...)``). The machine code is kept alive for
    the life of the process. Raises whatever llvmlite raises when it is
    missing or cannot build the IR.
    """
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(ir)
    module.verify()
    target = llvm.Target.from_default_triple()
    try:  # the host's own vector units (AVX2/AVX-512 gathers where there are some)
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    except Exception:  # some platforms cannot name them: generic code, same results
        cpu, features = "", ""
    machine = target.create_target_machine(cpu=cpu, features=features, opt=3)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    _keep.append((engine, module, machine))
    return {name: signature(engine.get_function_address(name))
            for name, signature in functions.items()}


def _compile() -> dict[str, _Sell]:
    """Compile the SELL kernels for this CPU; return the functions by index type."""
    signature = ctypes.CFUNCTYPE(None, ctypes.c_int64, *[ctypes.c_void_p] * 6)
    found = compile_ir(_ir(LANES), {f"sell{LANES}_{ity}": signature for ity in ("i16", "i32")})
    return {ity: found[f"sell{LANES}_{ity}"] for ity in ("i16", "i32")}


def _compiled_functions() -> dict[str, _Sell] | None:
    global _compiled, _error, _compile_s
    with _lock:
        if _compiled is None and _error is None:
            start = time.perf_counter()
            try:
                _compiled = _compile()
                _compile_s = time.perf_counter() - start
            except Exception as exc:  # no llvmlite, or one that cannot build this IR
                _error = f"{type(exc).__name__}: {exc}"
    return _compiled


def requested_kernel() -> str:
    """The kernel ``FLYVIZ_KERNEL`` names, else :data:`DEFAULT_KERNEL`.

    Raises
    ------
    InputError
        When ``FLYVIZ_KERNEL`` names no kernel (a user's setting, not a bug).
    """
    from flyviz.errors import InputError

    kind = os.environ.get(ENV_VAR, "").strip().lower() or DEFAULT_KERNEL
    if kind not in KERNELS:
        raise InputError(f"{ENV_VAR}={os.environ.get(ENV_VAR)!r} names no sparse kernel; set it "
                         f"to one of {', '.join(KERNELS)} or unset it")
    return kind


def resolve(kind: str | None = None) -> str:
    """The kernel that will run: ``kind``, else ``FLYVIZ_KERNEL``, else :data:`DEFAULT_KERNEL`.

    Compiles the llvm kernel (once per process) if it is wanted. A request
    for llvm where it cannot compile gives scipy; :func:`status` says why.
    """
    if kind is None:
        kind = requested_kernel()
    if kind not in KERNELS:
        raise ValueError(f"unknown kernel {kind!r}; expected one of {', '.join(KERNELS)}")
    if kind == "llvm" and _compiled_functions() is None:
        return "scipy"
    return kind


def make_block(kind: str, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
               neurons: int) -> RowBlock:
    """Lay out one block of CSR rows for ``kind`` (a name :func:`resolve` returned)."""
    if kind == "llvm":
        functions = _compiled_functions()
        assert functions is not None
        return SellBlock(indptr, indices, data, neurons, functions)
    return CsrBlock(indptr, indices, data, neurons)


def status() -> dict[str, object]:
    """What compiling the llvm kernel took in this process (seconds), or why it failed."""
    return {"compile_s": _compile_s, "error": _error or _multi_error}


# --------------------------------------------------------------------------- multi-vector
# ``W @ X`` for a dense (neurons, columns) float32 X, row-major: the batched engine's product
# (:mod:`flyviz.model.batch`), one column per token stream.
#
# scipy's ``csr_matvecs`` adds ``w * X[j, :]`` into the output row edge by edge; on the
# development machine it ran at ~0.2 ns per edge and column on one thread (126 ms for a
# full-size graph and 64 columns), bound by its scalar inner loop over the columns. The
# compiled kernel keeps a group of up to 64 columns of one output row in vector registers
# (<8 x float> accumulators, independent chains), loads the edge's weight and source
# index once and streams the source row of X in vectors. Per column it multiplies and
# adds separately, in CSR order, from +0: the same operations as scipy's loop, so the
# results are bit-identical to scipy's (and so to one column at a time through
# ``csr_matvec``).

MULTI_LANES = 8  # columns must be a multiple of this (floats per narrow vector)
MULTI_VECTOR = 16  # floats per accumulator vector where the group allows (one AVX-512
                   # register; two AVX2 registers elsewhere, legalised by LLVM)
MULTI_GROUP_MAX = 64  # columns one pass over a row keeps in registers (8 accumulators)


def padded_columns(count: int) -> int:
    """``count`` rounded up to a multiple of :data:`MULTI_LANES` (the multi-column kernel's
    width)."""
    return -(-count // MULTI_LANES) * MULTI_LANES


_MULTI_IR = r"""
define void @csrmm_{ity}_g{group}(i64 %rows, i64 %ngroups, i64 %ld, ptr noalias %indptr,
                               ptr noalias %idx, ptr noalias %val, ptr noalias %x,
                               ptr noalias %out) nounwind {{
entry:
  %anyrow = icmp sgt i64 %rows, 0
  br i1 %anyrow, label %row, label %done
row:
  %r = phi i64 [0, %entry], [%r1, %rowend]
  %plo = getelementptr i64, ptr %indptr, i64 %r
  %lo = load i64, ptr %plo, align 8
  %r1 = add i64 %r, 1
  %phi = getelementptr i64, ptr %indptr, i64 %r1
  %hi = load i64, ptr %phi, align 8
  %obase = mul i64 %r, %ld
  %nonempty = icmp ult i64 %lo, %hi
  br i1 %nonempty, label %group, label %rowend
group:
  %g = phi i64 [0, %row], [%g1, %store]
  %col = mul i64 %g, {group}
  %ob = add i64 %obase, %col
{loads}
  br label %edge
edge:
  %e = phi i64 [%lo, %group], [%e1, %edge]
{acc_phis}
  %pi = getelementptr {ity}, ptr %idx, i64 %e
  %j0 = load {ity}, ptr %pi, align {ialign}
  %j = zext {ity} %j0 to i64
  %pw = getelementptr float, ptr %val, i64 %e
  %w = load float, ptr %pw, align 4
  %wv0 = insertelement <{vw} x float> poison, float %w, i64 0
  %wv = shufflevector <{vw} x float> %wv0, <{vw} x float> poison, <{vw} x i32> zeroinitializer
  %xrow = mul i64 %j, %ld
  %xbase = add i64 %xrow, %col
{acc_body}
  %e1 = add i64 %e, 1
  %more = icmp ult i64 %e1, %hi
  br i1 %more, label %edge, label %store
store:
{stores}
  %g1 = add i64 %g, 1
  %moreg = icmp ult i64 %g1, %ngroups
  br i1 %moreg, label %group, label %rowend
rowend:
  %again = icmp ult i64 %r1, %rows
  br i1 %again, label %row, label %done
done:
  ret void
}}
"""


def _multi_ir(group: int) -> str:
    """The module for ``group`` columns per pass (a multiple of 8): one function per index type.

    Each function *adds* a panel of edges into ``out``: per row with edges, the
    accumulators start from the row's current values (rows without edges are
    not touched), so calling it panel after panel on a zeroed ``out`` adds
    every row's products in CSR order when the panels follow the column order.
    """
    width = MULTI_VECTOR if group % MULTI_VECTOR == 0 else MULTI_LANES
    vt = f"<{width} x float>"
    accs = group // width
    loads = "\n".join(f"  %q{k} = add i64 %ob, {k * width}\n"
                      f"  %pq{k} = getelementptr float, ptr %out, i64 %q{k}\n"
                      f"  %i{k} = load {vt}, ptr %pq{k}, align 4" for k in range(accs))
    phis = "\n".join(f"  %a{k} = phi {vt} [%i{k}, %group], [%n{k}, %edge]"
                     for k in range(accs))
    body = "\n".join(
        f"  %o{k} = add i64 %xbase, {k * width}\n"
        f"  %px{k} = getelementptr float, ptr %x, i64 %o{k}\n"
        f"  %x{k} = load {vt}, ptr %px{k}, align 4\n"
        f"  %p{k} = fmul {vt} %wv, %x{k}\n"
        f"  %n{k} = fadd {vt} %a{k}, %p{k}" for k in range(accs))
    stores = "\n".join(f"  store {vt} %n{k}, ptr %pq{k}, align 4" for k in range(accs))
    return "".join(_MULTI_IR.format(ity=ity, ialign=align, group=group, vw=width, loads=loads,
                                    acc_phis=phis, acc_body=body, stores=stores)
                   for ity, align in (("i16", 2), ("i32", 4)))


def multi_group(columns: int) -> int:
    """Columns the compiled kernel keeps in registers per pass for ``columns`` (a multiple of 8)."""
    if columns <= 0 or columns % MULTI_LANES:
        raise ValueError(f"the compiled kernel needs a positive multiple of {MULTI_LANES} columns")
    return max(g for g in range(MULTI_LANES, MULTI_GROUP_MAX + 1, MULTI_LANES) if columns % g == 0)


_Csrmm = Any  # a ctypes function: (rows, ngroups, ld, indptr, idx, val, x, out) -> None
_multi_compiled: dict[int, dict[str, _Csrmm]] = {}
_multi_error: str | None = None


def _compile_multi(group: int) -> dict[str, _Csrmm]:
    signature = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                 *[ctypes.c_void_p] * 5)
    names = {ity: f"csrmm_{ity}_g{group}" for ity in ("i16", "i32")}
    found = compile_ir(_multi_ir(group), {name: signature for name in names.values()})
    return {ity: found[name] for ity, name in names.items()}


def _multi_functions(group: int) -> dict[str, _Csrmm] | None:
    global _multi_error
    with _lock:
        if group not in _multi_compiled and _multi_error is None:
            try:
                _multi_compiled[group] = _compile_multi(group)
            except Exception as exc:  # no llvmlite, or one that cannot build this IR
                _multi_error = f"{type(exc).__name__}: {exc}"
        return _multi_compiled.get(group)


class RowBlockMulti(Protocol):
    """What the batched engine needs from a block of rows laid out for one kernel."""

    def matmul(self, x: np.ndarray, out: np.ndarray) -> None:
        """Write this block's rows of ``W @ X`` into ``out`` (rows of the block, all columns)."""


class CsrMultiBlock:
    """CSR rows for scipy's ``csr_matvecs``."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                 neurons: int) -> None:
        self.indptr = indptr
        self.indices = np.ascontiguousarray(indices, dtype=indptr.dtype)
        self.data = data
        self.neurons = neurons

    def matmul(self, x: np.ndarray, out: np.ndarray) -> None:
        """``out = W_block @ x`` for C-contiguous ``x`` (neurons, B) and ``out`` (rows, B)."""
        out.fill(0.0)
        _sparsetools.csr_matvecs(out.shape[0], self.neurons, x.shape[1], self.indptr,
                                 self.indices, self.data, x.reshape(-1), out.reshape(-1))


#: Bytes of ``X`` one panel of source neurons spans: about half an L2 cache, so that
#: the rows of ``X`` a panel gathers stay in L2 instead of being fetched from L3 or
#: memory for every synapse (measured on 2 cores: with two processes each holding a
#: 12.6 MB ``X``, L3 alone could not hold both).
PANEL_BYTES = 512 * 1024


class LlvmMultiBlock:
    """The same CSR rows for the compiled multi-column kernel (16-bit indices when they fit).

    The edges are split into *panels* of consecutive source neurons
    (:data:`PANEL_BYTES` of ``X`` each) and the product runs panel after
    panel. Where every row lists its sources in increasing order (as the
    released graphs do), each row still adds its products in CSR order, so
    the bits equal scipy's; otherwise one panel holds everything.
    """

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                 neurons: int, columns: int, functions: dict[str, _Csrmm]) -> None:
        if indices.size and (int(indices.max()) >= neurons or int(indices.min()) < 0):
            raise ValueError(f"presynaptic indices must lie in 0..{neurons - 1}")
        wide = neurons > 2**16
        rows = int(indptr.shape[0] - 1)
        indptr = np.asarray(indptr, dtype=np.int64)
        indices = np.asarray(indices)
        data = np.asarray(data, dtype=np.float32)
        span = max(1024, PANEL_BYTES // (4 * columns))
        row_of = np.repeat(np.arange(rows, dtype=np.int64), np.diff(indptr))
        ascending = bool(np.all((np.diff(indices.astype(np.int64)) >= 0)
                                | (np.diff(row_of) != 0))) if indices.size > 1 else True
        panels = -(-neurons // span) if ascending else 1
        panel = (indices.astype(np.int64) // span) if panels > 1 else np.zeros(indices.size,
                                                                                np.int64)
        # By panel, then CSR order. numpy sorts 8- and 16-bit keys stably by radix (a
        # merge sort for wider ones): the same order in about half the time.
        key = panel.astype(np.uint8 if panels <= 2**8 else np.uint16) if panels <= 2**16 \
            else panel
        order = np.argsort(key, kind="stable")
        counts = np.bincount(panel * rows + row_of, minlength=panels * rows).reshape(panels, rows)
        self.indptr = np.zeros((panels, rows + 1), dtype=np.int64)
        flat = np.concatenate([[0], np.cumsum(counts.reshape(-1))])
        for p in range(panels):
            self.indptr[p] = flat[p * rows:(p + 1) * rows + 1]
        self.indices = np.ascontiguousarray(indices[order], dtype=np.uint32 if wide else np.uint16)
        self.data = np.ascontiguousarray(data[order])
        self.panels = panels
        self.neurons = neurons
        self.columns = columns
        self.group = multi_group(columns)
        self._function = functions["i32" if wide else "i16"]

    def matmul(self, x: np.ndarray, out: np.ndarray) -> None:
        """``out = W_block @ x`` for C-contiguous float32 ``x`` and ``out`` of ``columns`` columns."""
        rows = self.indptr.shape[1] - 1
        if (x.dtype != np.float32 or not x.flags.c_contiguous
                or x.shape != (self.neurons, self.columns)):
            raise ValueError(f"x must be a contiguous float32 ({self.neurons}, {self.columns}) array")
        if (out.dtype != np.float32 or not out.flags.c_contiguous
                or out.shape != (rows, self.columns)):
            raise ValueError(f"out must be a contiguous float32 ({rows}, {self.columns}) array")
        out.fill(0.0)
        for p in range(self.panels):
            self._function(rows, self.columns // self.group, self.columns,
                           self.indptr[p].ctypes.data, self.indices.ctypes.data,
                           self.data.ctypes.data, x.ctypes.data, out.ctypes.data)


#: The multi-column kernel a batched engine runs when neither its caller nor
#: ``FLYVIZ_KERNEL`` chooses: the compiled one where llvmlite is installed (the
#: ``fast`` and ``atlas`` extras). It gives scipy's bits and is ~2.5x faster.
DEFAULT_MULTI_KERNEL = "llvm"


def resolve_multi(kind: str | None, columns: int) -> str:
    """The multi-column kernel that will run for ``columns`` columns.

    ``kind``, else ``FLYVIZ_KERNEL``, else :data:`DEFAULT_MULTI_KERNEL`. llvm
    needs a multiple of :data:`MULTI_LANES` columns; otherwise, or where it
    cannot compile, scipy runs and :func:`status` says why.
    """
    if kind is None:
        kind = os.environ.get(ENV_VAR, "").strip().lower() or DEFAULT_MULTI_KERNEL
    kind = resolve(kind)
    if kind == "llvm" and (columns % MULTI_LANES or _multi_functions(multi_group(columns)) is None):
        return "scipy"
    return kind


def make_multi_block(kind: str, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                     neurons: int, columns: int) -> RowBlockMulti:
    """Lay out one block of CSR rows for ``kind`` (a name :func:`resolve_multi` returned)."""
    if kind == "llvm":
        functions = _multi_functions(multi_group(columns))
        assert functions is not None
        return LlvmMultiBlock(indptr, indices, data, neurons, columns, functions)
    return CsrMultiBlock(indptr, indices, data, neurons)
