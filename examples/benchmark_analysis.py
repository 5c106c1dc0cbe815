"""How fast is perfmodel's analysis? The numbers quoted in the README's performance section.

1. ResNet-101, batch 128: perfmodel's trace + costs + plan + waterline against
   torch.utils.flop_counter.FlopCounterMode on the same meta-device model, in one run.
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


def median_time(fn, repeats=7):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def versus_flop_counter():
    model = build("resnet101").half()
    x = torch.empty(128, 3, 224, 224, device="meta", dtype=torch.float16)

    def flop_counter():
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            model(x)
        return fc.get_total_flops()

    def ours():
        return perfmodel.analyze(model, (3, 224, 224), batch=128, hardware="a5000-paper")

    t_fc, t_ours = median_time(flop_counter), median_time(ours)
    assert flop_counter() == 2 * ours().macs, "the two counters disagree"
    print(f"ResNet-101 b128: FlopCounterMode {t_fc * 1e3:.0f} ms, perfmodel analyze "
          f"{t_ours * 1e3:.0f} ms, ratio {t_ours / t_fc:.2f}x (median of 7)")


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
