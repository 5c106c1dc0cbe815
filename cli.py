"""perfmodel command line: a thin click layer over the perfmodel library."""
from __future__ import annotations

import sys
from pathlib import Path

import click

import perfmodel
from perfmodel.errors import PerfmodelError

_DEBUG = {"on": False}


def _spec_options(fn):
    """Options shared by every command that analyses a model spec."""
    for opt in reversed([
        click.option("--hardware", "-H", help="Hardware config name or YAML path "
                     "(see `perfmodel hardware list`). Overrides the spec."),
        click.option("--batch", "-b", type=int, help="Batch size. Overrides the spec."),
        click.option("--dtype", help="float16, bfloat16, float32 ... Overrides the spec."),
        click.option("--plan", "-p", help="Execution plan: op, layer, block, or "
                     "block:PATTERN[,PATTERN] with module class names or path globs."),
        click.option("--strict", is_flag=True, help="Fail if any op has no cost formula."),
    ]):
        fn = opt(fn)
    return fn


def _analyze(model, hardware, batch, dtype, plan, strict):
    from rich.console import Console

    with Console(stderr=True).status(f"analysing {model} ..."):
        return perfmodel.analyze_spec(model, strict=strict, hardware=hardware, batch=batch,
                                      dtype=dtype, plan=plan)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(perfmodel.__version__, prog_name="perfmodel")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
def cli(debug):
    """Explain and predict how fast a neural network runs on a GPU.

    MODEL is a model spec YAML file or the name of a built-in spec (`perfmodel models`).
    perfmodel traces the model on meta tensors (no memory, no weights), counts every
    kernel's MACs and DRAM bytes under an execution plan, and applies the roofline per
    kernel and the waterline to the sequence.

    \b
    Examples:
      perfmodel waterline resnet50 -o resnet50.png
      perfmodel waterline convnext_tiny --hardware h200-sxm --plan block
      perfmodel layers efficientnet_b0 --csv layers.csv
      perfmodel hardware show h200-sxm
    """
    _DEBUG["on"] = debug


@cli.command()
@click.argument("models", nargs=-1, required=True, metavar="MODEL...")
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Plot file (.png, .svg or .pdf). Default: <first model>_waterline.png")
@click.option("--top", type=int, default=0, help="Also print the N kernels that take longest.")
@_spec_options
def waterline(models, output, top, hardware, batch, dtype, plan, strict):
    """Summarise MODEL and draw its waterline plot (several MODELs are stacked).

    Each kernel is a bar as wide as its minimum latency max(n/R, b/B) and as tall as its
    operational intensity; kernels under the processor's op:byte waterline are
    memory-bound. Prints T_min, C_max, the mediant roofline and Amdahl's f and I_mem.
    """
    from perfmodel.plots import check_output, save
    from perfmodel.plots.waterline import waterline_figure
    from perfmodel.report import print_kernels, print_summary

    output = check_output(output or f"{Path(models[0]).stem}_waterline.png")
    results = [_analyze(m, hardware, batch, dtype, plan, strict) for m in models]
    for result in results:
        print_summary(result)
        if top:
            print_kernels(result, top=top)
    path = save(waterline_figure(results), output)
    click.echo(f"wrote {path}")


@cli.command()
@click.argument("model", metavar="MODEL")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the table as CSV.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Write summary and table as JSON.")
@click.option("--top", type=int, default=0, help="Only the N kernels that take longest.")
@_spec_options
def layers(model, csv_path, json_path, top, hardware, batch, dtype, plan, strict):
    """Print the per-kernel table of MODEL: module, ops, output shape, MACs, bytes read,
    weights, bytes written, intensity, t_min and bound."""
    from perfmodel.report import print_kernels

    result = _analyze(model, hardware, batch, dtype, plan, strict)
    print_kernels(result, top=top or None)
    if csv_path:
        result.to_csv(csv_path)
        click.echo(f"wrote {csv_path}")
    if json_path:
        result.to_json(json_path)
        click.echo(f"wrote {json_path}")


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
    click.echo(f"{'name':20s} {'fp16 TFLOP/s':>12s} {'DRAM GB/s':>10s} {'op:byte':>8s} "
               f"{'L2 MiB':>7s}  description")
    for name in perfmodel.list_hardware():
        hw = perfmodel.load_hardware(name)
        click.echo(f"{name:20s} {hw.peak_tflops.get('float16', float('nan')):12.1f} "
                   f"{hw.dram_gbps:10.0f} {hw.op_byte('float16'):8.1f} "
                   f"{hw.l2_mib or 0:7.0f}  {hw.description}")


@hardware.command("show")
@click.argument("name")
def hardware_show(name):
    """Describe one hardware config (built-in NAME or a YAML path)."""
    hw = perfmodel.load_hardware(name)
    click.echo(f"{hw.name} ({hw.vendor}): {hw.description}")
    click.echo(f"  config: {hw.path}")
    for dtype, tflops in hw.peak_tflops.items():
        click.echo(f"  peak {dtype:9s} {tflops:8.1f} TFLOP/s dense ({hw.accumulate} accumulate)"
                   f"  op:byte {tflops * 1e12 / hw.dram_bytes_per_s:7.1f}")
    for dtype, tflops in hw.vector_tflops.items():
        click.echo(f"  vector {dtype:7s} {tflops:8.1f} TFLOP/s")
    click.echo(f"  DRAM {hw.dram_gbps:g} GB/s, {hw.dram_gib or '?'} GiB; L2 {hw.l2_mib or '?'} MiB; "
               f"{hw.sm_count or '?'} SMs at {hw.clock_mhz or '?'} MHz")
    click.echo(f"  source: {hw.source}")
    if hw.notes:
        click.echo(f"  notes: {hw.notes}")


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
