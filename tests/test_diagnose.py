"""harness.diagnose: the non-finite locator, the gradient-norm recorder, the LR range test and activation stats,
each against a computation done by hand on a tiny model."""

from __future__ import annotations

import copy
import math
from collections import OrderedDict

import pytest
import torch
from torch import nn

from harness.diagnose import (
    GradNormRecorder,
    capture_activations,
    dead_fraction,
    exponential_lrs,
    first_nonfinite,
    grad_norms,
    lr_range_test,
    saturated_fraction,
)


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom")


def small(middle: nn.Module) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(OrderedDict(fc=nn.Linear(4, 5), block=nn.Sequential(OrderedDict(mid=middle)),
                                     head=nn.Linear(5, 2)))


def hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_first_nonfinite_names_the_innermost_first_module():
    model = small(Log())  # log of negative pre-activations: NaN
    found = first_nonfinite(model, torch.randn(3, 4, generator=torch.Generator().manual_seed(1)))
    assert found is not None
    assert (found.module, found.type_name, found.kind, found.inputs_finite) == ("block.mid", "Log", "nan", True)
    assert hook_count(model) == 0


def test_first_nonfinite_reports_inf_and_upstream_inputs():
    model = small(nn.Identity())
    with torch.no_grad():
        model.fc.bias[0] = math.inf
    found = first_nonfinite(model, torch.zeros(2, 4))
    assert (found.module, found.kind) == ("fc", "inf")
    found = first_nonfinite(small(nn.ReLU()), torch.full((2, 4), math.nan))
    assert found.module == "fc" and not found.inputs_finite


def test_first_nonfinite_is_none_when_finite_and_removes_hooks_on_error():
    model = small(nn.ReLU())
    assert first_nonfinite(model, torch.randn(3, 4)) is None
    broken = small(Boom())
    with pytest.raises(RuntimeError, match="boom"):
        first_nonfinite(broken, torch.randn(3, 4))
    assert hook_count(model) == 0 and hook_count(broken) == 0


def test_grad_norms_match_each_gradient_and_skip_frozen():
    model = small(nn.ReLU())
    model.fc.bias.requires_grad_(False)
    model(torch.randn(6, 4)).square().mean().backward()
    norms = grad_norms(model)
    assert list(norms) == ["fc.weight", "head.weight", "head.bias"]
    for name, p in model.named_parameters():
        if name in norms:
            assert torch.allclose(norms[name], p.grad.flatten().pow(2).sum().sqrt())


def test_grad_norm_recorder_stacks_steps():
    model = small(nn.Tanh())
    recorder = GradNormRecorder(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []
    for _ in range(3):
        optimizer.zero_grad(set_to_none=True)
        model(torch.randn(5, 4)).square().mean().backward()
        recorder.record()
        expected.append(float(model.head.weight.grad.norm()))
        optimizer.step()
    history = recorder.history()
    assert set(history) == {name for name, _ in model.named_parameters()}
    assert torch.allclose(history["head.weight"], torch.tensor(expected))


def test_exponential_lrs_are_geometric_and_include_both_ends():
    lrs = exponential_lrs(1e-4, 1.0, 5)
    assert lrs[0] == pytest.approx(1e-4) and lrs[-1] == pytest.approx(1.0)
    assert all(b / a == pytest.approx(10.0) for a, b in zip(lrs, lrs[1:], strict=False))
    with pytest.raises(ValueError):
        exponential_lrs(1.0, 0.1, 5)


def _problem():
    generator = torch.Generator().manual_seed(3)
    batches = [(torch.randn(16, 4, generator=generator), torch.randint(0, 2, (16,), generator=generator))
               for _ in range(3)]
    model = small(nn.ReLU())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(batches[0][0]), batches[0][1]).backward()
    optimizer.step()  # momentum buffers exist: the restore must bring them back too
    return model, optimizer, batches


def test_lr_range_test_sweeps_stops_on_divergence_and_restores_everything():
    model, optimizer, batches = _problem()
    before_model, before_optimizer = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    model.eval()
    result = lr_range_test(model, optimizer, nn.functional.cross_entropy, batches, start_lr=1e-3, end_lr=1e3,
                           num_steps=40)
    assert result.diverged and len(result.lrs) < 40
    assert result.lrs == pytest.approx(exponential_lrs(1e-3, 1e3, 40)[:len(result.lrs)])
    last = result.losses[-1]
    assert not math.isfinite(last) or last > 4.0 * min(result.losses[:-1] + [last])
    assert all(v <= 4.0 * min(result.losses[:i + 1]) for i, v in enumerate(result.losses[:-1]))
    assert not model.training
    for key, value in before_model.items():
        assert torch.equal(model.state_dict()[key], value)
    after = optimizer.state_dict()
    assert [g["lr"] for g in after["param_groups"]] == [0.05]
    for key, state in before_optimizer["state"].items():
        assert torch.equal(after["state"][key]["momentum_buffer"], state["momentum_buffer"])


def test_lr_range_test_losses_are_the_losses_before_each_step():
    model, optimizer, batches = _problem()
    twin = copy.deepcopy(model)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.05, momentum=0.9)
    twin_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # its own momentum buffers
    result = lr_range_test(model, optimizer, nn.functional.cross_entropy, batches, start_lr=1e-4, end_lr=1e-2,
                           num_steps=6)
    assert not result.diverged and len(result.losses) == 6
    for i, lr in enumerate(result.lrs):
        for group in twin_optimizer.param_groups:
            group["lr"] = lr
        twin_optimizer.zero_grad()
        loss = nn.functional.cross_entropy(twin(batches[i % 3][0]), batches[i % 3][1])
        assert float(loss.detach()) == pytest.approx(result.losses[i], rel=1e-5), i
        loss.backward()
        twin_optimizer.step()
    assert min(result.lrs) <= result.suggestion() <= max(result.lrs)


def test_activation_stats_count_dead_and_saturated_units():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())
    with torch.no_grad():
        model[0].bias.copy_(torch.tensor([-100.0, -100.0, 0.0, 0.0]))  # two units never fire
        model[2].weight.mul_(100.0)
    acts = capture_activations(model, torch.randn(64, 3))
    assert list(acts) == ["1", "3"] and hook_count(model) == 0
    assert float(dead_fraction(acts["1"])) == pytest.approx(0.5, abs=0.25)
    assert float(dead_fraction(acts["1"])) >= 0.5
    assert float(saturated_fraction(acts["3"])) > 0.5
    assert float(saturated_fraction(torch.zeros(4, 4))) == 0.0
