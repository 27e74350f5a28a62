"""harness.memory: bytes of parameters, gradients, optimizer state and saved activations, measured on live tensors."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from harness.memory import (
    cuda_peak_bytes,
    gradient_bytes,
    optimizer_state_bytes,
    parameter_bytes,
    saved_for_backward,
    static_memory,
    tensor_bytes,
)


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))  # 220 + 105 = 325 parameters


def test_tensor_bytes_counts_each_storage_once():
    a = torch.zeros(100)
    assert tensor_bytes([a]) == 400
    assert tensor_bytes([a, a, a[10:], a.view(10, 10).t()]) == 400, "views share the storage"
    assert tensor_bytes([a, torch.zeros(3, dtype=torch.bfloat16)]) == 406
    assert tensor_bytes([]) == 0


def test_parameter_and_gradient_bytes_follow_dtype_ties_and_grads():
    model = _mlp()
    assert parameter_bytes(model) == 325 * 4
    assert gradient_bytes(model) == 0, "no backward yet"
    model(torch.randn(3, 10)).sum().backward()
    assert gradient_bytes(model) == 325 * 4
    model.zero_grad(set_to_none=True)
    assert gradient_bytes(model) == 0
    tied = nn.Sequential(nn.Embedding(7, 4), nn.Linear(4, 7, bias=False))
    tied[1].weight = tied[0].weight
    assert parameter_bytes(tied) == 7 * 4 * 4, "a tied weight counts once"
    assert parameter_bytes(_mlp().to(torch.bfloat16)) == 325 * 2


@pytest.mark.parametrize(("make", "copies"), [
    (lambda ps: torch.optim.SGD(ps, lr=0.1), 0),
    (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 1),
    (lambda ps: torch.optim.Adam(ps, lr=0.1), 2),
    (lambda ps: torch.optim.AdamW(ps, lr=0.1), 2),
])
def test_optimizer_state_is_measured_after_the_first_step(make, copies):
    model = _mlp()
    optimizer = make(model.parameters())
    assert optimizer_state_bytes(optimizer) == 0, "state is created lazily"
    model(torch.randn(3, 10)).sum().backward()
    optimizer.step()
    measured = optimizer_state_bytes(optimizer)
    steps = 4 * 4 if copies == 2 else 0  # Adam keeps a float32 step counter per parameter tensor
    assert measured == copies * 325 * 4 + steps
    memory = static_memory(model, optimizer)
    assert memory == {"params": 1300, "grads": 1300, "optimizer": measured, "total": 2600 + measured}


def test_saved_for_backward_counts_activations_and_can_leave_out_parameters():
    model = _mlp()
    x = torch.randn(8, 10)
    with saved_for_backward() as everything:
        loss = model(x).sum()
    with saved_for_backward(exclude=model.parameters()) as activations:
        loss = model(x).sum()
    loss.backward()  # the saved tensors are still usable: the hooks keep them as they are
    assert activations.bytes < everything.bytes
    assert everything.bytes - activations.bytes == 20 * 5 * 4, "the second layer's weight, saved for backward"
    # x (8x10) for the first layer, the ReLU output (8x20) for the second layer and for ReLU's own backward
    assert activations.bytes == (8 * 10 + 8 * 20) * 4
    assert activations.count == 3 and ((8, 20), torch.float32) in activations.shapes
    with saved_for_backward() as none:
        with torch.no_grad():
            model(x)
    assert none.bytes == 0 and none.count == 0


def test_a_saved_view_counts_the_storage_it_keeps_alive():
    layer = nn.Linear(10, 2)
    dataset = torch.randn(100, 10)
    with saved_for_backward(exclude=layer.parameters()) as view:
        layer(dataset[:8])
    with saved_for_backward(exclude=layer.parameters()) as copy:
        layer(dataset[:8].clone())
    assert view.bytes == 100 * 10 * 4 and copy.bytes == 8 * 10 * 4


def test_saved_bytes_grow_with_the_batch_and_shrink_with_checkpointing():
    torch.manual_seed(0)
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4))

    def measure(batch: int, checkpointed: bool) -> int:
        h = torch.randn(batch, 32)
        with saved_for_backward(exclude=blocks.parameters()) as saved:
            for block in blocks:
                h = checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
        h.sum().backward()
        return saved.bytes

    assert measure(64, False) == 2 * measure(32, False)
    assert measure(64, True) == 4 * 64 * 32 * 4, "checkpointing keeps each block's input only"
    assert measure(64, True) < measure(64, False)


def test_cuda_peak_bytes_is_none_off_cuda_and_does_not_run():
    ran = []
    assert cuda_peak_bytes(lambda: ran.append(1), "cpu") is None
    assert ran == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_peak_bytes_measures_an_allocation():
    def allocate() -> None:
        x = torch.empty(1024, 1024, device="cuda")  # 4 MiB
        del x

    assert cuda_peak_bytes(allocate, "cuda") >= 4 * 2**20
