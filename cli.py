"""perfmodel command line: a thin click layer over the perfmodel library."""
from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import click

import perfmodel
from perfmodel.errors import PerfmodelError
from perfmodel.l2model import RULES as L2_RULES

_DEBUG = {"on": False}
_PYTHON_SHOWWARNING = warnings.showwarning


def _hardware_option(default: str | None = None, note: str = ""):
    """-H/--hardware: a built-in config name or a YAML path."""
    return click.option("--hardware", "-H", default=default, show_default=default is not None,
                        help="Hardware config name or YAML path (see `perfmodel hardware "
                        f"list`).{note}")


class _DTypeParam(click.ParamType):
    """--dtype becomes a typed DType here, once; the library takes it as it is."""

    name = "dtype"

    def convert(self, value, param, ctx):
        from perfmodel.dtypes import parse_dtype

        try:
            return parse_dtype(value, field=None)
        except PerfmodelError as exc:
            self.fail(str(exc), param, ctx)


def _dtype_option(default: str | None = None, note: str = ""):
    return click.option("--dtype", type=_DTypeParam(), default=default,
                        show_default=default is not None,
                        help=f"float16, bfloat16, float32 ...{note}")


def _output_option(default: str | None = None, what: str = "Plot", default_text: str = ""):
    """-o/--output: the figure file; its suffix picks the format."""
    return click.option("--output", "-o", type=click.Path(dir_okay=False), default=default,
                        show_default=default is not None,
                        help=f"{what} file (.png, .svg or .pdf)."
                        + (f" Default: {default_text}" if default_text else ""))


def _default_output(stem: str, kind: str | None, plan: str | None) -> str:
    """A figure's default name carries the --plan it was drawn under, so that
    `--plan block` does not overwrite the spec's-plan figure: resnet50_block_waterline.png."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", plan).strip("-") if plan else None
    return "_".join(p for p in (stem, slug, kind) if p) + ".png"


def _spec_options(fn):
    """Options shared by every command that analyses a model spec."""
    for opt in reversed([
        _hardware_option(note=" Overrides the spec's `hardware` (a5000-paper, the paper's GPU, "
                         "where the spec names none)."),
        click.option("--batch", "-b", type=int, help="Batch size. Overrides the spec."),
        _dtype_option(note=" Overrides the spec."),
        click.option("--plan", "-p", help="Execution plan: op, eager (op plus the kernels "
                     "eager PyTorch really launches), layer, inductor (layer as torch.compile "
                     "splits it; inductor:freezing with Inductor's freezing on), block, or "
                     "block:PATTERN[,PATTERN] with module class names or path globs."),
        click.option("--strict", is_flag=True, help="Fail if any op has no cost formula."),
        click.option("--l2-carry", is_flag=True, help="Refine the byte model: a read of a "
                     "tensor the previous kernel wrote is free if it fits in L2 (default: the "
                     "paper's compulsory loads)."),
    ]):
        fn = opt(fn)
    return fn


def _analyze(model, hardware, batch, dtype, plan, strict, l2_carry=False, warn=True):
    """Analyse a spec with a progress spinner; ops without a cost formula are never silent."""
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(f"analysing {model} ..."):
        result = perfmodel.analyze_spec(model, strict=strict, l2_carry=l2_carry,
                                        hardware=hardware, batch=batch, dtype=dtype, plan=plan)
    if warn and result.unsupported:
        from perfmodel.report import print_unsupported

        print_unsupported(result, console)
    return result


def _debug_after_command(ctx, param, value):
    if value:
        _DEBUG["on"] = True


class _Group(click.Group):
    """A group whose commands (and subgroups' commands) take --debug too, so that it works
    after the command name as well as before it."""

    group_class = type  # subgroups are _Groups as well

    def add_command(self, cmd, name=None):
        if not isinstance(cmd, click.Group):
            cmd.params.append(click.Option(["--debug"], is_flag=True, expose_value=False,
                                           callback=_debug_after_command,
                                           help="Show full tracebacks on errors."))
        super().add_command(cmd, name)


@click.group(cls=_Group,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(perfmodel.__version__, prog_name="perfmodel")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors (before or after "
              "the command).")
def cli(debug):
    """Explain and predict how fast a neural network runs on a GPU.

    MODEL is a model spec YAML file or the name of a built-in spec (`perfmodel models`).
    perfmodel traces the model on meta tensors (no memory, no weights), counts every
    kernel's MACs and DRAM bytes under an execution plan, and applies the roofline per
    kernel and the waterline to the sequence.

    Hardware: commands that analyse a model use the spec's `hardware` (a5000-paper, the
    paper's GPU, where the spec names none); machine, gap, compare and kernels default to
    h200-sxm, the GPU this project's measurements and block-fusion kernels were made on.
    --hardware overrides either.

    \b
    Examples:
      perfmodel waterline resnet50 -o resnet50.png
      perfmodel waterline convnext_tiny --hardware h200-sxm --plan block
      perfmodel layers efficientnet_b0 --csv layers.csv
      perfmodel hardware show h200-sxm
    """
    _DEBUG["on"] = debug
    warnings.showwarning = _show_warning


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Warnings are one line on stderr, like errors (tracebacks only with --debug)."""
    if _DEBUG["on"]:
        return _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)
    click.echo(f"warning: {message}", err=True)


@cli.command()
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@_output_option(default_text="<first model>_waterline.png; with --plan P, "
                "<first model>_P_waterline.png")
@click.option("--top", type=click.IntRange(min=0), metavar="N",
              help="Also print the table of the N kernels that take longest (0: all kernels).")
@_spec_options
def waterline(models, output, top, hardware, batch, dtype, plan, strict, l2_carry):
    """Summarise MODEL and draw its waterline plot (several MODELs are stacked).

    MODEL is a spec YAML or a built-in name (`perfmodel models`).

    Each kernel is a bar as wide as its minimum latency max(n/R, b/B) and as tall as its
    operational intensity; kernels under the processor's op:byte waterline are
    memory-bound. Prints T_min, C_max, the mediant roofline and Amdahl's f and I_mem.
    """
    from perfmodel.plots import check_output, save
    from perfmodel.plots.waterline import waterline_figure
    from perfmodel.report import print_kernels, print_summary

    from perfmodel.estimate import estimate_or_none

    output = check_output(output or _default_output(Path(models[0]).stem, "waterline", plan))
    results = [_analyze(m, hardware, batch, dtype, plan, strict, l2_carry, warn=False)
               for m in models]
    estimates = [estimate_or_none(r) for r in results]
    for result, est in zip(results, estimates):
        print_summary(result)
        if est is not None:
            click.echo(f"estimate (calibrated) {est.t_est_ms:.4g} ms: T_min / efficiency of "
                       f"each kernel's kind ({est.runtime} kernels), launched by the host")
        if top is not None:
            print_kernels(result, top=top or None)
    path = save(waterline_figure(results, estimates_ms=[e.t_est_ms if e else None
                                                        for e in estimates]), output)
    click.echo(f"wrote {path}")


@cli.command()
@click.argument("model", metavar="MODEL")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the table as CSV.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Write summary and table as JSON.")
@click.option("--top", type=click.IntRange(min=0), default=0, metavar="N",
              help="Only the N kernels that take longest (default 0: all kernels, in order).")
@_spec_options
def layers(model, csv_path, json_path, top, hardware, batch, dtype, plan, strict, l2_carry):
    """Print the per-kernel table of MODEL: module, ops, output shape, MACs, bytes read,
    weights, bytes written, intensity, t_min and bound, and the calibrated estimate where the
    hardware has a calibration."""
    from perfmodel.estimate import estimate_or_none
    from perfmodel.outputs import prepare_output
    from perfmodel.report import print_kernels, write_csv, write_json

    for path, option in ((csv_path, "--csv"), (json_path, "--json")):
        if path:
            prepare_output(path, option)  # before the analysis
    result = _analyze(model, hardware, batch, dtype, plan, strict, l2_carry, warn=False)
    est = estimate_or_none(result)  # where the hardware has a calibration
    print_kernels(result, top=top or None, estimate=est)
    if csv_path:
        write_csv(result, csv_path, est)
        click.echo(f"wrote {csv_path}")
    if json_path:
        write_json(result, json_path, est)
        click.echo(f"wrote {json_path}")


def _range(text: str, option: str, *, integer: bool = False, points: int = 60):
    """'10:2000' -> log-spaced values; '8:1024' with integer=True -> powers of 2 and midpoints.
    `option` is the flag the text came from, for the error."""
    import numpy as np

    try:
        lo, hi = (float(x) for x in text.split(":"))
        assert 0 < lo < hi
    except (ValueError, AssertionError):
        raise click.BadParameter(f"expected LOW:HIGH with 0 < LOW < HIGH, got {text!r}",
                                 param_hint=f"'{option}'")
    if not integer:
        return np.logspace(np.log10(lo), np.log10(hi), points)
    values = set()
    p = 1
    while p <= hi:
        values.update(v for v in (p, 3 * p // 2) if lo <= v <= hi)
        p *= 2
    return sorted(int(v) for v in values)


def _load_hardware(name, option: str = "--hardware"):
    """A hardware config; an unknown name is blamed on the flag the user typed."""
    from perfmodel.errors import InputError

    try:
        return perfmodel.load_hardware(name)
    except InputError as exc:
        if exc.field == "hardware" and exc.file is None:
            raise InputError(exc.reason, field=option) from exc
        raise


def _hardware_list(names, option: str):
    return [_load_hardware(n, option) for n in names]


@cli.command()
@click.argument("model", metavar="MODEL")
@_output_option(default_text="<model>_roofline.png; with --plan P, <model>_P_roofline.png")
@_spec_options
def roofline(model, output, hardware, batch, dtype, plan, strict, l2_carry):
    """Roofline of the hardware with MODEL's kernels as points (area: share of T_min).

    The model's mediant point sits on the roof; its waterline throughput N/T_min at the
    same intensity shows how far the whole-network roofline overestimates."""
    from perfmodel.plots import check_output, save
    from perfmodel.plots.roofline import roofline_figure
    from perfmodel.report import roofline_line

    output = check_output(output or _default_output(Path(model).stem, "roofline", plan))
    result = _analyze(model, hardware, batch, dtype, plan, strict, l2_carry)
    click.echo(roofline_line(result))
    click.echo(f"wrote {save(roofline_figure(result), output)}")


@cli.command()
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@_output_option(default_text="amdahl_roofline.png; with --plan P, amdahl_P_roofline.png")
@click.option("--fuse-to", type=click.FloatRange(min=0, min_open=True), metavar="I",
              help="Predict the speedup if fusion lifted the memory-bound kernels to intensity I "
              "(ops/byte; at least each model's I_mem, since fusion raises intensity).")
@_spec_options
def amdahl(models, output, fuse_to, hardware, batch, dtype, plan, strict, l2_carry):
    """Amdahl's roofline: the share f of ops in memory-bound kernels and their intensity
    I_mem bound C_max = 1/((1-f) + f rho/I_mem)."""
    from perfmodel.plots import check_output, save
    from perfmodel.plots.roofline import amdahl_figure
    from perfmodel.report import amdahl_lines

    output = check_output(output or _default_output("amdahl", "roofline", plan))
    results = [_analyze(m, hardware, batch, dtype, plan, strict, l2_carry) for m in models]
    click.echo("\n".join(amdahl_lines(results, fuse_to)))
    click.echo(f"wrote {save(amdahl_figure(results, fuse_to), output)}")


@cli.command()
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@click.option("--opbyte", default="10:2000", show_default=True, metavar="LOW:HIGH",
              help="Range of processor op:byte ratios.")
@click.option("--mark", multiple=True, default=("a5000-paper", "a100-sxm4-80gb", "h200-sxm", "l4"),
              show_default=True, help="Hardware whose op:byte to mark (repeatable).")
@_output_option(default_text="sweep.png; with --plan P, sweep_P.png")
@_spec_options
def sweep(models, opbyte, mark, output, hardware, batch, dtype, plan, strict, l2_carry):
    """C_max against processor op:byte for the waterline and the mediant roofline
    (paper Figure 4): where the whole-network roofline misleads."""
    from perfmodel.analysis import sweep as sweep_data
    from perfmodel.plots import check_output, save
    from perfmodel.plots.sweep import sweep_figure
    from perfmodel.report import sweep_line

    output = check_output(output or _default_output("sweep", None, plan))
    op_bytes = _range(opbyte, "--opbyte")
    marks = _hardware_list(mark, "--mark")
    results = [_analyze(m, hardware, batch, dtype, plan, strict, l2_carry) for m in models]
    curves = [sweep_data(r.kernels, op_bytes) for r in results]  # under the chosen byte model
    for r in results:
        click.echo(sweep_line(r, marks))
    click.echo(f"wrote {save(sweep_figure(results, op_bytes, curves, marks), output)}")


@cli.command()
@click.option("--channels", default="8:1024", show_default=True, metavar="LOW:HIGH",
              help="Range of input channels.")
@click.option("--batch", "-b", type=click.IntRange(min=1), default=128, show_default=True)
@click.option("--resolution", "-r", type=click.IntRange(min=1), default=56, show_default=True,
              help="Height and width of the feature map.")
@_dtype_option("float16")
@click.option("--mark", multiple=True, default=("a5000-paper", "h200-sxm"), show_default=True,
              help="Hardware whose op:byte to draw (repeatable).")
@_output_option("intensity.png")
def intensity(channels, batch, resolution, dtype, mark, output):
    """Operational intensity of conv layer types against channels (paper Figure 2e):
    3x3, pointwise K/C=4, grouped T=32 and T=8, depthwise, and a block-fused FFN."""
    from perfmodel.layer_intensity import intensity_curves
    from perfmodel.plots import check_output, save
    from perfmodel.plots.sweep import intensity_figure
    from perfmodel.report import intensity_line

    output = check_output(output)
    marks = _hardware_list(mark, "--mark")
    cs = _range(channels, "--channels", integer=True)
    curves = intensity_curves(cs, batch=batch, resolution=resolution, dtype=dtype)
    click.echo("\n".join(intensity_line(c) for c in curves))
    fig = intensity_figure(curves, marks, batch=batch, resolution=resolution, dtype=dtype)
    click.echo(f"wrote {save(fig, output)}")


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False),
                metavar="MEASUREMENT.json...")
@click.option("--hardware", "-H", default="h200-sxm", show_default=True,
              help="Hardware whose peak gives ideal latency and T_min.")
@click.option("--plan", "-p", help="Plan for T_min (default: each spec's).")
@click.option("--panel", type=click.Choice(("a", "b", "c", "d", "e", "all")), default="all",
              show_default=True, help="One panel: a-d, paper Figure 1 (top-1 accuracy on the y "
              "axis); e, latency vs GMACs (any model, untrained ones too). all: a-d, plus e when "
              "a model has no accuracy.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default="gap.png",
              show_default=True, help="Plot file (.png, .svg or .pdf).")
def gap(files, hardware, plan, panel, output):
    """Efficiency-gap plot (paper Figure 1) from measurement files.

    Ideal latency N/R, the waterline T_min and the measured latency of each model:
    C = C_max x C_impl, the memory system's share of the gap and the software's."""
    from perfmodel.gap import gap_point, gap_title
    from perfmodel.measure import load_measurement
    from perfmodel.measured import check_measurements
    from perfmodel.plots import check_output, save
    from perfmodel.plots.gap import gap_figure
    from perfmodel.report import gap_lines

    output = check_output(output)
    hw = _load_hardware(hardware)
    measurements = [load_measurement(f) for f in files]
    from perfmodel.estimate import estimate_or_none

    checked = check_measurements(measurements, hw, plan, spec_plan=True)
    estimates = [estimate_or_none(c.runtime, graphs=_graphs(c.measurement)) if c.runtime else None
                 for c in checked]
    points = [gap_point(c.measurement, c.spec, c.result, c.runtime,
                        estimate_ms=e.t_est_ms if e else None) for c, e in zip(checked, estimates)]
    click.echo("\n".join(gap_lines(points)))
    fig = gap_figure(points, peak_ops=hw.peak_ops(measurements[0].dtype),
                     batch=measurements[0].batch, title=gap_title(hw, measurements),
                     panels=None if panel == "all" else (panel,))
    click.echo(f"wrote {save(fig, output)}")


@cli.command()
@click.argument("model", metavar="MODEL")
@click.option("--backend", type=click.Choice(("eager", "inductor", "cuda_kernels")), default="eager",
              show_default=True, help="PyTorch eager; torch.compile (Inductor); or cuda_kernels: "
              "batchnorm folded and the zoo's ConvFirst and FFN blocks and torchvision's MBConv "
              "(EfficientNet) on the block-fusion "
              "kernels, the rest eager (source checkout and nvcc needed). Each fused block is "
              "checked first against its PyTorch block in float64, within 2x PyTorch's own "
              "error; blocks without a kernel for their shape fall back with a warning.")
@click.option("--compile-mode", type=click.Choice(("default", "reduce-overhead", "max-autotune",
              "max-autotune-no-cudagraphs")), default="default", show_default=True,
              help="torch.compile mode (--backend inductor).")
@click.option("--freezing", is_flag=True, help="Inductor freezing: weights become constants and "
              "batchnorm is folded into them, as the fused backend folds it (--backend inductor, "
              "or cuda_kernels with --compile-rest).")
@click.option("--compile-rest", is_flag=True, help="--backend cuda_kernels: torch.compile the "
              "parts that are not fused blocks (each fused block stays one opaque operator).")
@click.option("--per-kernel", is_flag=True,
              help="Also record every GPU kernel of three profiled passes, each under the module "
              "that launched it (kernels outside every module: an unattributed row).")
@click.option("--trace", type=click.Path(dir_okay=False), metavar="FILE.json.gz",
              help="With --per-kernel: keep the profiler events the rows come from.")
@click.option("--cuda-graphs", is_flag=True, help="Time CUDA-graph replays of the forward.")
@click.option("--ncu", is_flag=True, help="Also record each kernel's DRAM bytes with Nsight "
              "Compute, one more forward pass in a child process (eager, or inductor compiled "
              "in the default mode; clocks left alone).")
@click.option("--ncu-cache-control", type=click.Choice(("none", "all")), default="none",
              show_default=True, help="--ncu: 'none' leaves L2 as a real run does; 'all' flushes "
              "it before each kernel (reads then show the compulsory traffic).")
@click.option("--warmup", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--repeats", type=click.IntRange(min=20), default=50, show_default=True)
@click.option("--batch", "-b", type=click.IntRange(min=1), help="Batch size. Overrides the spec.")
@click.option("--dtype", help="Overrides the spec.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), required=True,
              help="Measurement file to write (.json).")
def bench(model, backend, compile_mode, freezing, compile_rest, per_kernel, trace, cuda_graphs,
          ncu, ncu_cache_control, warmup, repeats, batch, dtype, output):
    """Measure MODEL on this machine's GPU and write a measurement file.

    Random weights with realistic batchnorm statistics, channels-last, cudnn.benchmark on,
    CUDA-event timing: median, p20 and p80 of --repeats forward passes after --warmup.
    Needs CUDA; compare and gap read the file anywhere."""
    from perfmodel.bench import bench as run_bench

    spec = perfmodel.load_spec(model).with_overrides(batch=batch, dtype=dtype)
    path = run_bench(spec, backend=backend, compile_mode=compile_mode, freezing=freezing,
                     compile_rest=compile_rest,
                     warmup=warmup, repeats=repeats, cuda_graphs=cuda_graphs, kernels=per_kernel,
                     trace=trace, ncu=ncu, ncu_cache_control=ncu_cache_control, output=output)
    from perfmodel.measure import load_measurement

    m = load_measurement(path)
    click.echo(f"{m.model} {backend} batch {m.batch} {m.dtype}: median {m.latency_ms:.3f} ms "
               f"(p20 {m.p20_ms:.3f}, p80 {m.p80_ms:.3f}); wrote {path}")


@cli.command("compare")
@click.argument("model", metavar="MODEL")
@click.argument("measured", type=click.Path(dir_okay=False), metavar="MEASURED.json")
@click.option("--hardware", "-H", default="h200-sxm", show_default=True,
              help="Hardware the prediction is made for.")
@click.option("--plan", "-p", help="Plan of the prediction (default: the plan that models "
              "the file's backend: op for eager, layer for inductor, block for cuda_kernels).")
@click.option("--l2-carry", is_flag=True, help="Predict with the L2-carry byte model "
              "(reads of a tensor the previous kernel wrote, if it fits in L2, are free).")
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Plot file (.png, .svg or .pdf). Default: <measurement>_compare.png")
def compare_cmd(model, measured, hardware, plan, l2_carry, output):
    """Predicted against measured, per module and in total: t_min, measured time, ratio
    and bound; T_min against the measured latency; C = C_max x C_impl.

    The file must measure MODEL, and its median may not beat T_min of the plan that models
    its backend on the config of its GPU (exit 2 naming the file); a file from another GPU
    than --hardware is a warning."""
    from perfmodel.compare import compare
    from perfmodel.measure import load_measurement
    from perfmodel.measured import check_measurements
    from perfmodel.plots import check_output, save
    from perfmodel.plots.compare import compare_figure
    from perfmodel.report import compare_lines

    output = check_output(output or f"{Path(measured).stem}_compare.png")
    m = load_measurement(measured)
    [checked] = check_measurements([m], _load_hardware(hardware), plan, model=model,
                                   l2_carry=l2_carry)
    if checked.result.unsupported:
        from rich.console import Console

        from perfmodel.report import print_unsupported

        print_unsupported(checked.result, Console(stderr=True))
    cmp = compare(checked.result, m)
    click.echo("\n".join(compare_lines(cmp)))
    click.echo(f"wrote {save(compare_figure(cmp), output)}")


@cli.command()
@click.argument("program", metavar="PROGRAM", required=False)
@click.option("--set", "params", multiple=True, metavar="NAME=INT",
              help="Program parameter, e.g. --set c=128 --set h=28 (repeatable).")
@_hardware_option("h200-sxm", note=" Default: the GPU the block-fusion kernels target.")
@_dtype_option("float16")
@_output_option(what="Diagram", default_text="<program>.svg")
def machine(program, params, hardware, dtype, output):
    """Analyse a tensor-machine PROGRAM and draw its diagram (paper Figures 5 and 7).

    Prints each kernel's ops, DRAM reads and writes, on-chip working set and roofline
    time; without PROGRAM, lists the programs and their parameters."""
    from perfmodel.machine_programs import build_program, derived_note, program_lines
    from perfmodel.plots import check_output, save
    from perfmodel.plots.machine import machine_figure

    if program is None:
        click.echo("\n".join(program_lines() + ["", f"Defaults: {derived_note()}."]))
        return
    prog = build_program(program, params)
    output = check_output(output or f"{program}.svg")
    report = prog.analyze(_load_hardware(hardware), dtype)
    click.echo("\n".join(report.lines()))
    click.echo(f"wrote {save(machine_figure(report), output)}")


@cli.command("kernels")
@click.argument("results", type=click.Path(dir_okay=False), metavar="BENCH.json")
@click.option("--network", "networks", multiple=True, type=click.Path(dir_okay=False),
              metavar="MEASUREMENT.json", help="Also a whole network measured end to end "
              "(perfmodel bench; repeatable): a row per model with each backend's fastest "
              "setting beside the network's block- and layer-plan T_min.")
@click.option("--hardware", "-H", default="h200-sxm", show_default=True,
              help="Hardware for the predicted bounds.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default="kernels.png",
              show_default=True, help="Plot file (.png, .svg or .pdf).")
def kernels_cmd(results, networks, hardware, output):
    """Block-fusion kernel benchmarks beside the block-plan and layer-plan T_min of the same
    block at the same shape: ConvFirst / FFN files of cuda_kernels/bench.py (and its wgmma and
    per-network benches), or an EfficientNet's MBConv blocks from cuda_kernels/mbconv_bench.py
    (CUDA-graph medians, torch.compile's better mode), e.g.
    examples/measurements/mbconv/s37/call4/blocks.json."""
    from perfmodel.api import reanalyze
    from perfmodel.kernel_results import load_kernel_results, network_cases
    from perfmodel.measure import load_measurement
    from perfmodel.measured import check_measurements
    from perfmodel.plots import check_output, save
    from perfmodel.plots.kernels import kernels_figure
    from perfmodel.report import kernel_case_lines

    output = check_output(output)
    hw = _load_hardware(hardware)
    skipped: list[str] = []
    cases = load_kernel_results(results, hw, skipped)
    if skipped:
        click.echo(f"not drawn ({len(skipped)} units that are not stride-1 blocks: stems, stride-2 blocks, heads): "
                   + ", ".join(skipped))
    if networks:
        checked = check_measurements([load_measurement(f) for f in networks], hw, "block")
        cases += network_cases([(c.measurement, c.result, reanalyze(c.result, plan="layer"))
                                for c in checked])
    click.echo("\n".join(kernel_case_lines(cases)))
    click.echo(f"wrote {save(kernels_figure(cases, hw.name), output)}")


@cli.command("fidelity")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False),
                metavar="MEASUREMENT.json...")
@_hardware_option("h200-sxm")
@click.option("--plan", "-p", help="Plan of the prediction (default: the plan that models what "
              "each file's backend launches: eager for eager, inductor for inductor).")
@click.option("--byte-model", type=click.Choice(("compulsory", "l2")), default="compulsory",
              show_default=True, help="compulsory: eq. 23, every input, weight and output "
              "once. l2: the L2 cache between kernels (the hardware's l2_resident_mib, "
              "l2_dirty_mib and l2_ways), flushed before each kernel where the file was "
              "measured with --cache-control all.")
@click.option("--tolerance", type=click.FloatRange(min=0, min_open=True), default=0.15,
              show_default=True, help="A kernel is right when measured/predicted bytes are "
              "within 1 +- this.")
@click.option("--l2-off", "l2_off", multiple=True,
              type=click.Choice(L2_RULES),
              help="Switch one of the l2 byte model's rules off (repeatable; perfmodel.l2model "
              "describes them).")
def fidelity_cmd(files, hardware, plan, byte_model, tolerance, l2_off):
    """How well the byte model predicts the DRAM bytes Nsight Compute measured.

    Per file: kernels paired with the plan's kernels (module by module, in launch order; a
    module whose kernel count differs is one unit), the share within --tolerance (all, and
    those moving >= 1 MB), the ratio of the totals and the kernel counts. A compiled
    model's kernels carry no module, so its file is compared in total. FILES need Nsight
    Compute rows (`perfmodel bench --ncu`)."""
    from perfmodel.errors import InputError
    from perfmodel.fidelity import byte_fidelity
    from perfmodel.l2model import Rules
    from perfmodel.measure import load_measurement
    from perfmodel.measured import check_measurements
    from perfmodel.report import fidelity_lines

    measurements = [load_measurement(f) for f in files]
    for m in measurements:
        if not m.ncu:
            raise InputError("no Nsight Compute rows (measure with `perfmodel bench --ncu`)",
                             file=m.where, field="results.ncu")
    checked = check_measurements(measurements, _load_hardware(hardware), plan)
    rules = Rules.without(l2_off)
    rows = [byte_fidelity(c.result if plan or c.runtime is None else c.runtime, c.measurement,
                          byte_model, tolerance, rules=rules) for c in checked]
    click.echo("\n".join(fidelity_lines(rows)))
    _estimate_column(checked, plan)


def _graphs(measurement) -> bool:
    """Whether the file timed CUDA-graph replays (the estimate then has no launch costs)."""
    return bool(measurement.method.get("cuda_graphs"))


def _estimate_column(checked, plan) -> None:
    """Fidelity's latency part: the calibrated estimate against each file's measured median,
    where the hardware has a calibration (perfmodel.estimate)."""
    from perfmodel.estimate import estimate_or_none
    from perfmodel.estimate_report import estimate_lines, estimate_row

    results = [c.result if plan or c.runtime is None else c.runtime for c in checked]
    estimates = [estimate_or_none(r, graphs=_graphs(c.measurement))
                 for r, c in zip(results, checked)]
    if estimates and all(estimates):
        rows = [estimate_row(c.measurement, e) for c, e in zip(checked, estimates)]
        click.echo("\n" + "\n".join(estimate_lines(rows)))


@cli.command("estimate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False),
                metavar="MEASUREMENT.json...")
@_hardware_option("h200-sxm", note=" It must name a calibration file.")
@click.option("--tolerance", type=click.FloatRange(min=0, min_open=True), default=0.2,
              show_default=True, help="An estimate is right within measured x (1 +- this).")
@click.option("--markdown", type=click.Path(dir_okay=False), metavar="FILE.md",
              help="Also write the table as markdown.")
def estimate_cmd(files, hardware, tolerance, markdown):
    """Calibrated latency estimate against the measured median, per measurement file.

    Each file is estimated under the plan that models its runtime (eager, inductor), from
    the microbenchmarks in the hardware's calibration file (`python -m perfmodel.calibrate`):
    every kernel's T_min over the efficiency its kind attained there, launched by the host."""
    from perfmodel.errors import InputError
    from perfmodel.estimate import calibration_of, estimate
    from perfmodel.estimate_report import estimate_lines, estimate_markdown, estimate_row
    from perfmodel.measure import load_measurement
    from perfmodel.measured import check_measurements
    from perfmodel.outputs import prepare_output, write_text

    if markdown:
        prepare_output(markdown, "--markdown")
    hw = _load_hardware(hardware)
    calibration = calibration_of(hw)
    checked = check_measurements([load_measurement(f) for f in files], hw)
    skipped = [c.measurement for c in checked if c.runtime is None]
    if skipped:
        click.echo(f"skipped (no runtime model for their backend): "
                   f"{', '.join(f'{m.where} ({m.backend})' for m in skipped)}", err=True)
    rows = [estimate_row(c.measurement, estimate(c.runtime, calibration,
                                                 graphs=_graphs(c.measurement)))
            for c in checked if c.runtime is not None]
    if not rows:
        raise InputError("no file of a backend the estimate models (eager, inductor)")
    click.echo("\n".join(estimate_lines(rows, tolerance)))
    if markdown:
        write_text(markdown, estimate_markdown(rows, tolerance), "--markdown")
        click.echo(f"wrote {markdown}")


@cli.command("calibrate")
@click.option("--output", "-o", type=click.Path(dir_okay=False), required=True,
              help="Calibration file to write (.yaml); name it in the hardware config's "
              "`calibration` field.")
@click.option("--hardware", "-H", default="",
              help="The hardware config it calibrates (recorded in the file).")
@click.option("--sections", metavar="A,B", help="Only these sections (pointwise, broadcast, norms, "
              "matmul, conv, grouped, compiled).")
@click.option("--update", is_flag=True, help="Keep the tables of the existing file that "
              "--sections does not measure.")
@click.option("--quick", is_flag=True, help="A tiny grid: checks the plumbing (on a CPU too).")
def calibrate_cmd(output, hardware, sections, update, quick):
    """Time the kernels the plans are made of on this machine's GPU, over a grid of shapes,
    for the calibrated estimate (about 2 minutes on an H200); `python -m perfmodel.calibrate`
    does the same."""
    from perfmodel.calibrate import calibrate

    argv = ["-o", output] + (["--hardware", hardware] if hardware else []) \
        + (["--sections", sections] if sections else []) + (["--update"] if update else []) \
        + (["--quick"] if quick else [])
    calibrate(output, hardware=hardware, sections=sections, quick=quick, update=update,
              command="perfmodel calibrate " + " ".join(argv), log=click.echo)
    click.echo(f"wrote {output}")


@cli.command("l2-probe")
@click.option("--output", "-o", type=click.Path(dir_okay=False), required=True,
              help="Probe file to write (.json; the raw Nsight Compute CSV goes beside it).")
@click.option("--cache-control", type=click.Choice(("all", "none")), default="all",
              show_default=True, help="all: L2 flushed before each kernel, which measures the "
              "residency; none: as a real run, to check the l2 byte model against.")
def l2_probe_cmd(output, cache_control):
    """Measure how much of its traffic a kernel leaves in L2 (needs a GPU and Nsight Compute).

    Element-wise copies of 1 to 512 MiB, each followed by a kernel that reads the copy and one
    that reads 1 GiB of other data, under `ncu`. With --cache-control all it prints the
    `l2_resident_mib` to put in the hardware config for `perfmodel fidelity --byte-model l2`."""
    import json

    from perfmodel.l2model import resident_mib
    from perfmodel.ncu import write_probe

    path = write_probe(output, cache_control)
    click.echo(f"wrote {path}")
    if cache_control == "all":
        rows = json.loads(path.read_text())["rows"]
        click.echo(f"l2_resident_mib: {resident_mib(rows):.1f}   # median over copies of >= 64 MiB")


@cli.command("models")
def models_cmd():
    """List the built-in model specs."""
    for name in perfmodel.list_models():
        spec = perfmodel.load_spec(name)
        click.echo(f"{name:24s} {spec.name:24s} {spec.model}  input {list(spec.inputs[0])}")


@cli.group()
def hardware():
    """List and describe hardware configs."""


@hardware.command("list")
def hardware_list():
    """List built-in hardware: peak, bandwidth and op:byte for float16."""
    from perfmodel.report import hardware_table

    click.echo("\n".join(hardware_table([perfmodel.load_hardware(n)
                                          for n in perfmodel.list_hardware()])))


@hardware.command("show")
@click.argument("name")
def hardware_show(name):
    """Describe one hardware config (built-in NAME or a YAML path)."""
    from perfmodel.report import hardware_lines

    click.echo("\n".join(hardware_lines(perfmodel.load_hardware(name))))


def main(argv=None):
    """Console entry point: errors become one line and an exit code (2 bad input, 1 failure)."""
    try:
        cli.main(args=argv, prog_name="perfmodel", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except PerfmodelError as exc:
        if _DEBUG["on"]:
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(0)


if __name__ == "__main__":
    main()
