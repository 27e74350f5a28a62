"""The bank's topics and kinds: names only, so the command line can offer them without importing torch."""

TOPICS = (
    "tensors", "autograd", "modules", "loop", "data", "amp", "clipping", "schedulers", "checkpointing", "ddp",
    "repro", "performance", "debugging", "memory", "finetuning", "sequences", "export",
)
KINDS = ("write", "bughunt", "explain")
