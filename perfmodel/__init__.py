"""perfmodel: waterline, roofline and efficiency-gap analysis of neural networks on GPUs.

    >>> import perfmodel, torchvision
    >>> r = perfmodel.analyze(torchvision.models.resnet50(), (3, 224, 224), hardware="h200-sxm")
    >>> r.summary()["c_max"]
    >>> perfmodel.write_csv(r, "kernels.csv")
"""
from .api import Result, analyze, analyze_spec
from .errors import AnalysisError, InputError, PerfmodelError, TraceError
from .hardware import Hardware, list_hardware, load_hardware
from .plan import PlanSpec
from .report import kernel_table, write_csv, write_json
from .spec import ModelSpec, list_models, load_spec

__all__ = ["analyze", "analyze_spec", "Result", "Hardware", "load_hardware", "list_hardware",
           "ModelSpec", "load_spec", "list_models", "PlanSpec", "kernel_table", "write_csv",
           "write_json", "PerfmodelError", "InputError", "TraceError", "AnalysisError"]
__version__ = "0.1.0"
