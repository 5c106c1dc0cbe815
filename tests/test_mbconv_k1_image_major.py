"""Kernel 1's items image-major and grid-stride (csrc/mbconv_v8.cuh, CUDA_KERNELS_K1_IMAGE_MAJOR=1, off until
measured; NOTES.md "Session 27", the projection in kernel 1's shadow). Kernel 1's persistent CTAs each walk a
contiguous range of chunk-major items (i = (c N + n) bands + b), so an image's items sit at scattered rounds and nearly
every image finishes in the last round; a projection that started on finished images would find none until the end.
Image-major items taken grid-stride (CTA k: items k, k + grid, ...; i = (n C + c) bands + b) finish the images a round
at a time. The same items, each computed as before: the same bits. Only the wgmma _txdh route (B0's 4.1-6.3).

CPU: both walks simulated from their definitions (when each image finishes), the switch and route as the source reads
them. GPU (@pytest.mark.cuda): every distinct B0 / B2 block at batches 1, 5, 128 against float64 (poisoned output),
bit for bit the switch-off output where an image-major kernel ran, the profiler naming _txdhsi at B0's 4.1-6.1; B0 end
to end."""
from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import on_every_distinct_block

SOURCE = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def finishing_rounds(total_images: int, chunks: int, grid: int, image_major: bool) -> list[int]:
    """The round (0-based) in which each image's last item is computed, one band an image."""
    total = total_images * chunks
    done = [0] * total_images
    for cta in range(grid):
        if image_major:
            mine = list(range(cta, total, grid))
        else:
            mine = list(range(cta * total // grid, (cta + 1) * total // grid))
        for r, i in enumerate(mine):
            n = i // chunks if image_major else i % total_images
            done[n] = max(done[n], r)
    return done


def test_images_finish_a_round_at_a_time():
    # B0's 4.1: 128 images, 480 / 48 = 10 chunks, one band, 264 CTAs: 1,280 items, 4 or 5 a CTA
    chunk_major = finishing_rounds(128, 10, 264, False)
    image_major = finishing_rounds(128, 10, 264, True)
    last = max(chunk_major)
    assert last == 4 and sum(r == last for r in chunk_major) > 0.75 * 128  # nearly all wait for the last round
    # image-major: image n's items are 10 n .. 10 n + 9, done in round (10 n + 9) // 264: round 0 holds n <= 25
    # (259 <= 263), round 1 26-51 (519 <= 527), round 2 52-78 (789 <= 791), round 3 79-104 (1,049 <= 1,055), 4 the rest
    assert image_major == [(10 * n + 9) // 264 for n in range(128)]
    assert [image_major.count(r) for r in range(5)] == [26, 26, 27, 26, 128 - 105]


def test_the_switch_and_the_route():
    assert mb.K1_IMAGE_MAJOR_SWITCH == "CUDA_KERNELS_K1_IMAGE_MAJOR"
    assert """  const char* v = kernel1_switch("CUDA_KERNELS_K1_IMAGE_MAJOR");
  return v != nullptr && v[0] == '1';""" in SOURCE
    assert """        return kernel1_v8_im_requested() ? launch_expand_dw_v8_txdh<KS, true>(p, stream, pdl, g, v11)
                                         : launch_expand_dw_v8_txdh<KS, false>(p, stream, pdl, g, v11);""" in SOURCE
    assert "decltype(e)::value, IM>(p, stream, pdl);" in SOURCE  # the static entries' twins, and the rest's
    assert "launch_expand_dw_v8<48, KS, 1, 2, true, true, true, false, true, false, 0, false, false, 0, IM>(" in SOURCE
    # the walk: grid-stride from blockIdx.x, image-major decode, no halo carried between a CTA's items
    assert "const int i_begin = IM ? (int)blockIdx.x : (int)((long long)blockIdx.x * total / gridDim.x);" in SOURCE
    assert "auto next_item = [&](int i) { return IM ? i + (int)gridDim.x : i + 1; };" in SOURCE
    assert "return V8Item(V8Item::ImageMajor{}, i, p.hid_pad / HC, bands);" in SOURCE
    assert "const bool cont = !IM && halo && i > i_begin && it.band > 0;" in SOURCE
    assert "(IM ? item_at(prev_item(i)).chunk != it.chunk : it.n == 0 && it.band == 0)" in SOURCE
    decode = SOURCE.split("__device__ V8Item(ImageMajor, int i, int chunks, int bands) {")[1].split("}")[0]
    assert "n = i / per_image;" in decode and "chunk = r / bands;" in decode and "band = r - chunk * bands;" in decode


# ---- GPU ----

IM_KERNELS = {"features.4.1": "expand_dw_v8_kernel_txdhsi<48, 3, 1, 1, true, 6>",
              "features.5.0": "expand_dw_v8_kernel_txdhsi<48, 5, 1, 1, true, 7>",
              "features.5.1": "expand_dw_v8_kernel_txdhsi<48, 5, 1, 1, true, 8>",
              "features.6.1": "expand_dw_v8_kernel_txdhsi<48, 5, 1, 2, true, 10>"}


@on_every_distinct_block
def test_every_shape_bit_for_bit(name, path, batch, monkeypatch):
    from mbconv_helpers import check_switch_bitwise

    # (from 2 images: 6.1 at batch 1 may run one image an item)
    check_switch_bitwise(monkeypatch, name, path, batch, mb.K1_IMAGE_MAJOR_SWITCH, IM_KERNELS,
                         r"expand_dw_v8_kernel_txdhs?i<", min_batch=2)


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_IMAGE_MAJOR_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
