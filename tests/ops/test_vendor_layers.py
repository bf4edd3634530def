"""The encoder layer's separate-calls path (what CUDA runs with a GELU: its fused call approximates the GELU), checked
on the CPU against the record's NumPy float64 oracle in every arrangement."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from opgraph.ops.vendor_layers import EncoderLayerAttrs, _spelled_out

from .records_vendor_layers import _weights, np_encoder_layer


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("use_gelu", [False, True])
def test_spelled_out_layer_matches_the_oracle(norm_first: bool, use_gelu: bool) -> None:
    rng = np.random.default_rng(7)
    src, *w = [rng.uniform(-1, 1, (3, 4, 6))] + _weights(rng, 6, 12, np.float64)
    attrs = EncoderLayerAttrs(num_heads=3, use_gelu=use_gelu, norm_first=norm_first, epsilon=1e-6)
    got = _spelled_out(attrs, torch.from_numpy(src), tuple(torch.from_numpy(v) for v in w))
    want = np_encoder_layer(src, *w, num_heads=3, use_gelu=use_gelu, norm_first=norm_first, epsilon=1e-6)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
