"""CUDA-graph capture and replay of static executables (GPU only)."""

from __future__ import annotations

import pytest
import torch

import opgraph as og

pytestmark = pytest.mark.gpu
PLAIN = og.CompilationDescriptor(cuda_graphs=False)


def test_replay_matches_op_by_op_and_outputs_are_not_overwritten() -> None:
    g = og.Graph()
    x = g.placeholder((64, 32), og.float32, name="x")
    w = g.variable(torch.randn(32, 16), name="w")
    y = g.softmax(g.relu(x @ w) * 2.0 + 1.0, axis=-1)
    exe = g.compile({x: x.type}, [y], device="cuda")
    ref = g.compile({x: x.type}, [y], device="cuda", descriptor=PLAIN)
    a, b = torch.randn(64, 32, device="cuda"), torch.randn(64, 32, device="cuda")
    (ra,) = exe.run([a])
    assert exe.cuda_graph_status == "on" and ref.cuda_graph_status == "off"
    (rb,) = exe.run([b])
    torch.testing.assert_close(ra, ref.run([a])[0])
    torch.testing.assert_close(rb, ref.run([b])[0])
    assert not torch.equal(ra, rb)  # the first result survived the second replay


def test_variables_updated_across_100_replays() -> None:
    g = og.Graph()
    w = g.variable(torch.zeros(4), name="w")
    x = g.placeholder((4,), og.float32, name="x")
    before = g.read(w)
    upd = g.assign(w, w + x)
    exe = g.compile({x: x.type}, [before], [upd], device="cuda")
    ones = torch.ones(4, device="cuda")
    seen = [exe.run([ones])[0][0].item() for _ in range(100)]
    assert exe.cuda_graph_status == "on"
    assert seen == [float(i) for i in range(100)]  # each replay sees the previous replay's assign
    assert g.variable_value(w, "cuda").tolist() == [100.0] * 4
    g.set_variable_value(w, torch.zeros(4), "cuda")  # in place: the captured graph sees it
    assert exe.run([ones])[0].tolist() == [0.0] * 4


def test_ops_that_synchronise_fall_back_to_op_by_op() -> None:
    g = og.Graph()
    x = g.placeholder((8,), og.float32)
    i = g.placeholder((3,), og.int64)
    y = g.gather(x, i)  # index checking synchronises with the host
    exe = g.compile({x: x.type, i: i.type}, [y], device="cuda")
    got = exe.run([torch.arange(8.0, device="cuda"), torch.tensor([7, 0, -1], device="cuda")])[0]
    assert got.tolist() == [7.0, 0.0, 7.0] and exe.cuda_graph_status.startswith("off: capture failed")
    torch.randn(4, device="cuda")  # the failed capture left the default generator usable
    fast = g.compile({x: x.type, i: i.type}, [y], device="cuda",
                     descriptor=og.CompilationDescriptor(check_indices=False))
    assert fast.run([torch.arange(8.0, device="cuda"), torch.tensor([7, 0, -1], device="cuda")])[0].tolist() == \
        [7.0, 0.0, 7.0]
    assert fast.cuda_graph_status == "on"


def test_a_failed_capture_leaves_earlier_graphs_on_the_default_generator() -> None:
    # a graph of random numbers captured before: its replays advance the default generator's offset, so eager
    # random numbers after it do not repeat its own (a fresh generator state would leave it advancing the old one)
    generator = torch.cuda.default_generators[torch.cuda.current_device()]
    noise, graph = torch.empty(4096, device="cuda"), torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        noise.uniform_()
    g = og.Graph()
    x, i = g.placeholder((8,), og.float32), g.placeholder((3,), og.int64)
    exe = g.compile({x: x.type, i: i.type}, [g.gather(x, i)], device="cuda")
    exe.run([torch.arange(8.0, device="cuda"), torch.tensor([7, 0, -1], device="cuda")])
    assert exe.cuda_graph_status.startswith("off: capture failed")
    before = generator.get_offset()
    graph.replay()
    assert generator.get_offset() > before
    torch.randn(4, device="cuda")


def _training_step(descriptor: og.CompilationDescriptor) -> og.Executable:
    g = og.Graph()
    xs = g.placeholder((16, 1, 8, 8), og.float32, name="x")
    ys = g.placeholder((16,), og.int64, name="y")
    gen = torch.Generator().manual_seed(0)
    model = og.nn.Sequential(og.nn.Conv2d(g, 1, 4, 3, padding=1, generator=gen), og.nn.BatchNorm2d(g, 4),
                             og.nn.ReLU(), og.nn.MaxPool2d(2), og.nn.Flatten(), og.nn.Linear(g, 64, 10, generator=gen))
    loss = g.softmax_cross_entropy(model(xs), ys)
    updates = og.optim.SGD(g, model.parameters, lr=0.1, momentum=0.9).step(loss) + model.updates
    return g.compile({xs: xs.type, ys: ys.type}, [loss], updates, device="cuda", descriptor=descriptor)


def test_training_step_replayed_matches_op_by_op() -> None:
    gen = torch.Generator().manual_seed(1)
    batches = [[torch.randn(16, 1, 8, 8, generator=gen).cuda(), torch.randint(0, 10, (16,), generator=gen).cuda()]
               for _ in range(5)]
    graphed, plain = _training_step(og.CompilationDescriptor()), _training_step(PLAIN)
    a = [graphed.run(b)[0].item() for b in batches]
    b = [plain.run(b)[0].item() for b in batches]
    assert graphed.cuda_graph_status == "on"
    assert a == pytest.approx(b, rel=1e-5) and a[0] != a[-1]


def _scaled(static: list[int]) -> og.Executable:
    g = og.Graph()
    x = g.placeholder((8,), og.float32, name="x")
    w = g.placeholder((8,), og.float32, name="w")
    exe = g.compile({x: x.type, w: w.type}, [g.exp(x) * w + 1.0], device="cuda")
    exe.mark_static_inputs(static)
    return exe


def test_static_inputs_are_read_in_place_and_recaptured_when_moved() -> None:
    exe = _scaled([1])
    x, w = torch.randn(8, device="cuda"), torch.randn(8, device="cuda")
    want = lambda w: x.exp() * w + 1.0  # noqa: E731
    torch.testing.assert_close(exe.run([x, w])[0], want(w))
    assert exe.cuda_graph_status == "on"
    w.mul_(3.0)  # changed in place: the replay reads the new values (nothing copied)
    torch.testing.assert_close(exe.run([x, w])[0], want(w))
    assert exe._cuda_graph is not None and [i for _, i in exe._cuda_graph.copied] == [0]
    other = torch.randn(8, device="cuda")  # another tensor at the static input: captured again, read in place
    torch.testing.assert_close(exe.run([x, other])[0], want(other))
    assert [i for _, i in exe._cuda_graph.copied] == [0] and exe._recaptures == 1
    for k in range(3):  # moving again: captured again once, with that input copied
        other = torch.randn(8, device="cuda")
        torch.testing.assert_close(exe.run([x, other])[0], want(other))
        assert exe.cuda_graph_status == "on", k
        assert [i for _, i in exe._cuda_graph.copied] == [0, 1] and exe._recaptures == 2
    strided = torch.randn(16, device="cuda")[::2]  # other strides: copied as well
    torch.testing.assert_close(exe.run([x, strided])[0], want(strided))
    assert exe._recaptures == 2


def test_inputs_that_move_together_cost_two_captures() -> None:
    exe = _scaled([0, 1])
    for _ in range(5):  # both static inputs move on every run: both copied once they moved twice
        x, w = torch.randn(8, device="cuda"), torch.randn(8, device="cuda")
        torch.testing.assert_close(exe.run([x, w])[0], x.exp() * w + 1.0)
    assert exe.cuda_graph_status == "on" and exe._recaptures == 2
    assert exe._cuda_graph is not None and [i for _, i in exe._cuda_graph.copied] == [0, 1]


def test_outputs_are_lent_and_copied_once_a_caller_keeps_them() -> None:
    """A replay returns the graph's own output buffers; a run while the caller still holds the last replay's
    outputs is captured again (the held result survives), and those outputs are copied out from then on."""
    g = og.Graph()
    x = g.placeholder((64,), og.float32, name="x")
    exe = g.compile({x: x.type}, [g.exp(x) * 2.0, g.reduce_sum(x, 0)], device="cuda")
    xs = [torch.randn(64, device="cuda") for _ in range(6)]
    want = lambda a: [a.exp() * 2.0, a.sum()]  # noqa: E731
    ptrs = []
    for a in xs[:3]:  # dropped after use: the same buffers every replay
        got = exe.run([a])
        torch.testing.assert_close(got, want(a))
        ptrs.append(got[0].data_ptr())
        del got
    assert exe.cuda_graph_status == "on" and len(set(ptrs)) == 1 and not exe._copied_outputs
    kept = exe.run([xs[3]])[1]  # the caller keeps the sum
    later = exe.run([xs[4]])  # a replay would overwrite it: captured again
    torch.testing.assert_close(kept, xs[3].sum())
    torch.testing.assert_close(later, want(xs[4]))
    assert exe._copied_outputs == {1} and exe._recaptures == 1 and exe.cuda_graph_status == "on"
    del later
    again = exe.run([xs[5]])  # a replay: the sum copied out, the product lent
    torch.testing.assert_close(again, want(xs[5]))
    kept, lent = again[1], again[0].data_ptr()
    del again
    last = exe.run([xs[0]])  # the kept copy does not stop the replay
    torch.testing.assert_close(last, want(xs[0]))
    torch.testing.assert_close(kept, xs[5].sum())
    assert lent == last[0].data_ptr() and exe._recaptures == 1  # the new capture's buffer, lent again


def test_static_inputs_lift_the_copy_cost_limit() -> None:
    g = og.Graph()
    x = g.placeholder((4,), og.float32)
    w = g.placeholder((1 << 26,), og.float32)  # 256 MiB: copying it per replay costs more than one launch saves
    exe = g.compile({x: x.type, w: w.type}, [g.reduce_sum(w[:4] * x, 0)], device="cuda")
    args = [torch.ones(4, device="cuda"), torch.ones(1 << 26, device="cuda")]
    assert exe.run(args)[0].item() == 4.0 and exe.cuda_graph_status.startswith("off: copying")
    exe.mark_static_inputs([1])
    assert exe.run(args)[0].item() == 4.0 and exe.cuda_graph_status == "on"
    with pytest.raises(og.OpgraphError, match="out of range"):
        exe.mark_static_inputs([2])


def test_backend_parameters_updated_in_place_are_seen_by_replays() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda().eval()
    x = torch.randn(8, 16, device="cuda")
    torch._dynamo.reset()
    fast = torch.compile(model, backend="opgraph")
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(fast(x), model(x))
            for p in model.parameters():  # an optimizer step, in place
                p.add_(0.1 * torch.randn_like(p))


def test_costly_replays_are_timed_against_op_by_op_and_the_faster_kept() -> None:
    g = og.Graph()
    x = g.placeholder((16, 16), og.float32, name="x")
    big = g.placeholder((1 << 24,), og.float32, name="big")  # 64 MiB copied per replay: worth timing
    y = x
    for _ in range(40):  # 40 launches that do not fuse
        y = g.matmul(y, x)
    exe = g.compile({x: x.type, big: big.type}, [y, g.reduce_max(big, 0)], device="cuda")
    plain = g.compile({x: x.type, big: big.type}, [y, g.reduce_max(big, 0)], device="cuda", descriptor=PLAIN)
    args = [torch.randn(16, 16, device="cuda") / 16, torch.randn(1 << 24, device="cuda")]
    want = plain.run(args)
    for k in range(4):  # capture, timed replay, timed op-by-op run, then the kept way
        torch.testing.assert_close(exe.run(args), want)
        assert (exe._trial is None) == (k >= 2), k
    assert exe.cuda_graph_status == "on" or exe.cuda_graph_status.startswith("off: a replay")


def test_an_update_only_executable_applies_its_assigns_once_per_run() -> None:
    g = og.Graph()
    w = g.variable(torch.zeros(3), name="w")
    x = g.placeholder((3,), og.float32, name="x")
    exe = g.compile({x: x.type}, [], [g.assign(w, w + x)], device="cuda")
    for k in range(1, 4):
        assert exe.run([torch.ones(3, device="cuda")]) == []
        assert g.variable_value(w, "cuda").tolist() == [float(k)] * 3, (k, exe.cuda_graph_status)
