"""Training with og.nn + og.optim: the loss trajectory of a small CNN matches PyTorch's step for step,
and one training step (forward, backward, optimizer and running-statistics assigns) is one executable."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import opgraph as og

F64 = torch.float64
BATCH, CLASSES, STEPS = 8, 3, 20


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _og_cnn(g: og.Graph, dtype: og.DType = og.float64) -> og.nn.Sequential:
    gen = _gen(0)
    return og.nn.Sequential(
        og.nn.Conv2d(g, 1, 4, 3, padding=1, dtype=dtype, generator=gen, name="conv"),
        og.nn.BatchNorm2d(g, 4, dtype=dtype, name="bn"),
        og.nn.ReLU(),
        og.nn.MaxPool2d(2),
        og.nn.Flatten(),
        og.nn.Linear(g, 4 * 4 * 4, CLASSES, dtype=dtype, generator=gen, name="fc"),
    )


def _torch_cnn() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(64, CLASSES)).double()


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = _gen(1)
    return [(torch.randn(BATCH, 1, 8, 8, dtype=F64, generator=gen), torch.randint(0, CLASSES, (BATCH,), generator=gen))
            for _ in range(n)]


def _training_step(g: og.Graph, model: og.nn.Module, lr: float = 0.1, momentum: float = 0.9
                   ) -> tuple[og.Tensor, og.Tensor, og.Tensor, list[og.Operation]]:
    x = g.placeholder((BATCH, 1, 8, 8), og.float64, name="x")
    labels = g.placeholder((BATCH,), og.int64, name="labels")
    loss = g.softmax_cross_entropy(model(x), labels)
    opt = og.optim.SGD(g, model.parameters, lr=lr, momentum=momentum)
    return x, labels, loss, opt.step(loss) + model.updates


def test_cnn_trajectory_matches_torch() -> None:
    g = og.Graph()
    model = _og_cnn(g)
    ref = _torch_cnn()
    ref.load_state_dict(model.state_dict(), strict=False)  # torch's num_batches_tracked stays
    x, labels, loss, updates = _training_step(g, model)
    exe = g.compile({x: x.type, labels: labels.type}, [loss], target_ops=updates, device="cpu")
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    ours, theirs = [], []
    for xb, yb in _batches(STEPS):
        (lv,) = exe.run([xb, yb])
        ours.append(lv.item())
        opt.zero_grad()
        lt = F.cross_entropy(ref(xb), yb)
        lt.backward()
        opt.step()
        theirs.append(lt.item())
    rel = max(abs(a - b) / abs(b) for a, b in zip(ours, theirs, strict=True))
    assert rel < 1e-6, (rel, ours, theirs)
    assert theirs[-1] < theirs[0]  # it trained
    final = model.state_dict()
    for k, v in ref.state_dict().items():
        if k in final:  # weights and running statistics after 20 steps
            torch.testing.assert_close(final[k], v, rtol=1e-8, atol=1e-10, msg=k)


def _check_training_step_is_one_executable(device: str) -> None:
    g = og.Graph()
    model = _og_cnn(g)
    x, labels, loss, updates = _training_step(g, model)
    exe = g.compile({x: x.type, labels: labels.type}, [loss], target_ops=updates, device=device)
    dev = og.device(device)
    before = {k: v.clone() for k, v in model.state_dict(dev).items()}
    batches = _batches(3)
    losses = []
    for xb, yb in batches[:2]:
        losses.append(exe.run([xb.to(dev.torch), yb.to(dev.torch)])[0].item())
    assert losses[0] != losses[1]
    after = model.state_dict(dev)
    for k in before:  # every parameter and running statistic moved
        assert not torch.equal(before[k], after[k]), k
    # the variables stay on the device between runs (no copies back to the host)
    for v in model.variables.values():
        assert g._state[str(dev)][v.op.name].device == dev.torch
    # graph.run with the same targets takes the same step
    xb, yb = batches[2]
    (lv,) = g.run({x: xb, labels: yb}, [loss], target_ops=updates, device=device)
    assert torch.isfinite(lv) and not torch.equal(model.state_dict(dev)["5.weight"], after["5.weight"])
    # one executable holds forward, backward and the assigns: a single generated function
    names = [o.op.name for o in exe.program.graph.ops]
    # the forward's convolution (with its bias on the CPU: passes/vendor_fused.py)
    assert names.count("assign") == len(updates) and ("conv2d" in names or "conv2d_bias" in names)
    # the loss is there as itself, or (fusion on: CUDA) decomposed into a generated log_softmax kernel
    assert "softmax_cross_entropy" in names or any("log_softmax" in (k.source or "") for k in exe.kernels())


def test_training_step_is_one_executable() -> None:
    _check_training_step_is_one_executable("cpu")


@pytest.mark.gpu
def test_training_step_is_one_executable_cuda() -> None:
    _check_training_step_is_one_executable("cuda")


def test_eval_graph_shares_the_trained_variables() -> None:
    g = og.Graph()
    model = _og_cnn(g)
    x, labels, loss, updates = _training_step(g, model)
    xb, yb = _batches(1)[0]
    g.run({x: xb, labels: yb}, [loss], target_ops=updates, device="cpu")
    model.eval()
    xe = g.placeholder((None, 1, 8, 8), og.float64)
    logits = model(xe)
    ref = _torch_cnn()
    ref.load_state_dict(model.state_dict(), strict=False)
    ref.eval()
    (got,) = g.run({xe: xb[:3]}, [logits], device="cpu")
    torch.testing.assert_close(got, ref(xb[:3]).detach(), rtol=1e-10, atol=1e-12)
