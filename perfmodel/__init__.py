"""perfmodel: waterline, roofline and efficiency-gap analysis of neural networks on GPUs.

    >>> import perfmodel, torchvision
    >>> r = perfmodel.analyze(torchvision.models.resnet50(), (3, 224, 224), hardware="h200-sxm")
    >>> r.summary()["c_max"]
    >>> perfmodel.write_csv(r, "kernels.csv")
"""
from importlib import import_module

# Imported when first used, so that `import perfmodel` (and the command line's `hardware`
# commands) does not import torch; analysing a model does.
_EXPORTS = {
    "analyze": "api", "analyze_spec": "api", "Result": "api",
    "AnalysisError": "errors", "InputError": "errors", "PerfmodelError": "errors",
    "TraceError": "errors",
    "Hardware": "hardware", "list_hardware": "hardware", "load_hardware": "hardware",
    "PlanSpec": "plan_spec",
    "kernel_table": "report", "write_csv": "report", "write_json": "report",
    "ModelSpec": "spec", "list_models": "spec", "load_spec": "spec",
}
__all__ = list(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'perfmodel' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
