"""The l2 byte model's misses on the committed Nsight Compute files, with their causes
(perfmodel.fidelity.miss_causes): kernels moving >= 1 MB outside +-15 %, in launch order.

    python examples/measurements/fidelity/misses.py [none|all] > l2_misses_as_run.csv
"""
import csv
import sys
from collections import Counter
from pathlib import Path

from perfmodel.fidelity import MISS_CAUSES, byte_fidelity, miss_causes
from perfmodel.measure import load_measurement
from perfmodel.measured import check_measurements

HERE = Path(__file__).parent
MODELS = ("resnet50", "efficientnet_b0", "mobilenet_v2", "convnext_tiny", "vit_b_16")


def main(mode: str = "none") -> None:
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["model", "plan_index", "module", "kernels", "pred_read_mb", "meas_read_mb",
                  "pred_write_mb", "meas_write_mb", "meas_over_pred", "cause"])
    counts = {}
    for name in MODELS:
        m = load_measurement(HERE / f"h200_{name}_eager_ncu_{mode}.json")
        [checked] = check_measurements([m], "h200-sxm")
        f = byte_fidelity(checked.runtime, m, "l2")
        found = miss_causes(f)
        counts[name] = (len(f.large), Counter(cause for _, cause in found))
        for u, cause in found:
            p = u.predicted
            out.writerow([name, u.index, u.module, u.kernels, f"{p.read_bytes / 1e6:.2f}",
                          f"{u.measured_read / 1e6:.2f}", f"{p.write_bytes / 1e6:.2f}",
                          f"{u.measured_write / 1e6:.2f}", f"{u.ratio:.3f}", cause])
    for name, (large, c) in counts.items():
        print(f"# {name}: {sum(c.values())} of {large} large units miss; "
              + ", ".join(f"{k} {c[k]}" for k in MISS_CAUSES if c[k]), file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:2])
