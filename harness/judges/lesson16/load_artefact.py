"""16-load-artefact, the judge.

The loader returns the model with the saved state in eval mode, also from a file saved on a GPU this machine
lacks; it refuses a file that would run code and an artefact whose names do not match.
"""

from __future__ import annotations

from harness.checks.lesson16.common import case_model, cloned_state
from harness.contract.case import Case
from harness.contract.failure import Hints, Requirement, fail
from harness.contract.registry import judges
from harness.contract.wire import WireError
from harness.judges.lesson16.common import _states_equal


@judges(
    "16-load-artefact",
    hints=Hints(
        nudge="Three steps: read the file with torch.load(..., weights_only=True), build the model from its "
        "config, then load the weights strictly and switch to eval mode.",
        concept="weights_only=True unpickles only tensors and plain values, so a file cannot run code while it "
        "loads; strict loading makes a name that does not match an error instead of a silently random layer; "
        "a served model runs in eval mode (Dropout off, BatchNorm's running statistics).",
        solution='artefact = torch.load(path, weights_only=True, map_location="cpu")\n'
        'model = build_model(**artefact["config"])\n'
        'model.load_state_dict(artefact["state_dict"])\n'
        "return model.eval()",
        section="1. What you ship: weights plus code",
    ),
    requires={
        "no-map-location": Requirement(
            'loads with map_location="cpu": a file saved on a GPU loads on a machine without that GPU',
            hint="Where does torch.load put a tensor that was saved from cuda:0, and what does the machine you serve "
            "on have? Which argument of torch.load decides?"),
        "not-a-module": Requirement(
            "returns the model (an nn.Module)",
            hint="Print type(load_artefact(path, build_model)): what does load_state_dict return?"),
        "wrong-weights": Requirement(
            "the returned model holds the saved weights and buffers",
            hint="Compare load_artefact(...).state_dict() with the saved one: did the weights reach the model you "
            "return?"),
        "train-mode": Requirement(
            "returns the model in eval mode",
            hint="Print model.training for the model you return: a freshly built module starts in training mode."),
        "unsafe-load": Requirement(
            "loads with weights_only=True: a file holding any other object raises instead of running its code",
            hint="What does torch.load(path, weights_only=False) do with a pickled object whose class says "
            "'call this function'? Do not catch the error that weights_only=True raises."),
        "not-strict": Requirement(
            "loads strictly: an artefact whose names do not match the model raises",
            hint="What does load_state_dict(..., strict=False) do with a key it does not know? Which layer keeps "
            "its random initialisation then?"),
    },
)
def judge_load_artefact(seen: dict, *, case: Case) -> str:
    """The loader returns the model with the saved state in eval mode; it refuses a file that would run code and
    an artefact whose names do not match."""
    want = cloned_state(case_model(case, salt=10))
    where = "the body of load_artefact"
    if not isinstance(seen.get("type"), str):
        raise WireError("malformed observation: no type")
    if "state" not in seen:
        fail("not-a-module", observed=f"load_artefact returned {seen['type']}",
             expected="the model, an nn.Module",
             cause="load_state_dict returns the missing and unexpected keys (_IncompatibleKeys), not the model"
             if seen["type"] == "_IncompatibleKeys" else
             "the artefact or its state_dict was returned instead of the model built from it"
             if seen["type"] in ("dict", "OrderedDict") else "something other than the model is returned",
             where="the return statement of load_artefact")
    if not _states_equal(seen["state"], want):
        fail("wrong-weights", observed="the returned model's state_dict differs from the saved one",
             expected="the saved weights and buffers, exactly",
             cause="the weights were never loaded (no load_state_dict), or loaded into another instance than the "
             "one returned", where=where)
    if seen.get("training") is not False:
        fail("train-mode", observed="the returned model is in training mode",
             expected="model.eval(): Dropout off and BatchNorm using its running statistics, so each request gets "
             "a deterministic answer that does not depend on the rest of the batch",
             cause="a freshly built module starts in training mode and model.eval() is missing",
             where="the end of load_artefact")
    raised = seen.get("gpu_raised")
    if isinstance(raised, str):
        fail("no-map-location", observed=f"the same artefact saved on a GPU this machine lacks raised: {raised}",
             expected="it loads onto the CPU, as on a serving machine without that GPU",
             cause="torch.load without map_location puts each tensor back on the device it was saved from"
             if "deserialize object on" in raised else "the loader fails on a file whose tensors are tagged for a "
             "GPU (see the error it raised)",
             where='the torch.load(...) line of load_artefact (map_location="cpu")')
    if not _states_equal(seen.get("gpu_state"), want):
        fail("wrong-weights", observed="the model loaded from the artefact saved on a GPU holds other weights",
             expected="the saved weights and buffers, on the CPU",
             cause="the tensors were loaded onto another device, or not into the model returned", where=where)
    if seen.get("sprung") is not False:
        fail("unsafe-load", observed="loading a file that holds a pickled object ran the code that object named",
             expected="torch.load(..., weights_only=True), which refuses the object (an UnpicklingError) before "
             "running anything",
             cause="torch.load(..., weights_only=False): unpickling may call any function the file names",
             where="the torch.load(...) line of load_artefact")
    if seen.get("trap") is None:
        fail("unsafe-load", observed="a file holding a pickled object loaded without an error",
             expected="the refusal of weights_only=True reaches the caller as an exception",
             cause="the error is caught (a try/except that falls back to another loader, or returns anyway)",
             where="the try/except around torch.load in load_artefact")
    if seen.get("renamed") is None:
        fail("not-strict", observed="an artefact whose 'head.weight' is named 'classifier.weight' loaded without "
             "an error", expected="load_state_dict raises on a missing or unexpected key (strict loading)",
             cause="load_state_dict(..., strict=False): the unmatched layer keeps its random initialisation, "
             "silently", where="the load_state_dict(...) line of load_artefact")
    return "the saved state, loaded strictly and safely (weights_only=True) onto the CPU, in eval mode"
