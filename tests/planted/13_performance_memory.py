"""Planted bugs in 13_performance_memory: each replaces one solution cell; the pipeline test expects that
exercise alone to fail."""

PLANTED = {
    "13-memory-formula": (
        # every parameter taken as 4 bytes: wrong for the bfloat16 layer
        "def training_memory(model, optimizer):\n"
        "    params = list(model.parameters())\n"
        "    trained = [p for p in params if p.requires_grad]\n"
        "    copies = {'sgd': 0, 'momentum': 1, 'adam': 2, 'adamw': 2}[optimizer]\n"
        "    memory = {'params': 4 * sum(p.numel() for p in params), 'grads': 4 * sum(p.numel() for p in trained)}\n"
        "    memory['optimizer'] = copies * memory['grads']\n"
        "    return {**memory, 'total': sum(memory.values())}\n",
        "wrong-params",
    ),
    "13-activation-formula": (
        # the ReLU output counted again as the next Linear's input: one tensor counted twice
        "def activation_formula(batch_size, widths, dtype):\n"
        "    element = torch.empty((), dtype=dtype).element_size()\n"
        "    return batch_size * (widths[0] + 2 * sum(widths[1:-1])) * element\n",
        "counted-twice",
    ),
    "13-accumulate": (
        # each micro-batch divided by the number of micro-batches: the smaller last one weighs too much
        "def accumulation_step(model, batch, loss_fn, optimizer, micro_batch_size):\n"
        "    inputs, targets = batch\n"
        "    model.train()\n"
        "    optimizer.zero_grad(set_to_none=True)\n"
        "    chunks = list(zip(inputs.split(micro_batch_size), targets.split(micro_batch_size)))\n"
        "    total = torch.zeros(())\n"
        "    for x, y in chunks:\n"
        "        loss = loss_fn(model(x), y) / len(chunks)\n"
        "        loss.backward()\n"
        "        total += loss.detach()\n"
        "    optimizer.step()\n"
        "    return total\n",
        "wrong-weighting",
    ),
    "13-checkpoint": (
        # preserve_rng_state=False: the recomputation draws new dropout masks
        "def checkpointed_forward(blocks, x):\n"
        "    h = x\n"
        "    for block in blocks:\n"
        "        h = checkpoint(block, h, use_reentrant=False, preserve_rng_state=False)\n"
        "    return h\n",
        "wrong-grads",
    ),
    "13-deterministic": (
        # the flags are restored after the yield but not in a finally: an exception skips it
        "@contextlib.contextmanager\n"
        "def deterministic():\n"
        "    before = (torch.are_deterministic_algorithms_enabled(),\n"
        "              torch.is_deterministic_algorithms_warn_only_enabled(),\n"
        "              torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)\n"
        "    torch.use_deterministic_algorithms(True)\n"
        "    torch.backends.cudnn.benchmark = False\n"
        "    torch.backends.cudnn.deterministic = True\n"
        "    yield\n"
        "    torch.use_deterministic_algorithms(before[0], warn_only=before[1])\n"
        "    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[2], before[3]\n",
        "not-restored-on-error",
    ),
}
