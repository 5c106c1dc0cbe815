"""How fast is perfmodel's analysis? The numbers quoted in the README's performance section.

1. ResNet-101, batch 128, float16: perfmodel's analyze (trace, costs, layer plan, waterline)
   against torch.utils.flop_counter.FlopCounterMode counting the same model's forward, like
   for like: one process, the same meta-device model in eval mode, no_grad, the two timed in
   alternation, median of 15 each after a warm-up. FlopCounterMode counts FLOPs only;
   perfmodel also counts bytes, builds the kernels and applies the waterline.
2. Every torchvision classification model analysed (layer plan, batch 128, native crop).
3. EfficientNet-B7 at batch 128 and 600 px: peak resident memory of the analysis.

Run: python examples/benchmark_analysis.py
"""
from __future__ import annotations

import os
import resource
import statistics
import time
import warnings

import torch
import torchvision
from torch.utils.flop_counter import FlopCounterMode

import perfmodel
from perfmodel.build import meta_init

warnings.simplefilter("ignore")


def build(name, **kwargs):
    with meta_init():
        return torchvision.models.get_model(name, **kwargs)


def alternating_medians(fns, repeats=15):
    """Median wall time of each function, the functions run in turn (so that load from
    anything else on the machine falls on all of them alike), after one warm-up each."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


def versus_flop_counter():
    model = build("resnet101").half().eval()  # the state perfmodel traces a model in
    x = torch.empty(128, 3, 224, 224, device="meta", dtype=torch.float16)

    def flop_counter():
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            model(x)
        return fc.get_total_flops()

    def ours():
        return perfmodel.analyze(model, (3, 224, 224), batch=128, hardware="a5000-paper")

    t_fc, t_ours = alternating_medians([flop_counter, ours])
    assert flop_counter() == 2 * ours().macs, "the two counters disagree"
    print(f"ResNet-101 b128, eval, meta: FlopCounterMode {t_fc * 1e3:.0f} ms, perfmodel "
          f"analyze {t_ours * 1e3:.0f} ms, ratio {t_ours / t_fc:.2f}x (medians of 15, "
          f"alternating, {os.cpu_count()} cores)")


def whole_zoo():
    names = torchvision.models.list_models(module=torchvision.models)
    t0 = time.perf_counter()
    for name in names:
        weights = torchvision.models.get_model_weights(name)
        crop = next(iter(weights)).transforms().crop_size[0]
        kwargs = {"image_size": crop} if name.startswith("vit_") else {}
        perfmodel.analyze(build(name, **kwargs), (3, crop, crop), batch=128, name=name)
    elapsed = time.perf_counter() - t0
    print(f"{len(names)} torchvision models (build + analyse, batch 128, native crop): "
          f"{elapsed:.1f} s on {os.cpu_count()} cores")


def big_model_memory():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    r = perfmodel.analyze(build("efficientnet_b7"), (3, 600, 600), batch=128)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"EfficientNet-B7 b128 600px: {len(r.kernels)} kernels, {r.totals.dram_bytes / 1e9:.1f} "
          f"GB of DRAM traffic modelled; process peak RSS {peak:.2f} GiB "
          f"(of which {before:.2f} GiB before the analysis: Python, torch, torchvision)")


if __name__ == "__main__":
    big_model_memory()  # first, so that the peak is this analysis's
    versus_flop_counter()
    whole_zoo()
