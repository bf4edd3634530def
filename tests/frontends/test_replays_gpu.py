"""Training loops through ``torch.compile(backend="opgraph")`` on CUDA replay both graphs: the forward lends
its saved activations (no copies) and the backward reads them in place. Several steps against eager, with the
loss kept across steps (a caller holding outputs) and gradients accumulated."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from opgraph.frontends.torch import recording
from tests.frontends.test_attention_capture import _bert, _Logits

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")]


def _train(model: torch.nn.Module, inputs: list[torch.Tensor], compile_it: bool, steps: int,
           zero_grads: bool) -> tuple[list[torch.Tensor], torch.nn.Module, list]:
    model = copy.deepcopy(model).cuda()
    torch._dynamo.reset()  # compiled afresh: the backend reports this run's executables
    fn = torch.compile(model, backend="opgraph") if compile_it else model
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    losses = []
    with recording() as reports, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            if zero_grads:
                opt.zero_grad(set_to_none=True)
            loss = fn(*inputs).float().square().mean()
            loss.backward()
            opt.step()
            losses.append(loss)  # kept: the next forward runs while the caller holds its output
    return losses, model, list(reports)


@pytest.mark.parametrize("zero_grads", [True, False], ids=["set-to-none", "accumulated"])
def test_training_steps_replay_and_match_eager(zero_grads: bool) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    bert, inputs = _bert()
    model, inputs = _Logits(bert), [t.cuda() for t in inputs]
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        got, trained, reports = _train(model, inputs, True, 6, zero_grads)
        want, reference, _ = _train(model, inputs, False, 6, zero_grads)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.testing.assert_close(torch.stack(got), torch.stack(want), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(trained.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    exes = {r.kind: r.executable for r in reports}
    forward, backward = exes["forward"], exes["backward"]
    assert forward.cuda_graph_status == "on" and backward.cuda_graph_status == "on"
    # the forward copies out only what the loop keeps (the logits behind the loss); the saved activations are lent
    assert len(forward._copied_outputs) <= 2 < len(forward.output_types_), forward._copied_outputs
    # the loss's gradient moves: captured again once (still read in place), then copied once it moves again;
    # gradients accumulated in place are held once; the activations stay put
    assert backward._recaptures <= (2 if zero_grads else 3), backward._recaptures


def test_explain_shows_both_training_graphs_replaying() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import opgraph as og

    bert, inputs = _bert()
    torch._dynamo.reset()
    report = og.torch.explain(_Logits(bert).cuda(), *[t.cuda() for t in inputs], train=True)
    assert [r.executable.cuda_graph_status for r in report.graphs] == ["on", "on"], str(report)
    assert "CUDA graph" in str(report) and "CUDA graph off" not in str(report)
