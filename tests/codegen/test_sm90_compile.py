"""Generated kernels compiled for sm_90 by Triton's real compiler (PTX assembled by ptxas), without a GPU: the
interpreter runs every other test, but it neither parses inline PTX nor checks what only the compiler does (layouts,
loop-carried types, constant masks folded into loads). The launch configurations the tuner offers on an H200 (132
multiprocessors) for issue 4's softmax and norms at widths 4k, 32k and 262k, the cluster launches of split rows,
and the bfloat16 ``tanh.approx`` of elementwise chains; a cluster launch's metadata is patched as ``RegionKernel``
patches it at launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

SCRIPT = r'''
import dataclasses, importlib.util, json, sys
from pathlib import Path
from unittest import mock
from triton.runtime import driver

import opgraph as og
from opgraph.codegen.triton import compile_worker, configs
from opgraph.codegen.triton.kernel import region_kernel, region_of

driver.set_active(compile_worker.CompileOnlyDriver((9, 0)))
folder = Path(sys.argv[1])


def norm(name, shape, dtype):
    g = og.Graph()
    x = g.placeholder(shape, dtype)
    w = g.placeholder(shape[-1:], dtype)
    if name == "softmax":
        return [g.softmax(x, -1)]
    if name == "rms_norm":
        return [g.rms_norm(x, (len(shape) - 1,), epsilon=1e-6) * w]
    return [g.layer_norm(x, (len(shape) - 1,), epsilon=1e-5) * w]


def chain(shape):
    g = og.Graph()
    x = g.placeholder(shape, og.bfloat16)
    return [g.sigmoid(g.tanh(x) * 3.0) * 0.5]


cases = [norm("softmax", (64, 32768), og.bfloat16), norm("layer_norm", (4, 262144), og.float32),
         norm("rms_norm", (256, 4096), og.bfloat16), norm("softmax", (8, 262144), og.bfloat16), chain((4096, 256))]
kernels = []
with mock.patch.object(configs, "multiprocessors", lambda: 132), mock.patch.object(configs, "_splittable",
                                                                                    lambda em: True):
    for outs in cases:
        ops, ins = region_of(outs)
        k = region_kernel(ops, ins, outs, cache_dir=folder)
        for each in [k, *(k.alternatives() if k.alternatives else [])]:
            kernels.append(each)
            if each.config.split > 1 and not each.config.looped and each.config.split <= configs.MAX_CLUSTER:
                kernels.append(region_kernel(ops, ins, outs, cache_dir=folder,
                                             config=dataclasses.replace(each.config, cluster=True)))
spec = importlib.util.spec_from_file_location("compile_sm90", Path(sys.argv[2]))
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)
report = []
for k in kernels:
    row = {"config": repr(k.config), "source": k.source, "error": None, "cluster_ctas": None}
    try:
        compiled = script.compile_for_sm90(k, [tuple(t.shape) for t in k.in_types])
        if k.config.cluster:
            row["cluster_ctas"] = compiled.packed_metadata[1]
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[-800:]}"
    report.append(row)
print(json.dumps(report))
'''


def test_the_tuners_configurations_compile_for_sm90(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    script = Path(__file__).parents[2] / "scripts" / "compile_sm90.py"  # its compile_for_sm90
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "sources"), str(script)], env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    failed = [(r["config"], r["error"]) for r in report if r["error"]]
    assert not failed, failed
    sources = [r["source"] for r in report]
    # the features this is here to compile (so that a change of the generator cannot leave them untested)
    assert any("og_tanh_bf16" in s for s in sources)
    assert any("og_cluster_sync" in s for s in sources)
    assert any("tl.full([XBLOCK, 1], 1, tl.int1)" in s for s in sources)
    assert any("tl.range(" in s for s in sources)  # a grid of programs pipelining their rows
    assert any("evict_last" in s for s in sources)
    clusters = [r for r in report if "cluster=True" in r["config"]]
    assert clusters and all(r["cluster_ctas"] == int(r["config"].split("split=")[1].split(",")[0]) for r in clusters)
