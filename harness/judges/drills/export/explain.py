"""The export explain drills: their options and keys."""

from __future__ import annotations

from harness.drills.core import choice_answers
from harness.judges.drills.whys import add_answers

add_answers(
    choice_answers(
        "export-dynamic-batch-example",
        options=(
            ("It exports; the program then accepts any batch size, 1 included",
             "that is what happens with an example batch of 2 or more; with 1, export cannot keep the size symbolic"),
            ("It exports, but the program is fixed to batch 1 and rejects others",
             "a Dim that cannot stay dynamic is not silently fixed: export reports the conflict instead"),
            ("It raises: size 1 is specialised, conflicting with the declared Dim",
             "export treats sizes 0 and 1 as special (broadcasting, squeezes) and specialises them, which violates "
             "the Dim('batch') you declared; an example batch of 2 or more exports a truly dynamic batch"),
            ("It exports a program that recompiles itself for each new batch size",
             "an ExportedProgram is one fixed graph with symbolic sizes; it never recompiles (that is torch.compile)"),
        ),
        key="c",
    )
)


add_answers(
    choice_answers(
        "export-dynamic-int8",
        options=(
            ("Every tensor, activations included, is int8 with ranges fixed in calibration",
             "that is static quantisation: it needs a calibration pass to fix the activation ranges in advance"),
            ("Accuracy is unchanged bit for bit: int8 represents float32 weights exactly",
             "int8 has 256 levels per scale: outputs differ slightly (the experiment prints the difference)"),
            ("The model trains faster on a GPU because the gradients are int8 as well",
             "dynamic quantisation is an inference transform for CPU kernels; it does not train nor run on CUDA"),
            ("Linear weights kept in int8 (~4x smaller); activations quantised per call",
             "the weights are quantised once; each call measures the activation range on the fly (hence "
             "'dynamic') and runs an int8 matmul: smaller, often faster on CPU, slightly less exact"),
        ),
        key="d",
    )
)


add_answers(
    choice_answers(
        "export-torchscript-trace",
        options=(
            ("x * 2: tracing recorded the branch taken; use torch.export instead",
             "trace records the operations that ran for the example (only a TracerWarning marks the lost branch); "
             "TorchScript is in maintenance, and torch.export refuses or captures such branches explicitly"),
            ("-x: tracing compiles both branches, so behaviour matches eager mode",
             "that is what torch.jit.script does by compiling the source; trace only records what ran"),
            ("An error, because traced graphs check their inputs against the example",
             "a trace has no guards on values; it runs the recorded graph silently for any input of that shape"),
            ("x * 2, and torch.jit.script is the recommended modern replacement for it",
             "the first half is right, but TorchScript as a whole (script too) is in maintenance mode"),
        ),
        key="a",
    )
)


add_answers(
    choice_answers(
        "export-onnx-dynamic-axes",
        options=(
            ("It runs: ONNX Runtime broadcasts the batch dimension automatically",
             "ONNX Runtime checks inputs against the graph's declared shapes; it does not broadcast them"),
            ("It fails: the input is fixed at [1, 16] unless marked dynamic",
             "without dynamic_axes (or dynamic_shapes with the dynamo exporter) every size of the example is baked "
             "into the graph, so the runtime rejects a batch of 8"),
            ("It runs but returns only the first row's output, silently",
             "a shape mismatch is an error in ONNX Runtime, not a truncation"),
            ("It fails only on a GPU; the CPU provider accepts any batch size",
             "the input shapes belong to the graph, whatever the execution provider"),
        ),
        key="b",
    )
)
