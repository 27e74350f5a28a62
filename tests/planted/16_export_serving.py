"""Planted bugs in 16_export_serving: each replaces one solution cell; the pipeline test expects that exercise alone
to fail."""

PLANTED = {
    "16-save-artefact": (
        # the tutorial one-liner: the pickled module, which a weights-only load refuses
        "def save_artefact(model, config, path):\n"
        "    torch.save(model, path)\n",
        "not-weights-only",
    ),
    "16-load-artefact": (
        # strict=False: an artefact whose names do not match loads silently, leaving a layer random
        "def load_artefact(path, build_model):\n"
        "    artefact = torch.load(path, weights_only=True, map_location='cpu')\n"
        "    model = build_model(**artefact['config'])\n"
        "    model.load_state_dict(artefact['state_dict'], strict=False)\n"
        "    return model.eval()\n",
        "not-strict",
    ),
    "16-predict": (
        # torch.no_grad() where inference_mode was asked
        "def predict(model, inputs, batch_size):\n"
        "    was_training = model.training\n"
        "    model.eval()\n"
        "    with torch.no_grad():\n"
        "        outputs = [model(torch.stack(inputs[i:i + batch_size])) for i in range(0, len(inputs), batch_size)]\n"
        "    model.train(was_training)\n"
        "    return torch.cat(outputs).cpu()\n",
        "no-inference-mode",
    ),
    "16-onnx-export": (
        # no dynamic_shapes: the example's batch size (4) is frozen into the file
        "def export_onnx(model, example, path):\n"
        "    model.eval()\n"
        "    torch.onnx.export(model, (example,), path, dynamo=True, verbose=False,\n"
        "                      input_names=['features'], output_names=['logits'])\n",
        "static-batch",
    ),
    "16-int8-weights": (
        # one scale for the whole matrix: the rows of small weights round to zero
        "def quantize_per_channel(weight):\n"
        "    scale = weight.abs().amax().clamp(min=1e-12) / 127\n"
        "    return torch.round(weight / scale).clamp(-127, 127).to(torch.int8), scale\n",
        "per-tensor",
    ),
}
