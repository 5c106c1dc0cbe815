"""The l2 byte model's misses on the committed Nsight Compute files, with their causes
(perfmodel.fidelity.miss_causes): kernels moving >= 1 MB outside +-15 %, in launch order.

    python examples/measurements/fidelity/misses.py [none|all] [TRACE_DIR] > l2_misses_as_run.csv

TRACE_DIR: a folder with device_l2probe2.sh's alloc_MODEL.json; where one is there, the
model's tensors sit at their measured addresses (fidelity.trace_addresses) instead of the
allocator rule's. Per model, the share and total ratio go to stderr.
"""
import json
import csv
import sys
from collections import Counter
from pathlib import Path

from perfmodel.fidelity import MISS_CAUSES, byte_fidelity, miss_causes, trace_addresses
from perfmodel.measure import load_measurement
from perfmodel.measured import check_measurements

HERE = Path(__file__).parent
MODELS = ("resnet50", "efficientnet_b0", "mobilenet_v2", "convnext_tiny", "vit_b_16")


def main(mode: str = "none", traces: str | None = None) -> None:
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["model", "plan_index", "module", "kernels", "pred_read_mb", "meas_read_mb",
                  "pred_write_mb", "meas_write_mb", "meas_over_pred", "cause"])
    counts = {}
    for name in MODELS:
        m = load_measurement(HERE / f"h200_{name}_eager_ncu_{mode}.json")
        [checked] = check_measurements([m], "h200-sxm")
        trace = Path(traces or ".") / f"alloc_{name}.json"
        addresses = None
        if traces and trace.exists():
            addresses = trace_addresses([kt.kernel for kt in checked.runtime.kernels],
                                        json.loads(trace.read_text())["ops"])
        f = byte_fidelity(checked.runtime, m, "l2", addresses=addresses)
        found = miss_causes(f)
        counts[name] = (f, Counter(cause for _, cause in found), addresses)
        for u, cause in found:
            p = u.predicted
            out.writerow([name, u.index, u.module, u.kernels, f"{p.read_bytes / 1e6:.2f}",
                          f"{u.measured_read / 1e6:.2f}", f"{p.write_bytes / 1e6:.2f}",
                          f"{u.measured_write / 1e6:.2f}", f"{u.ratio:.3f}", cause])
    for name, (f, c, addresses) in counts.items():
        placed = f", {len(addresses)} values at traced addresses" if addresses is not None else ""
        print(f"# {name}: {sum(c.values())} of {len(f.large)} large units miss "
              f"({100 * f.share_large_within:.1f} % within, total {f.total_ratio:.3f}{placed}); "
              + ", ".join(f"{k} {c[k]}" for k in MISS_CAUSES if c[k]), file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:3])
