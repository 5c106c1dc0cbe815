"""cuda_kernels/mbconv_split.py: the batch split into chunks of an even size (CPU), and on the GPU a block's output
from chunks on two streams equal to the whole batch's: bit for bit where the chunks run the whole batch's kernels, and
within 1e-4 where the wgmma projection's split rule, which looks at the row count, picks another kernel for a chunk
(s28 call 1: 4.1 and 6.1 at 8 images in chunks of 2), with the profiler finding kernels on both streams."""
import pytest
import torch

from cuda_kernels.mbconv_split import chunk_bounds, main


def test_chunk_bounds():
    assert chunk_bounds(128, 1) == [(0, 128)]
    assert chunk_bounds(128, 2) == [(0, 64), (64, 128)]
    assert chunk_bounds(128, 4) == [(0, 32), (32, 64), (64, 96), (96, 128)]
    assert chunk_bounds(12, 3) == [(0, 4), (4, 8), (8, 12)]


@pytest.mark.parametrize("batch,chunks", [(128, 3), (6, 2), (8, 0), (128, 128)])
def test_chunks_of_an_odd_size_are_refused(batch, chunks):
    with pytest.raises(ValueError, match="chunks of an even size"):
        chunk_bounds(batch, chunks)


def test_the_command_line_refuses_a_bad_chunk_count(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--block", "features.3.1", "--chunks", "3", "-o", "/dev/null"])
    assert exc.value.code == 2 and "do not split into 3 chunks" in capsys.readouterr().err


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("path", ["features.2.1", "features.4.1", "features.6.1"])
def test_chunks_on_two_streams_give_the_whole_batch_output(path):
    from cuda_kernels import mbconv as mb
    from cuda_kernels.mbconv_split import split_run
    from mbconv_helpers import b0_prepared

    from perfmodel.harness import relative_error
    from perfmodel.kernel_trace import trace_events

    params, weights, x = b0_prepared(path, 8)
    whole = mb.mbconv(x, params, weights)
    out = torch.full_like(whole, float("nan"))
    run = split_run(lambda a, b: mb.mbconv(x[a:b], params, weights, out=out[a:b]), chunk_bounds(8, 4),
                    [torch.cuda.Stream(), torch.cuda.Stream()])
    run()
    torch.cuda.synchronize()
    assert torch.isfinite(whole).all() and whole.abs().sum() > 0
    assert relative_error(out, whole) < 1e-4
    if path == "features.2.1":  # project_v9s at any batch: the same kernels, the same bits
        assert torch.equal(out, whole)
    kernels = [e for e in trace_events(run, cpu=False) if e.get("cat") == "kernel"]
    assert len({e.get("args", {}).get("stream") for e in kernels}) == 2 and len(kernels) >= 4 * 2, kernels
