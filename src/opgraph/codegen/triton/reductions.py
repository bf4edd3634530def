"""How each reduction op is generated: its reduced axes, its row statistics, and its value from them.

A reduction kernel handles a *domain* (the shape of the reductions' input) split into kept dims (rows,
``XBLOCK`` per program) and reduced dims (``RBLOCK`` per step). ``REDUCTIONS[op]`` gives the axes an op
reduces and ``value(op, em, index)``: the op's output at an index, written with row statistics that the
emitter computes once per row (``em.stats``: sums, maxima ... of an element function of the domain index)
and pulled inputs (``em.value``). Composite ops (softmax, layer_norm, rms_norm, variance) are written
here from statistics, so their prologues and epilogues fuse with them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.dtype import bool_
from ...ir.graph import Operation
from ...ir.opdef import OpDef
from ...ops import gradient_support as gs
from ...ops import nn, norm
from ...ops import reduce as rd
from .expr import NotExpressible, compute_type, exact_div, literal
from .indexing import Index

if TYPE_CHECKING:
    from .region import RegionEmitter


@dataclass(frozen=True)
class Reduction:
    axes: Callable[[Operation], tuple[int, ...]]  # the axes of input 0 that are reduced
    value: Callable[[Operation, RegionEmitter, Index], str]  # the output at an output index
    stats: Callable[[Operation, RegionEmitter], object] | None = None  # ops shaped like their input (softmax,
    # norms): the row statistics; None for reductions whose result is itself a row statistic

    def prepare(self, op: Operation, em: RegionEmitter) -> None:
        """Emit the op's row statistics (in the top scope, before any final pass reads them)."""
        if self.stats is not None:
            self.stats(op, em)
        else:
            self.value(op, em, em.canonical_index(op))


def _attr_axes(op: Operation) -> tuple[int, ...]:
    return tuple(sorted(a % op.inputs[0].rank for a in op.attrs.axes))


def _softmax_axes(op: Operation) -> tuple[int, ...]:
    return (op.attrs.axis % op.inputs[0].rank,)


def _sum_to_axes(op: Operation) -> tuple[int, ...]:
    x, ref = op.inputs
    lead = x.rank - ref.rank
    return tuple(range(lead)) + tuple(lead + k for k, (a, b) in enumerate(zip(x.shape[lead:], ref.shape, strict=True))
                                      if b == 1 and a != 1)


def _float_input(op: Operation) -> str:
    dt = op.inputs[0].dtype
    if not dt.is_floating or dt.is_complex:
        raise NotExpressible(f"{op.op.name} is generated for real floating dtypes, got {dt.name}")
    return compute_type(dt)


def _element(em: RegionEmitter, op: Operation, fn: Callable[[str], str] = lambda v: v) -> Callable[[Index], str]:
    x = op.inputs[0]
    return lambda idx: fn(em.value(x, idx))


def _nan_free(v: str, fill: str) -> str:
    return f"tl.where({v} != {v}, {fill}, {v})"


# ---- plain reductions ----------------------------------------------------------------------------------
def _sum(op: Operation, em: RegionEmitter, index: Index) -> str:
    em.check_row(op, index)
    ct = compute_type(op.inputs[0].dtype)
    if op.inputs[0].dtype is bool_:
        raise NotExpressible("reduce_sum of bool is not generated")
    (s,) = em.stats(op, "sum", [("sum", _element(em, op), ct)])
    return s


def _mean(op: Operation, em: RegionEmitter, index: Index) -> str:
    em.check_row(op, index)
    ct = _float_input(op)
    (s,) = em.stats(op, "sum", [("sum", _element(em, op), ct)])
    return exact_div(s, em.reduced_count(), ct)


def _prod(op: Operation, em: RegionEmitter, index: Index) -> str:
    em.check_row(op, index)
    if op.inputs[0].dtype is bool_:
        raise NotExpressible("reduce_prod of bool is not generated")
    (p,) = em.stats(op, "prod", [("prod", _element(em, op), compute_type(op.inputs[0].dtype))])
    return p


def _pair_found(em: RegionEmitter, op: Operation, key: str, what: str) -> tuple[str, str] | None:
    """The two row statistics ``key`` of ``op`` if already emitted (memoised per region); none in a split column
    reduction, whose parts never see whole rows."""
    if em.column_split:
        raise NotExpressible(f"{what} of a split column reduction")
    found = em.top.memo.get(("stats", id(op), key))
    if found is None:
        return None
    first, second = found.split(",")
    return first, second


def _online_softmax(em: RegionEmitter, op: Operation, fn: Callable[[Index], str], ct: str) -> tuple[str, str]:
    """Row max ``m`` and ``sum(exp(v - m))`` in one pass: each lane rescales its running sum when its
    running max grows (looped kernels; a persistent kernel has the row in registers anyway)."""
    found = _pair_found(em, op, "online", "softmax")
    if found is not None:
        return found
    am, asum = em.fresh("accm"), em.fresh("accs")
    em.emit(f"{am} = tl.full([XBLOCK, RBLOCK], float(\"-inf\"), {ct})")
    em.emit(f"{asum} = tl.zeros([XBLOCK, RBLOCK], {ct})")
    loop = em.open_loop()
    v = fn(em.domain_index())
    v = em.bind(f"tl.where({loop.mask}, {v}, float(\"-inf\"))", "o")
    new = em.fresh("nm")
    em.emit(f"{new} = tl.maximum({am}, tl.where({v} != {v}, float(\"-inf\"), {v}))")
    # lanes still at -inf (nothing seen yet) keep a zero sum (exp(-inf - -inf) would be NaN); a NaN element
    # makes its lane's sum NaN, so the row's result is NaN as unfused
    em.emit(f"{asum} = {asum} * tl.where({new} == float(\"-inf\"), 0.0, tl.exp({am} - {new})) + "
           f"tl.where({v} != {v}, {v}, tl.where({new} == float(\"-inf\"), 0.0, tl.exp({v} - {new})))")
    em.emit(f"{am} = {new}")
    em.close_scope()
    m = em.reduce_tile("max", am, ct)
    scale = f"tl.where({am} == float(\"-inf\"), 0.0, tl.exp({am} - {m}))"
    s = em.reduce_tile("sum", f"{asum} * {scale}", ct)
    if em.config.split > 1:  # each part's (max, sum) over its chunk, rescaled to the row's max where they meet
        every_m, every_s = em.exchange([m, s])
        m, s = _softmax_of_parts(em, every_m, every_s, ct)
    em.top.memo[("stats", id(op), "online")] = f"{m},{s}"
    return m, s


def _softmax_of_parts(em: RegionEmitter, every_m: str, every_s: str, ct: str) -> tuple[str, str]:
    """A split row's (max, sum of exp about it) from its parts' pairs (``exchange``'s vectors): each part's sum
    rescaled to the row's max (a part of -inf adds nothing)."""
    row_max = em.reduce_parts("max", every_m, ct)  # a scalar, so the rescaling stays over the [split] vectors
    s = em.reduce_parts("sum", f"{every_s} * tl.where({every_m} == float(\"-inf\"), 0.0, "
                               f"tl.exp({every_m} - {row_max}))", ct)
    return em.as_row(row_max, ct), em.as_row(s, ct)


# the shifted sums' variance, E[(x - c)^2] - E[x - c]^2, loses ~(1 + (mean - c)^2 / var) times a centred sum's
# rounding: where (mean - c)^2 passes this many variances (or the variance is NaN: an overflow of the squares, or a
# NaN in the row), the row's centred sum about the mean is taken again
SHIFT_GUARD = 8.0


def _variance_of(op: Operation, em: RegionEmitter, ct: str) -> tuple[str, str]:
    """(mean, population variance) of input 0 over the reduced dims, from the sums of x - c and (x - c)^2 together,
    c near the row's mean (``_shift``): one reduction of two independent sums (H200 float32 2048x32768 layer norm:
    0.86 of copy, against 0.83 for a sum and then a centred sum) and one meeting of a split row. Rows whose c lies
    far from the mean (an outlier first) take the centred sum again in a branch (``_centred_again``): every row's
    variance keeps within ``SHIFT_GUARD`` + 1 times the rounding of two passes."""
    memo = ("stats", id(op), "moments")
    found = em.top.memo.get(memo)
    if found is not None:  # emitted once (prepared in the top scope, then read by each output index)
        mean, var = found.split(",")
        return mean, var
    n = em.reduced_count()
    shift = _shift(op, em, ct)
    d = lambda v: f"({v} - {shift})"  # noqa: E731
    s1, s2 = em.stats(op, "shifted", [("sum", _element(em, op, d), ct),
                                      ("sum", _element(em, op, lambda v: f"{d(v)} * {d(v)}"), ct)])
    # (a split column part's sums are partial: binding them here refuses its variance, as it always has)
    dm = em.bind(exact_div(s1, n, ct), "dm")
    mean = em.bind(f"{shift} + {dm}", "mean")
    raw = em.bind(f"{exact_div(s2, n, ct)} - {dm} * {dm}", "raw")
    var = em.bind(f"tl.where({raw} < 0.0, 0.0, {raw})", "var")  # rounding below 0 (then guarded); NaN stays
    # one row of the tile that needs it walks the whole tile: a split row's parts all read the same sums, so all
    # take the branch (they meet again in it)
    em.emit(f"if tl.max((({var} != {var}) | ({dm} * {dm} > {SHIFT_GUARD} * {var})).to(tl.int32)) > 0:")
    em.open_branch()
    em.emit(f"{var} = {exact_div(_centred_again(op, em, mean, ct), n, ct)}")
    em.close_scope()
    em.top.memo[memo] = f"{mean},{var}"
    return mean, var


def _shift(op: Operation, em: RegionEmitter, ct: str) -> str:
    """The rows' shift c: their first element; for a column tile walked in steps (a variance over N, H and W of an
    NHWC tensor: 16-128 columns a program), the mean of its first step's rows, so that the guard's second walk,
    which one column of the tile needing it would cost them all, is seldom taken (a first element past 2.8
    deviations: 0.5-2% of columns; batch norm's own statistics are plain sums, ``passes/decompose.py``)."""
    if not (em.config.looped and em.inner_axis not in em.raxes):
        return em.row_start_value(op.inputs[0])
    acc = em.fresh("acc")
    em.emit(f"{acc} = tl.zeros([XBLOCK, RBLOCK], {ct})")
    loop = em.open_loop(first_step=True)
    em.emit(f"{acc} = tl.where({loop.mask}, {_element(em, op)(em.domain_index())}, 0.0)")
    em.close_scope()
    count = f"tl.maximum(tl.minimum({em.reduced_count()}, RBLOCK), 1)"
    return em.bind(exact_div(em.reduce_tile("sum", acc, ct), count, ct), "shift")


def _centred_again(op: Operation, em: RegionEmitter, mean: str, ct: str) -> str:
    """The row's sum of (x - mean)^2, in the branch of rows whose shift lay far from the mean: over the registers
    holding the row, or another walk over it; a split row's parts meet again (all of them: they all read the same
    sums, so all take the branch)."""
    centred = _element(em, op, lambda v: f"({v} - {mean}) * ({v} - {mean})")
    if em.config.looped:  # a walk that sets no L2 hints: the others' (kept until the last walk) are planned without it
        acc = em.fresh("acc")
        em.emit(f"{acc} = tl.zeros([XBLOCK, RBLOCK], {ct})")
        loop = em.open_loop()
        em.rarely = True
        try:
            em.emit(f"{acc} = {acc} + tl.where({loop.mask}, {centred(em.domain_index())}, 0.0)")
        finally:
            em.rarely = False
        em.close_scope()
        q = em.reduce_tile("sum", acc, ct)
    else:
        q = em.reduce_tile("sum", f"tl.where({em.scope.mask}, {centred(em.domain_index())}, 0.0)", ct)
    if em.config.split > 1:
        (every,) = em.exchange([q])
        q = em.as_row(em.reduce_parts("sum", every, ct), ct)
    return q


def _variance(op: Operation, em: RegionEmitter, index: Index) -> str:
    em.check_row(op, index)
    return _variance_of(op, em, _float_input(op))[1]


def _extremum(is_max: bool, propagate_nan: bool) -> Callable[[Operation, RegionEmitter, Index], str]:
    kind = "max" if is_max else "min"

    def value(op: Operation, em: RegionEmitter, index: Index) -> str:
        em.check_row(op, index)
        dt = op.inputs[0].dtype
        if dt is bool_:
            (r,) = em.stats(op, kind, [(kind, _element(em, op, lambda v: f"{v}.to(tl.int32)"), "tl.int32")])
            return f"{r} != 0"
        ct = compute_type(dt)
        if not dt.is_floating:
            (r,) = em.stats(op, kind, [(kind, _element(em, op), ct)])
            return r
        fill = 'float("-inf")' if is_max else 'float("inf")'
        # NaN-free extremum, and whether any element is (propagate) or is not (ignore) NaN
        flag = (lambda v: f"({v} != {v}).to(tl.int32)") if propagate_nan else (lambda v: f"({v} == {v}).to(tl.int32)")
        r, f = em.stats(op, kind, [(kind, _element(em, op, lambda v: _nan_free(v, fill)), ct),
                                   ("max", _element(em, op, flag), "tl.int32")])
        if propagate_nan:
            return f"tl.where({f} > 0, float(\"nan\"), {r})"
        # NaN only when the elements are all NaN; an empty slice gives the neutral -inf / +inf
        return f"tl.where(({f} > 0) | ({em.reduced_count()} == 0), {r}, float(\"nan\"))"

    return value


def _logical(is_and: bool) -> Callable[[Operation, RegionEmitter, Index], str]:
    def value(op: Operation, em: RegionEmitter, index: Index) -> str:
        em.check_row(op, index)
        kind = "min" if is_and else "max"
        (r,) = em.stats(op, kind, [(kind, _element(em, op, lambda v: f"({v} != 0).to(tl.int32)"), "tl.int32")])
        return f"{r} != 0"

    return value


# ---- composite ops: full-shaped results written from row statistics ------------------------------------
def _split_softmax(em: RegionEmitter, op: Operation, ct: str) -> tuple[str, str, str, str]:
    """A split row's softmax at one barrier: each part's max ``mp`` and ``h = exp(x - mp)`` over its chunk (held
    in registers, in place of x), their sum; the parts' (max, sum) pairs give the row's ``m`` and ``s``, and the
    part's softmax is ``h * scale`` (one exp an element). Returns (m, s, h, scale). A part of -inf only has
    ``mp`` 0 for its exp (so h is 0, not NaN) and a zero scale; NaN or +inf elements make ``s``, and so the
    row, NaN, as unfused."""
    found = em.top.memo.get(("stats", id(op), "split-softmax"))
    if found is not None:
        m, s, h, scale = found.split(",")
        return m, s, h, scale
    mask = em.scope.mask
    v = em.bind(_element(em, op)(em.domain_index()), "o")
    own = em.reduce_tile("max", f"tl.where({mask}, {v}, float(\"-inf\"))", ct)
    mp = em.bind(f"tl.where({own} == float(\"-inf\"), 0.0, {own})", "mp")
    h = em.bind(f"tl.exp({v} - {mp})", "h")
    part_sum = em.reduce_tile("sum", f"tl.where({mask}, {h}, 0.0)", ct)
    every_m, every_s = em.exchange([own, part_sum])
    m, s = _softmax_of_parts(em, every_m, every_s, ct)
    scale = em.bind(f"tl.where({own} == float(\"-inf\"), 0.0, tl.exp({own} - {m})) / {s}", "scale")
    em.top.memo[("stats", id(op), "split-softmax")] = f"{m},{s},{h},{scale}"
    return m, s, h, scale


def _first_of_input(op: Operation, em: RegionEmitter) -> Operation:
    """The region's first softmax or log_softmax of ``op``'s input (``op`` itself if none comes before): the op whose
    statistics they all share (a cross entropy's loss and gradient take log_softmax and softmax of the same logits;
    the region reduces one set of axes, so theirs are the same)."""
    x = op.inputs[0]
    return next(r for r in em.reductions if r.op in (nn.SOFTMAX, nn.LOG_SOFTMAX) and r.inputs[0] is x)


def _softmax_stats(op: Operation, em: RegionEmitter) -> tuple[str, str]:
    op = _first_of_input(op, em)
    ct = _float_input(op)
    if em.config.looped:  # one pass over memory instead of two
        return _online_softmax(em, op, _element(em, op), ct)
    if em.config.split > 1:  # one barrier, not two (max, then sums): H200 float32 256x262144 0.153 against 0.164 ms
        m, s, _, _ = _split_softmax(em, op, ct)
        return m, s
    # a NaN may or may not reach the max (the GPU's ignores it, the interpreter's keeps it): either way exp(NaN - m)
    # makes the row's sum, and so every result of the row, NaN, as unfused; no select per element to rule it out
    (m,) = em.stats(op, "max", [("max", _element(em, op), ct)])
    (s,) = em.stats(op, "sum", [("sum", _element(em, op, lambda v: f"tl.exp({v} - {m})"), ct)])
    return m, s


def _softmax(op: Operation, em: RegionEmitter, index: Index) -> str:
    em.check_full(op, index)
    m, s = _softmax_stats(op, em)
    if em.config.split > 1 and not em.config.looped and index == em.domain_index():  # the part's exps, rescaled
        _, _, h, scale = _split_softmax(em, _first_of_input(op, em), _float_input(op))
        return f"{h} * {scale}"
    return f"tl.exp({em.value(op.inputs[0], index)} - {m}) / {s}"


def _log_softmax_stats(op: Operation, em: RegionEmitter) -> tuple[str, str]:
    m, s = _softmax_stats(op, em)
    return m, em.bind(f"tl.log({s})", "ls")


def _log_softmax(op: Operation, em: RegionEmitter, index: Index) -> str:
    em.check_full(op, index)
    m, log_s = _log_softmax_stats(op, em)
    # (x - m) - log(s), as unfused: m + log(s) first would round log(s) away where |m| is large (a row offset by 1e4
    # lost 1e-4; by -1e30, everything)
    return f"({em.value(op.inputs[0], index)} - {m}) - {log_s}"


def _affine(op: Operation, em: RegionEmitter, index: Index, y: str, flags: tuple[bool, ...]) -> str:
    """``y * gamma + beta`` with each present parameter broadcast into the normalised axes."""
    axes = REDUCTIONS[op.op].axes(op)
    params = iter(op.inputs[1:])
    for k, present in enumerate(flags):
        if not present:
            continue
        p = next(params)
        sub = tuple(index[a] for a in axes)
        lead = len(sub) - p.rank
        pidx = tuple("0" if p.shape[j] == 1 else sub[lead + j] for j in range(p.rank))
        v = em.value(p, pidx)
        y = f"({y}) * {v}" if k == 0 else f"({y}) + {v}"
    return y


def _params_ahead(op: Operation, em: RegionEmitter, flags: tuple[bool, ...]) -> None:
    """A split row's gamma and beta (loaded, or computed where the region computes them) before its parts meet, so
    their reads (from L2: every row shares them) overlap the wait instead of following it; only where each takes at
    most 32 registers a thread."""
    cfg = em.config
    if cfg.split > 1 and not cfg.looped and cfg.xblock * cfg.rblock <= 32 * 32 * cfg.num_warps:
        _affine(op, em, em.domain_index(), "0.0", flags)  # the loads are memoised for the final pass


def _layer_norm_stats(op: Operation, em: RegionEmitter) -> tuple[str, str]:
    _params_ahead(op, em, (op.attrs.has_gamma, op.attrs.has_beta))
    mean, var = _variance_of(op, em, _float_input(op))
    return mean, em.bind(f"1.0 / tl.sqrt({var} + {literal(float(op.attrs.epsilon))})", "rstd")


def _layer_norm(op: Operation, em: RegionEmitter, index: Index) -> str:
    em.check_full(op, index)
    mean, rstd = _layer_norm_stats(op, em)
    y = f"({em.value(op.inputs[0], index)} - {mean}) * {rstd}"
    return _affine(op, em, index, y, (op.attrs.has_gamma, op.attrs.has_beta))


def _rms_norm_stats(op: Operation, em: RegionEmitter) -> str:
    _params_ahead(op, em, (op.attrs.has_gamma,))
    (q,) = em.stats(op, "squares", [("sum", _element(em, op, lambda v: f"{v} * {v}"), _float_input(op))])
    mean_square = exact_div(q, em.reduced_count(), _float_input(op))
    return em.bind(f"1.0 / tl.sqrt({mean_square} + {literal(float(op.attrs.epsilon))})", "rrms")


def _rms_norm(op: Operation, em: RegionEmitter, index: Index) -> str:
    em.check_full(op, index)
    r = _rms_norm_stats(op, em)
    return _affine(op, em, index, f"{em.value(op.inputs[0], index)} * {r}", (op.attrs.has_gamma,))


REDUCTIONS: dict[OpDef, Reduction] = {
    rd.REDUCE_SUM: Reduction(_attr_axes, _sum), rd.REDUCE_MEAN: Reduction(_attr_axes, _mean),
    rd.REDUCE_PROD: Reduction(_attr_axes, _prod), rd.VARIANCE: Reduction(_attr_axes, _variance),
    rd.REDUCE_MAX: Reduction(_attr_axes, _extremum(True, False)),
    rd.REDUCE_MIN: Reduction(_attr_axes, _extremum(False, False)),
    rd.REDUCE_MAX_NAN: Reduction(_attr_axes, _extremum(True, True)),
    rd.REDUCE_MIN_NAN: Reduction(_attr_axes, _extremum(False, True)),
    rd.REDUCE_AND: Reduction(_attr_axes, _logical(True)), rd.REDUCE_OR: Reduction(_attr_axes, _logical(False)),
    gs.SUM_TO: Reduction(_sum_to_axes, _sum),
    nn.SOFTMAX: Reduction(_softmax_axes, _softmax, _softmax_stats),
    nn.LOG_SOFTMAX: Reduction(_softmax_axes, _log_softmax, _log_softmax_stats),
    norm.LAYER_NORM: Reduction(_attr_axes, _layer_norm, _layer_norm_stats),
    norm.RMS_NORM: Reduction(_attr_axes, _rms_norm, _rms_norm_stats),
}
