"""The speed path: the device-resident loader, its augmentation, fast_fit, the airbench network, and the
GPU speed-run benchmark's smoke path. Everything runs on CPU in seconds; GPU tests are marked."""

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness.airbench import AirbenchHyperparameters, airbench_net, airbench_optimizer, airbench_schedule, whiten_stem
from harness.contract.instruments import HostSyncCounter
from harness.data import normalization_stats, shapes
from harness.fast import DeviceResidentLoader, fast_fit, random_flip, random_translate, to_device
from harness.models import capstone_cnn
from harness.train import NonFiniteLossError

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_speedrun.py"


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("gpu_speedrun", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _numbered_images(n: int, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Image i is filled with the value i and its target is i, so every batch says which samples it holds."""
    ids = torch.arange(n)
    return ids.float()[:, None, None, None].expand(n, 3, size, size).clone(), ids


def _epoch_ids(loader: DeviceResidentLoader) -> list[int]:
    return torch.cat([targets for _, targets in loader]).tolist()


# --- the device-resident loader -----------------------------------------------------------------------------

def test_loader_visits_every_sample_exactly_once_per_epoch():
    images, ids = _numbered_images(50)
    loader = DeviceResidentLoader(images, ids, batch_size=8, seed=0)
    assert len(loader) == 7
    for _ in range(3):
        batches = list(loader)
        assert [len(t) for _, t in batches] == [8] * 6 + [2]
        assert sorted(torch.cat([t for _, t in batches]).tolist()) == list(range(50))
        for inputs, targets in batches:  # each input travels with its own target
            assert torch.equal(inputs[:, 0, 0, 0], targets.float())

    dropping = DeviceResidentLoader(images, ids, batch_size=8, drop_last=True, seed=0)
    assert len(dropping) == 6
    seen = _epoch_ids(dropping)
    assert len(seen) == 48 and len(set(seen)) == 48


def test_loader_is_reproducible_with_its_seed_and_reshuffles_every_epoch():
    images, ids = _numbered_images(64)
    options = {"batch_size": 16, "flip": True, "translate": 2, "seed": 3}
    first, second = DeviceResidentLoader(images, ids, **options), DeviceResidentLoader(images, ids, **options)
    for _ in range(2):
        for (x1, y1), (x2, y2) in zip(first, second, strict=True):
            assert torch.equal(x1, x2) and torch.equal(y1, y2)
    epochs = [_epoch_ids(first) for _ in range(3)]
    assert epochs[0] != epochs[1] != epochs[2]
    assert _epoch_ids(DeviceResidentLoader(images, ids, **{**options, "seed": 4})) != _epoch_ids(
        DeviceResidentLoader(images, ids, **options))
    in_order = DeviceResidentLoader(images, ids, batch_size=16, shuffle=False)
    assert _epoch_ids(in_order) == list(range(64))


def test_loader_normalises_once_and_yields_channels_last():
    images = torch.rand(20, 3, 8, 8)
    targets = torch.randint(0, 5, (20,))
    mean, std = normalization_stats(images)
    loader = DeviceResidentLoader(images, targets, batch_size=20, shuffle=False, mean=mean, std=std)
    inputs, _ = next(iter(loader))
    torch.testing.assert_close(inputs, (images - mean) / std)
    assert inputs.is_contiguous(memory_format=torch.channels_last)
    assert loader.inputs.dtype == torch.float32
    half = DeviceResidentLoader(images, targets, batch_size=20, dtype=torch.bfloat16)
    assert next(iter(half))[0].dtype == torch.bfloat16


def test_loader_rejects_what_cannot_work():
    with pytest.raises(ValueError, match="samples"):
        DeviceResidentLoader(torch.zeros(4, 3, 8, 8), torch.zeros(5), batch_size=2)
    with pytest.raises(ValueError, match="batch_size"):
        DeviceResidentLoader(torch.zeros(4, 3, 8, 8), torch.zeros(4), batch_size=0)
    with pytest.raises(ValueError, match="images"):
        DeviceResidentLoader(torch.zeros(4, 10), torch.zeros(4), batch_size=2, flip=True)


# --- augmentation against a plain per-image reference --------------------------------------------------------

def test_random_flip_matches_a_per_image_reference():
    images = torch.randn(32, 3, 6, 7)
    flipped = random_flip(images, torch.Generator().manual_seed(0))
    # the same draw, then one image at a time
    mirror = torch.rand(32, generator=torch.Generator().manual_seed(0)) < 0.5
    assert 0 < int(mirror.sum()) < 32  # both outcomes occur
    for image, out, m in zip(images, flipped, mirror, strict=True):
        assert torch.equal(out, image.flip(-1) if m else image)


def test_random_translate_matches_a_per_image_reference():
    r, images = 2, torch.randn(40, 3, 9, 11)
    shifted = random_translate(images, r, torch.Generator().manual_seed(1))
    assert shifted.shape == images.shape and shifted.is_contiguous(memory_format=torch.channels_last)
    offsets = torch.randint(0, 2 * r + 1, (40, 2), generator=torch.Generator().manual_seed(1))
    assert len({tuple(o) for o in offsets.tolist()}) > 10  # many different shifts in one batch
    for image, out, (oy, ox) in zip(images, shifted, offsets.tolist(), strict=True):
        padded = F.pad(image[None], (r, r, r, r), mode="reflect")[0]
        assert torch.equal(out, padded[:, oy:oy + 9, ox:ox + 11])
        # and what it means: pixel (y, x) comes from (y + dy, x + dx) of the original, where that exists
        dy, dx = oy - r, ox - r
        ys, xs = slice(max(0, -dy), min(9, 9 - dy)), slice(max(0, -dx), min(11, 11 - dx))
        source = image[:, ys.start + dy:ys.stop + dy, xs.start + dx:xs.stop + dx]
        assert torch.equal(out[:, ys, xs], source)


# --- fast_fit ------------------------------------------------------------------------------------------------

def _shapes_loaders(n: int = 1024, seed: int = 0) -> tuple[DeviceResidentLoader, DeviceResidentLoader]:
    train, val = shapes(n, seed=0), shapes(256, seed=1)
    mean, std = normalization_stats(train.tensors[0])
    return (DeviceResidentLoader(*train.tensors, batch_size=64, mean=mean, std=std, flip=True, translate=2,
                                 drop_last=True, seed=seed),
            DeviceResidentLoader(*val.tensors, batch_size=256, mean=mean, std=std, shuffle=False))


def test_fast_fit_trains_a_cnn_on_shapes_well_above_chance():
    train, val = _shapes_loaders()
    torch.manual_seed(0)
    model = to_device(capstone_cnn(classes=5, width=8), "cpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=6 * len(train))
    history = fast_fit(model, train, val, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=6,
                       scheduler=scheduler)
    assert list(history.columns) == ["epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "lr",
                                     "epoch_seconds", "samples_per_second"]
    assert history["val_accuracy"].iloc[-1] > 0.45  # chance is 0.2 (5 classes); this seed reaches about 0.6
    assert history["train_loss"].iloc[-1] < history["train_loss"].iloc[0]
    assert history["lr"].iloc[-1] < 1e-4  # the per-step one-cycle schedule ran to its end
    assert history.attrs["config"]["precision"] == "fp32" and history.attrs["config"]["fused"] is True
    assert not model.training  # evaluation ran last, in eval mode


def test_fast_fit_reads_the_device_once_per_epoch():
    train, val = _shapes_loaders(n=256)
    model = to_device(capstone_cnn(classes=5, width=4), "cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
    with HostSyncCounter() as syncs:
        fast_fit(model, train, val, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=3, scheduler=scheduler)
    assert syncs.count == 3, syncs.calls

    def loss_read_every_step(outputs, targets):  # the habit fast_fit avoids: the counter sees it
        loss = F.cross_entropy(outputs, targets)
        loss.item()
        return loss

    with HostSyncCounter() as syncs:
        fast_fit(model, train, loss_fn=loss_read_every_step, optimizer=optimizer, epochs=1)
    assert syncs.count == 1 + len(train)


def test_fast_fit_gives_the_same_losses_as_the_hand_tuned_loop():
    """Same network, data, seed and hyperparameters: the two loops must train on the same batches and take
    the same steps. On CPU in fp32 the operations are the same, so the losses agree to float32 rounding;
    the tolerance (1e-5 relative) is far below the difference another seed makes (checked below)."""
    benchmark = _load_benchmark()
    hyp = AirbenchHyperparameters(batch_size=32, widths=(8, 16, 16))
    data = shapes(128, seed=0)
    mean, std = normalization_stats(data.tensors[0])
    images, labels = (data.tensors[0] - mean) / std, data.tensors[1]
    options = {"hyp": hyp, "epochs": 2, "precision": "fp32", "compile": False}

    history = benchmark.fast_path(benchmark.make_airbench(hyp, images, 5, seed=0), images, labels, seed=0, **options)
    steps, _ = benchmark.hand_tuned_loop(benchmark.make_airbench(hyp, images, 5, seed=0), images, labels, seed=0,
                                         **options)
    hand = steps.reshape(2, -1).mean(dim=1).tolist()
    assert history["train_loss"].tolist() == pytest.approx(hand, rel=1e-5)

    other, _ = benchmark.hand_tuned_loop(benchmark.make_airbench(hyp, images, 5, seed=0), images, labels, seed=1,
                                         **options)
    assert other.reshape(2, -1).mean(dim=1).tolist() != pytest.approx(hand, rel=1e-3)


def test_fast_fit_stops_on_a_non_finite_loss_and_rejects_bad_options():
    train, _ = _shapes_loaders(n=128)
    model = to_device(capstone_cnn(classes=5, width=4), "cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(NonFiniteLossError, match="epoch 1"):
        fast_fit(model, train, loss_fn=lambda o, t: F.cross_entropy(o, t) * math.nan, optimizer=optimizer, epochs=1)
    with pytest.raises(ValueError, match="GradScaler"):
        fast_fit(model, train, loss_fn=F.cross_entropy, optimizer=optimizer, epochs=1, precision="fp16")
    with pytest.raises(ValueError, match="epochs"):
        fast_fit(model, train, loss_fn=F.cross_entropy, optimizer=optimizer, epochs=0)
    stranger = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="not the model's"):
        fast_fit(model, train, loss_fn=F.cross_entropy, optimizer=stranger, epochs=1)


# --- the airbench network ------------------------------------------------------------------------------------

def test_airbench_net_whitened_stem_and_optimizer_groups():
    torch.manual_seed(0)
    net = to_device(airbench_net(classes=5, widths=(8, 16, 16)), "cpu")
    images = torch.randn(64, 3, 32, 32) * torch.tensor([1.0, 2.0, 0.5])[:, None, None]
    whiten_stem(net, images)
    assert net(images).shape == (64, 5)
    stem = net[0]
    assert not stem.weight.requires_grad
    # the first half of the filters whitens the 2x2 patches: their outputs have identity covariance
    responses = F.conv2d(images, stem.weight[:12]).permute(0, 2, 3, 1).reshape(-1, 12)
    torch.testing.assert_close(responses.T @ responses / len(responses), torch.eye(12), atol=5e-3, rtol=0)

    hyp = AirbenchHyperparameters()
    optimizer = airbench_optimizer(net, hyp, fused=False)
    trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert trained == {id(p) for p in net.parameters() if p.requires_grad}
    assert id(stem.weight) not in trained
    main, biases = optimizer.param_groups
    assert biases["lr"] == pytest.approx(hyp.bias_scaler * main["lr"])
    assert main["lr"] * main["weight_decay"] == pytest.approx(biases["lr"] * biases["weight_decay"])

    scheduler = airbench_schedule(optimizer, total_steps=100, hyp=hyp)
    factors = [scheduler.lr_lambdas[0](step) for step in (0, 23, 100)]
    assert factors == pytest.approx([hyp.lr_start, 1.0, hyp.lr_end])


# --- the benchmark's smoke path ------------------------------------------------------------------------------

def test_gpu_speedrun_quick_runs_on_cpu_and_writes_its_tables(tmp_path, capsys):
    results = _load_benchmark().main(["--quick", "--device", "cpu", "--out", str(tmp_path)])
    throughput = pd.read_csv(tmp_path / "gpu_speedrun.csv")
    assert set(throughput["method"]) == set(results["throughput"]["method"])
    assert len(throughput) == 4 and (throughput["images/s (median)"] > 0).all()
    assert {"device_name", "torch", "git_commit"} <= set(throughput.columns)
    accuracy = pd.read_csv(tmp_path / "gpu_speedrun_accuracy.csv")
    assert accuracy["final val accuracy (median)"].between(0, 1).all()
    assert "hand-tuned loop" in capsys.readouterr().out


# --- on a GPU ------------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_fast_fit_on_cuda_with_bf16_and_compile_learns():
    train, val = _shapes_loaders()
    train = DeviceResidentLoader(train.inputs, train.targets, batch_size=64, flip=True, translate=2,
                                 drop_last=True, device="cuda", seed=0)
    val = DeviceResidentLoader(val.inputs, val.targets, batch_size=256, shuffle=False, device="cuda")
    torch.manual_seed(0)
    model = to_device(capstone_cnn(classes=5, width=8), "cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=6 * len(train))
    history = fast_fit(model, train, val, loss_fn=nn.CrossEntropyLoss(), optimizer=optimizer, epochs=6,
                       scheduler=scheduler, compile=True)
    assert history.attrs["config"]["precision"] == "bf16"
    assert history["val_accuracy"].iloc[-1] > 0.45
    assert (history["samples_per_second"] > 0).all()


@pytest.mark.gpu
def test_loader_on_cuda_is_reproducible_and_complete():
    images, ids = _numbered_images(100)
    first = DeviceResidentLoader(images, ids, batch_size=16, flip=True, translate=2, device="cuda", seed=0)
    second = DeviceResidentLoader(images, ids, batch_size=16, flip=True, translate=2, device="cuda", seed=0)
    for (x1, y1), (x2, y2) in zip(first, second, strict=True):
        assert x1.is_cuda and torch.equal(x1, x2) and torch.equal(y1, y2)
    assert sorted(_epoch_ids(first)) == list(range(100))
