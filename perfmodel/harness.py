"""The one measurement harness: every benchmark in the project, model
runs (`perfmodel bench`) and kernel runs (`python -m cuda_kernels.bench`) alike, times with
`Timer`, describes the machine with `environment()`, builds its CUDA model with
`build_cuda_model` and checks results with `relative_error`.

Nothing here needs a GPU to import; only calling the timer or the builders does.
"""
from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
from pathlib import Path

import torch

from .dtypes import torch_dtype
from .errors import InputError


def require_cuda() -> None:
    if not torch.cuda.is_available():
        raise InputError("perfmodel bench needs an NVIDIA GPU with CUDA "
                         "(torch.cuda.is_available() is False on this machine)")


def environment() -> dict:
    """GPU, driver, clocks, library versions: what a measurement file records of the machine."""
    props = torch.cuda.get_device_properties(0)
    env = {"gpu": props.name, "sm_count": props.multi_processor_count,
           "memory_gib": round(props.total_memory / 2**30, 1),
           "l2_mib": getattr(props, "L2_cache_size", 0) / 2**20,
           "capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "python": platform.python_version(), "host": platform.node()}
    env.update(_nvidia_smi({"driver": "driver_version", "clock_sm": "clocks.sm", "clock_mem": "clocks.mem",
                            "clock_sm_max": "clocks.max.sm", "clock_mem_max": "clocks.max.mem",
                            "power_limit": "power.limit"}))
    return env


def _smi_gpu() -> list[str]:
    """nvidia-smi's `-i` for the GPU torch calls device 0: nvidia-smi ignores CUDA_VISIBLE_DEVICES, so on a
    machine of several GPUs it would otherwise report the first one, not the one measured."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return ["-i", visible] if visible else []


def _nvidia_smi(fields: dict[str, str], units: bool = True) -> dict:
    """nvidia-smi's values of the measured GPU (`_smi_gpu`) for {our key: its query field}, as strings (with
    their units unless `units` is False); {"nvidia_smi": "unavailable: ..."} where it cannot be asked."""
    fmt = "csv,noheader" if units else "csv,noheader,nounits"
    try:
        out = subprocess.run(["nvidia-smi", *_smi_gpu(), f"--query-gpu={','.join(fields.values())}",
                              f"--format={fmt}"], capture_output=True, text=True, timeout=20).stdout.strip()
        return dict(zip(fields, (f.strip() for f in out.splitlines()[0].split(","))))
    except (OSError, IndexError, subprocess.SubprocessError) as exc:
        return {"nvidia_smi": f"unavailable: {exc}"}


def gpu_state() -> dict:
    """The GPU's clocks, temperature, power draw and active throttle reasons now (nvidia-smi): what a long
    measurement records per step, so that a drift in its timings can be told from a change in the code."""
    return _nvidia_smi({"clock_sm": "clocks.sm", "clock_mem": "clocks.mem", "temperature_c": "temperature.gpu",
                        "power_w": "power.draw", "throttle_reasons": "clocks_throttle_reasons.active"}, units=False)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency_stats(times_ms: list[float]) -> dict:
    """The statistics a measurement file stores: median, p20, p80, min and the count."""
    return {"median": statistics.median(times_ms), "p20": percentile(times_ms, 0.2),
            "p80": percentile(times_ms, 0.8), "min": min(times_ms), "repeats": len(times_ms)}


class Timer:
    """CUDA-event timing of a callable: `warmup` calls, then `repeats` timed calls.

    With `flush_l2`, a buffer of four times the device's L2 (read off the device, never a
    literal) is overwritten before every timed call, so no call finds its inputs left in L2
    by the previous one. Returns `latency_stats` in milliseconds."""

    def __init__(self, warmup: int = 10, repeats: int = 50, *, flush_l2: bool = False):
        if repeats < 1 or warmup < 0:
            raise InputError(f"expected warmup >= 0 and repeats >= 1, got {warmup}, {repeats}")
        self.warmup, self.repeats, self.flush_l2 = warmup, repeats, flush_l2
        self._flush = None
        if flush_l2:
            l2 = torch.cuda.get_device_properties(0).L2_cache_size
            self._flush = torch.empty(4 * max(l2, 1 << 20), dtype=torch.uint8, device="cuda")

    @property
    def flush_bytes(self) -> int:
        return self._flush.numel() if self._flush is not None else 0

    def describe(self) -> dict:
        """How the timing was done, for a measurement file's `method`."""
        return {"timer": "cuda_events", "warmup": self.warmup, "repeats": self.repeats,
                "statistic": "median (p20, p80, min also given)",
                "l2_flush": (f"{self.flush_bytes >> 20} MiB (4x the device's L2) overwritten "
                             "before every timed call") if self.flush_l2 else None}

    def __call__(self, fn) -> dict:
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.repeats)]
        for start, end in zip(starts, ends):
            if self._flush is not None:
                self._flush.fill_(1)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return latency_stats([s.elapsed_time(e) for s, e in zip(starts, ends)])


def cuda_graph_replay(fn):
    """`fn` captured in a CUDA graph: its replay, one launch, or None where capture fails. Timing the replay
    keeps the host's launch cost out of a GPU timing; small kernels and compiled graphs of several kernels are
    otherwise as fast as Python can launch them, and that varies from run to run."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # lazy initialisation and allocations happen outside the capture
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay
    except Exception:  # noqa: BLE001 - what cannot be captured is timed from Python only, and says so
        return None


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| in float64; NaN or inf anywhere gives inf (never a pass)."""
    got, ref = got.double(), ref.double()
    if not torch.isfinite(got).all():
        return float("inf")
    return ((got - ref).norm() / ref.norm()).item()


def randomize_batchnorm(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give every batchnorm realistic, non-trivial inference statistics, in place.

    Freshly built networks have mean 0, variance 1, scale 1 and shift 0: folded into the
    preceding layer they are exact no-ops, so a fused kernel and PyTorch round identically
    and a check between them cannot see a wrong bias. Here each channel gets a shift and a
    mean of about 0.1 and a scale gamma / sqrt(var) between 0.8 and 1.2, so activations keep
    their size through deep networks."""
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            n = m.num_features
            var = torch.empty(n).uniform_(0.5, 1.5, generator=gen)
            with torch.no_grad():
                m.running_var.copy_(var)
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                if m.affine:
                    m.weight.copy_(var.add(m.eps).sqrt() * torch.empty(n).uniform_(0.8, 1.2,
                                                                                  generator=gen))
                    m.bias.copy_(torch.randn(n, generator=gen) * 0.1)
    return model


def build_cuda_model(spec, seed: int = 0) -> torch.nn.Module:
    """The spec's model on the GPU: random weights (no download), batchnorm statistics
    randomized, eval mode, the spec's dtype, channels-last."""
    from .spec import resolve_callable

    base = Path(spec.path).parent if spec.path else None
    fn = resolve_callable(spec.model, base=base, file=spec.path)
    kwargs = dict(spec.kwargs)
    if spec.model.startswith("torchvision.models"):
        kwargs.setdefault("weights", None)
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = fn(**kwargs)
    randomize_batchnorm(model, seed)
    return model.eval().to(dtype=torch_dtype(spec.dtype), memory_format=torch.channels_last)


def example_input(meta, seed: int = 0) -> torch.Tensor:
    """A random CUDA input: channels-last images, small token ids for integer inputs."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if meta.dtype.is_floating_point:
        x = torch.randn(meta.shape, device="cuda", dtype=meta.dtype, generator=gen)
        return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
    return torch.randint(0, 2 if meta.dtype == torch.bool else 100, meta.shape, device="cuda",
                         generator=gen).to(meta.dtype)


@contextlib.contextmanager
def reference_precision():
    """Float32 references without TF32 (restored afterwards)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compiled_runner(model: torch.nn.Module, compile_mode: str = "default", freezing: bool = False):
    """``torch.compile(model)`` in `compile_mode`, with Inductor's freezing on or off (freezing
    constant-folds batchnorm into the weights, as the fused backend folds it)."""
    import torch._inductor.config as inductor_config

    inductor_config.freezing = freezing
    return torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
