"""cuda_kernels/mbconv_split.py: the batch split into chunks of an even size and the streams' overlap from kernel
intervals (CPU), and on the GPU a block's output from chunks on two streams equal to the whole batch's, bit for bit
(every kernel's arithmetic is per image), with the profiler finding kernels on both streams."""
import pytest
import torch

from cuda_kernels.mbconv_split import chunk_bounds, covered, main, stream_overlap


def test_chunk_bounds():
    assert chunk_bounds(128, 1) == [(0, 128)]
    assert chunk_bounds(128, 2) == [(0, 64), (64, 128)]
    assert chunk_bounds(128, 4) == [(0, 32), (32, 64), (64, 96), (96, 128)]
    assert chunk_bounds(12, 3) == [(0, 4), (4, 8), (8, 12)]


def test_covered_is_the_union_length():
    assert covered([]) == 0
    assert covered([(0, 10), (5, 12), (20, 25)]) == 12 + 5
    assert covered([(3, 4), (0, 10)]) == 10  # one inside another, in either order
    assert covered([(0, 5), (5, 7)]) == 7  # touching


def test_stream_overlap():
    # stream 1: 0-10 and 12-20 (18 us busy); stream 2: 8-15 (7 us); both run during 8-10 and 12-15: 5 us
    got = stream_overlap([(0, 10, 1), (12, 20, 1), (8, 15, 2)])
    assert got == {"span_us": 20, "kernel_sum_us": 10 + 8 + 7, "streams_overlap_us": 18 + 7 - 20}
    assert got["streams_overlap_us"] == 2 + 3
    # one stream (PDL's early starts overlap its own kernels): no overlap between streams
    assert stream_overlap([(0, 10, 7), (5, 12, 7)])["streams_overlap_us"] == 0
    assert stream_overlap([]) == {"span_us": 0.0, "kernel_sum_us": 0.0, "streams_overlap_us": 0.0}


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
def test_chunks_on_two_streams_give_the_whole_batch_bits(path):
    from cuda_kernels import mbconv as mb
    from cuda_kernels.mbconv_split import split_run
    from mbconv_helpers import b0_prepared

    params, weights, x = b0_prepared(path, 8)
    whole = mb.mbconv(x, params, weights)
    out = torch.full_like(whole, float("nan"))
    run = split_run(lambda a, b: mb.mbconv(x[a:b], params, weights, out=out[a:b]), chunk_bounds(8, 4),
                    [torch.cuda.Stream(), torch.cuda.Stream()])
    run()
    torch.cuda.synchronize()
    assert torch.isfinite(whole).all() and whole.abs().sum() > 0
    assert torch.equal(out, whole)
    from cuda_kernels.mbconv_split import profiled_kernels

    kernels = profiled_kernels(run)
    assert len({stream for _, _, stream in kernels}) == 2 and len(kernels) >= 4 * 2, kernels
