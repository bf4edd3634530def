"""OpInfo record of reshape_dims (target sizes as products of other tensors' sizes)."""

from __future__ import annotations

from typing import Any

import numpy as np

import opgraph as og
from opgraph.ops import reshape_dims as rd

from .opinfo import ErrorCase, OpInfo, Sample, rand


def _samples(rng: np.random.Generator) -> list[Sample]:
    # (x, ref): x merged to (ref dim 0 * ref dim 1, rest) and split back from refs
    return [
        Sample([rand(rng, (2, 3, 4)), rand(rng, (2, 3))], {"dims": ((1, ((1, 0), (1, 1))), 4)}, "merge"),
        Sample([rand(rng, (6, 4), np.float64), rand(rng, (2, 3))], {"dims": ((1, ((1, 0),)), (1, ((1, 1),)), 4)},
               "split"),
        Sample([rand(rng, (4, 6), np.int32), rand(rng, (2,))], {"dims": ((2, ((1, 0),)), 6)}, "factor"),
        Sample([rand(rng, (0, 3)), rand(rng, (0, 5))], {"dims": ((1, ((1, 0),)), 3)}, "empty"),
        Sample([rand(rng, (2, 3, 4)), rand(rng, (2, 3))], {"dims": ((1, ((1, 0),)), -1)}, "remaining"),
    ]


def _build(g: og.Graph, x: og.Tensor, ref: og.Tensor, *, dims: Any) -> og.Tensor:
    return g.reshape_dims(x, [x, ref], dims)


def _oracle(x: np.ndarray, ref: np.ndarray, *, dims: Any) -> np.ndarray:
    refs = [x, ref]
    shape = [d if isinstance(d, int) else d[0] * int(np.prod([refs[i].shape[a] for i, a in d[1]])) for d in dims]
    # (an int -1: the remaining elements, as NumPy's reshape)
    return x.reshape(shape)


def _bad(g: og.Graph) -> og.Tensor:
    x = g.placeholder((2, 3), og.float32)
    return g.reshape_dims(x, [x], [(1, ((0, 0),)), 4])


def _bad_ref(g: og.Graph) -> og.Tensor:
    x = g.placeholder((2, 3), og.float32)
    return g.reshape_dims(x, [x], [(1, ((0, 5),)), 3])


RECORDS = [
    OpInfo("reshape_dims", (rd.RESHAPE_DIMS,), _build, _samples, _oracle,
           errors=[ErrorCase(_bad, og.ShapeError, "cannot reshape", "bad-size"),
                   ErrorCase(_bad_ref, og.AttributeValueError, "names a dim", "bad-reference")]),
]
