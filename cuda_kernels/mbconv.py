"""Fused torchvision ``MBConv`` (EfficientNet) on CUDA: reference, weight packing, shape
policy, the ``block_fusion::mbconv`` operator and the drop-in module.

The block, in inference form (BatchNorm folded into the convolutions, see
``perfmodel.zoo.fold_batchnorm``): ``[1x1 expand + SiLU] -> depthwise k x k (stride s) + SiLU
-> squeeze-excitation (mean -> 1x1 -> SiLU -> 1x1 -> sigmoid -> scale) -> 1x1 project
[-> + x]``. Activations are float16 ``N x C x H x W`` tensors in ``torch.channels_last`` memory;
the kernels accumulate in float32 (csrc/mbconv.cuh: the write-back design, three launches, in
versions 1-3). Building the module or deciding support needs no GPU and no compiler.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from dataclasses import dataclass, fields

import torch
from torch import nn
from torch.nn import functional as F

from cuda_kernels import _pdl

# The kernels' implementation (NOTES.md, "MBConv version 1/2/3/5"): 1 and 2 differ in kernel 1 only;
# 3 has kernel 1 v3 and its own SE and projection kernels (csrc/mbconv_v3.cu). 4 is an occupancy
# experiment: version 3's kernels with kernel 1's bands sized for four CTAs per SM where its
# registers allow it (k = 3: <= 64 per thread; k = 5 is capped at 80, three CTAs, and keeps
# version 3's bands), instead of two; more halo recomputed. 5 is version 3 with kernel 1's
# depthwise on tensor cores (csrc/mbconv_v2.cuh depthwise_tc; NOTES.md, "MBConv version 5"):
# same bands, SE and projection; compiled and CPU-tested, not yet run on a GPU. 6 is 5 with the
# projection's D and V tiles brought in whole by the copy engine (csrc/mbconv_v3.cu
# project_bulk_kernel, where hidden % 16 == 0 and two stages fit 180 KB: B0's hidden <= 240;
# version 3's projection elsewhere); compiled and CPU-tested only. 7 (NOTES.md, "MBConv version 7") is version
# 3's kernel 1 whose last CTA per image computes the SE (no SE kernel), then the projection over 64-row
# image-aligned tiles with the K loop split over 2-4 warp groups (csrc/mbconv_v7.cu) where Ho Wo <= 400, else
# version 3's projection: two launches per block; compiled and CPU-tested only. 8 (NOTES.md, "MBConv version 8") is
# version 3 with kernel 1 persistent over (chunk, image, band) items, X of the next item by one bulk copy during the
# depthwise, the expand epilogue without per-store tests, the pool without atomics (csrc/mbconv_v8.cuh), where the
# block has an expand conv (kernel1_v8_applies; version 3's kernel 1 elsewhere); version 3's SE and projection;
# compiled and CPU-tested only. 9 (NOTES.md, "MBConv version 9") is version 8 with the projection streamed by each warp
# straight from D into its mma fragments, no shared memory for D and no barrier in its loop (csrc/mbconv_v3.cu
# project_v9_kernel; where V and the warps' task rings fit, each warp stages its task in shared memory,
# project_v9t_kernel, unless CUDA_KERNELS_PROJ_V9_LOAD=ring), where project_v9_applies; version 3's projection elsewhere.
# Passed 106/106 GPU tests with either loader; bit for bit version 8. 10 (NOTES.md, "Session 13") is version 9 with
# kernel 1's options on by default: items of 2 images where a band is the whole image (CUDA_KERNELS_K1_IMAGES=1 turns
# it off) and the depthwise's taps summed in packed fp16 from zero, the bias added in fp32 (CUDA_KERNELS_K1_HFMA2=0
# turns it off); examples/measurements/mbconv/s13/. 11 (NOTES.md, "The projection on warpgroup MMAs, measured") is
# version 10 with the projection on Hopper warpgroup MMAs where project_v9 does not apply or project_v9s does not fit
# (from stage 4 on in B0; tensor-memory-accelerator loads, csrc/mbconv_proj_wg.cu; CUDA_KERNELS_PROJ_WG=
# off|late|all|ring changes it from unstaged; over two warpgroups where its tiles are at most the SMs,
# CUDA_KERNELS_PROJ_WG_SPLIT) and version 3's kernel 1 (features.1.0, 7.0) with its depthwise in HFMA2
# (CUDA_KERNELS_K1_V3_HFMA2=0 turns it off);
# examples/measurements/mbconv/s14/.
VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
# what the extension runs per version (4 is version 3's kernels with other bands)
KERNEL_VERSION = {1: 1, 2: 2, 3: 3, 4: 3, 5: 5, 6: 6, 7: 7, 8: 8, 9: 9, 10: 10, 11: 11}
PROJECT_V7_MAX_HW = 400  # csrc/mbconv_v7.cu kP7MaxHW: project_v7 where Ho * Wo <= this
# A version becomes the default only once it has passed the GPU tests (CUDA_KERNELS_MBCONV_VERSION
# overrides): version 2 passed 67/67 on the H200 (examples/measurements/h200_call_2026-11-30b_log.txt),
# version 3 76/76 (examples/measurements/mbconv/v3/mbconv_b0_h200_v3_log.txt), version 9 106/106 and then the
# whole GPU suite with it as the default (examples/measurements/mbconv/v9/; version 3's kernel 1 at features.7.0,
# kernel1_v9_takes_v3), version 10 100/100 of its own with the switches that make it (mbconv/s13/call4) and then the
# MBConv suite as the default (mbconv/s13/call5), version 11 its projection's tests (every B0 / B2 shape it serves at
# batch 1 / 5 / 128, odd sizes, B0 on its own activations; mbconv/s14/call3-4) and version 3's HFMA2 kernel 1's
# (mbconv/s14/call2)
DEFAULT_VERSION = int(os.environ.get("CUDA_KERNELS_MBCONV_VERSION", "11"))
# Versions whose kernels need compute capability 9.0 (bulk copies and mbarriers; csrc/mbconv.cu version_needs_sm90):
# on an older GPU the operator runs FALLBACK_VERSION instead, with a warning (runnable_version).
SM90_VERSIONS = (6, 8, 9, 10, 11)
FALLBACK_VERSION = 3
KERNEL_SIZES = (3, 5)
STRIDES = (1, 2)
CHANNEL_MULTIPLE = 8  # 16-byte rows of every NHWC tensor and weight
# Kernel 1 works on bands of output rows; the band is as tall as fits this much shared memory
# (two blocks per SM on an H100/H200), or one row band within the per-block maximum.
SMEM_BUDGET = 113 * 1024
SMEM_MAX = 227 * 1024
SMEM_BUDGET_4_CTAS = 56 * 1024  # version 4, k = 3: 228 KB per SM, 1 KB reserved per CTA
PROJECT_TILE_N, PROJECT_TILE_K = 64, 32  # csrc/mbconv.cuh kProjectBN, kProjectBK


def _round_up(a: int, b: int) -> int:
    return -(-a // b) * b


def chunk_for(hidden: int) -> int:
    """Hidden channels per block of kernel 1: 48 divides every expanded width of EfficientNet
    (6 x a multiple of 8); others use 32 and a zero-padded tail."""
    return 48 if hidden % 48 == 0 else 32


def kernel1_v8_applies(expand: bool, chunk: int) -> bool:
    """Whether version 8 runs its own kernel 1 (csrc/mbconv_v8.cuh launch_expand_dw_v8_ks): for blocks with an
    expand conv and chunks of 48 (every expand block of EfficientNet-B0 / B2); version 3's kernel 1 without an
    expand conv (expand ratio 1: B0's and B2's features.1.x) and for chunks of 32 (its k = 5 instantiation
    spilled under two CTAs' 128 registers)."""
    return expand and chunk == 48


def kernel1_v9_takes_v3(kernel_size: int, stride: int, out_h: int, out_w: int) -> bool:
    """Whether version 9 runs version 3's kernel 1 instead of version 8's (csrc/mbconv.cuh kernel1_v9_takes_v3): at
    k = 3, stride 1 and at most 64 output pixels per image, where version 8's was measured slower (B0's features.7.0:
    132.3 against 145.3 us per block, examples/measurements/mbconv/v8/mb8_blocks.json)."""
    return kernel_size == 3 and stride == 1 and out_h * out_w <= 64


K1_IMAGES_SWITCH = "CUDA_KERNELS_K1_IMAGES"  # csrc/mbconv_v8.cuh kernel1_v8_images_requested: "1" / "2" (v10: 2)
K1_HFMA2_SWITCH = "CUDA_KERNELS_K1_HFMA2"  # csrc/mbconv_v8.cuh kernel1_v8_hfma2_requested: "0" / "1" (v10: 1)
K1_V3_HFMA2_SWITCH = "CUDA_KERNELS_K1_V3_HFMA2"  # csrc/mbconv.cuh kernel1_v3_hfma2_requested: "0" / "1" (v11: 1)
V8_TWO_CTA_SMEM = 113 * 1024  # kV8TwoCtaSmem


def kernel1_v8_images(requested: int, row_blocks: int, height: int, width: int, kernel_size: int, stride: int,
                      c_in: int, k_pad: int, rows: int, chunk: int = 48) -> int:
    """Images per item of version 8's kernel 1 (csrc/mbconv_v8.cuh kernel1_v8_images; NOTES.md, "Design sketch:
    kernel 1 items of G images"): `requested` (CUDA_KERNELS_K1_IMAGES) where a band is the whole image, the stride is
    1 and that many images' shared memory still fits two CTAs per SM; 1 otherwise."""
    if requested <= 1 or row_blocks != 1 or stride != 1:
        return 1
    smem = kernel1_smem_bytes(rows, height, width, kernel_size, stride, k_pad, chunk, True, 8, c_in, requested)
    return requested if smem <= V8_TWO_CTA_SMEM else 1


K1_TMA_X_SWITCH = "CUDA_KERNELS_K1_TMA_X"  # csrc/mbconv_v8.cuh kernel1_v8_tx_requested: "0" / "1" (on by default)
V8_TX_COLS, V8_TX_MAX_ROWS = 64, 256  # kV8TxCols (channels per box: 128 bytes), kV8TxMaxRows (a box dimension's cap)


def x_tx_bytes_v8(m_pad: int, k_pad: int) -> int:
    """Shared memory of X by the tensor memory accelerator (csrc/mbconv_v8.cuh x_tx_bytes_v8): 1 KB of alignment
    slack, then one box of m_pad pixels x 128 bytes per 64 channels."""
    return 1024 + -(-k_pad // V8_TX_COLS) * m_pad * 128


def x_tx_offset(row: int, k: int, m_pad: int) -> int:
    """Half offset of X[row][k] (k a multiple of 8) from the first box (csrc/mbconv_v8.cuh x_tx_offset): box k // 64,
    row `row` of 64 halves, its 16-byte piece (k % 64) // 8 at that piece XOR row % 8 (the 128-byte swizzle)."""
    return (k // V8_TX_COLS) * m_pad * V8_TX_COLS + row * V8_TX_COLS + ((((k % V8_TX_COLS) // 8) ^ (row % 8)) * 8)


K1_WGMMA_SWITCH = "CUDA_KERNELS_K1_WGMMA"  # csrc/mbconv_v8.cuh kernel1_v8_wg_requested: "0" / "1" (on by default)
V8_WG_ROWS = 64  # kV8WgRows: pixels per warpgroup tile of the wgmma expand
# csrc/mbconv_v8.cuh kernel1_v8_bc_requested: "0" / "1" (on by default since session 18): the expand's bias and
# halving in the MMA, at stride 2 (expand_dw_v8_kernel_bc)
K1_BIAS_C_SWITCH = "CUDA_KERNELS_K1_BIAS_C"
# csrc/mbconv_v8.cuh kernel1_v8_dh_requested: "0" / "1" (on by default in version 11 since session 23: B0 -16.6 us): D's
# epilogue in packed fp16 with the HFMA2 depthwise, its taps as half2 (expand_dw_v8_kernel_dh / _txdh / _bcdh)
K1_DH2_SWITCH = "CUDA_KERNELS_K1_DH2"
# csrc/mbconv_v8.cuh kernel1_v8_tg_requested: "0" / "1" (on by default in version 11 since session 24: B0's 3.0 kernel 1
# 99.5 -> 93.2 us, B0 -5.2 us): at stride 2, k = 5, the taps and bias from global memory (expand_dw_v8_kernel_bcdhg)
# and band_rows' taller bands that their room allows
K1_TAPS_G_SWITCH = "CUDA_KERNELS_K1_TAPS_G"
# csrc/mbconv_v8.cuh kernel1_v8_ur_requested: "0" / "1" (on by default in version 11 since session 25: 2.1's kernel 1
# 117.2 -> 110.4 us, B0 -13.0 us): at stride 1, k = 3 with k_pad 32
# (2.1) or k = 5 with k_pad 48 (3.1), the packed-fp16 kernel's mma.sync expand with U's fragments in registers, loaded
# once an item (expand_dw_v8_kernel_dhur)
K1_U_REG_SWITCH = "CUDA_KERNELS_K1_U_REG"
# csrc/mbconv_v8.cuh kernel1_v8_fd_requested: "0" / "1" (on by default in version 11 since session 25: 2.1's kernel 1
# 110.5 -> 102.6 us, 3.1's 75.6 -> 71.7): where version 11 runs _dhur (2.1, 3.1), kernel 1's per-item divisions as
# multiplies (csrc/fastdiv.h; expand_dw_v8_kernel_dhurf)
K1_FASTDIV_SWITCH = "CUDA_KERNELS_K1_FASTDIV"
# csrc/mbconv_v8.cuh kernel1_v8_all_whole: "0" / "1" (on by default in version 11 since session 26: 2.1's kernel 1
# 102.6 -> 95.3 us, B0 -32.2 us): where every depthwise unit of the launch is whole (all outputs inside the image, real
# channels: B0's 2.0-3.1), version 11's kernel 1 without the clamps and per-output tests (expand_dw_v8_kernel_dhurfw /
# _bcdhw / _bcdhgw)
K1_WHOLE_SWITCH = "CUDA_KERNELS_K1_WHOLE"
# csrc/mbconv_v8.cuh kernel1_v8_static: "0" / "1" (on by default in version 11 since session 26: 2.1's kernel 1 93.3
# -> 82.3 us, 2.0's 158.3 -> 125.2, B0 -58.9 us): where a whole-unit kernel runs and the launch's shape is one of
# kV8Static's (B0's 2.0-3.1 at 224 x 224), that kernel compiled for the shape, its sizes constants
# (expand_dw_v8_kernel_dhurfws / _bcdhws)
K1_STATIC_SWITCH = "CUDA_KERNELS_K1_STATIC"
# csrc/mbconv_v8.cuh kernel1_v8_static_rest: "0" / "1" (on by default in version 11 since session 27: 4.1's kernel 1
# 36.1 -> 31.7 us, B0 -49.1 us): the same for the rest of B0's version-8 kernels 1 (kV8Static 5-10: 4.0-6.3;
# expand_dw_v8_kernel_bcdhs / _txdhs)
K1_STATIC_REST_SWITCH = "CUDA_KERNELS_K1_STATIC_REST"
# csrc/mbconv_v8.cuh kernel1_v8_row_units_requested: "0" / "1" (on by default in version 11 since session 29: 4.1's
# kernel 1 31.9 -> 27.4 us, B0 -35.5 us, B2 -84.1): at the static wgmma blocks the depthwise in whole units of one
# output row, 7 wide (B0's 4.1-6.3) or the whole 9-wide row (B2's 6.1-7.1) (expand_dw_v8_kernel_txdhsw)
K1_ROW_UNITS_SWITCH = "CUDA_KERNELS_K1_ROW_UNITS"
# csrc/mbconv_v8.cuh kernel1_v8_halo5_requested: E's halo rows kept between consecutive bands at k = 5, copied in shared
# memory after barrier A (expand_dw_v8_kernel_dhurfwsh). "2", version 11's default since session 30 (s30 call 2:
# kernel 1 64.5 -> 54.3 us, B0 -10.8 us): at the static shapes K1_HALO5_BANDS lists, in its taller bands (B0's 3.1 in 2
# bands of 14, not 3 of 10); "1" (measured flat): at every static U-in-registers entry with k = 5 in today's bands;
# "0": off
K1_HALO5_SWITCH = "CUDA_KERNELS_K1_HALO5"
# csrc/mbconv_v8.cuh kernel1_v8_bias_early_requested: on unless "0" (version 11's default since session 31; s31 call 1:
# B0 -5.4 us, B2 -10.0): the static wgmma row-unit kernels (B0's 4.1-6.3, B2's 6.1-7.1) with the expand's biases
# loaded at the item's start, before the waits for X and barrier A (expand_dw_v8_kernel_txdhswb)
K1_BIAS_EARLY_SWITCH = "CUDA_KERNELS_K1_BIAS_EARLY"
# csrc/mbconv_v8.cuh kV8HaloBands: (H, W, k, stride, C_in, k_pad, hidden) of a static entry -> its bands' output rows
# with the halo kept (they fit two CTAs an SM only with that kernel's smaller X: kernel1_smem_bytes(..., hk=True))
K1_HALO5_BANDS = {(28, 28, 5, 1, 40, 48, 240): 14}
# an experiment switch, read at every launch (rows_override): "HxWkKsS=R[,...]" caps kernel 1's output rows per band
# at R for inputs of H x W with a k x k depthwise at stride S (e.g. "28x28k5s1=7": B0's 3.1 in 4 bands of 7 instead
# of 3 of 10, 8 rounds of items on 264 CTAs -> 10 shorter ones; NOTES.md "Current state", next 6)
K1_ROWS_SWITCH = "CUDA_KERNELS_K1_ROWS"
# csrc/mbconv_se_v4.cu se_v4_mode: "0" / "1" / "all" ("1" by default since session 18): the SE as two batched
# products (1: where hidden >= 480)
SE_V4_SWITCH = "CUDA_KERNELS_SE_V4"
# csrc/mbconv_se_v5.cu se_v5_requested: on unless "0" (since session 18): the SE in one kernel on clusters of 8 CTAs,
# where SE version 4 applies
SE_V5_SWITCH = "CUDA_KERNELS_SE_V5"
# csrc/mbconv_se_v5.cu se_v5_images: 4 images a cluster unless "8" (since session 35: the same bits, B0 -12.9 us)
SE_V5_IMAGES_SWITCH = "CUDA_KERNELS_SE_V5_IMAGES"
# csrc/mbconv_se_v5.cu se_v6_requested: "1" (measured in session 19, off: B0 -4 us, noise): version 5's cluster with its
# products register-blocked over the 8 images, where version 5 would run
SE_V6_SWITCH = "CUDA_KERNELS_SE_V6"
# csrc/mbconv_v3.cu se_v3_pre: on unless "0" (since session 22: B0 -5.6 us): SE version 3 with W1 and W2 copied into
# shared memory before the wait on kernel 1 (se_v3p_kernel), where se_v3_pre_smem_bytes <= SE_V3_PRE_MAX_SMEM
SE_V3_PRE_SWITCH = "CUDA_KERNELS_SE_V3_PRE"
SE_V3_PRE_MAX_SMEM = 100 * 1024  # kSEV3PreMaxSmem


def se_v3_pre_smem_bytes(hid_pad: int, sq: int, hidden: int) -> int:
    """se_v3p_kernel's shared memory (csrc/mbconv_v3.cu se_v3_pre_smem_bytes): pooled [hid_pad], squeezed [sq rounded
    up to 4], W1 [sq][hidden] and W2 [hidden][sq], floats."""
    return (hid_pad + -(-sq // 4) * 4 + 2 * sq * hidden) * 4


# csrc/mbconv_v3.cu launch_project_v9_nt: "1" (measured in session 20, off: B0 +0.4 us): project_v9t's tasks by one bulk
# copy each (project_v9b_kernel)
PROJ_V9_BULK_SWITCH = "CUDA_KERNELS_PROJ_V9_BULK"
# csrc/mbconv_v3.cu project_v9s_runs: on unless "0" (since session 20): project_v9t with each task's SE scale row
# staged in shared memory beside its D rows (project_v9s_kernel), where H x W is a multiple of 16
PROJ_V9_SS_SWITCH = "CUDA_KERNELS_PROJ_V9_SS"
# csrc/mbconv_v3.cu project_v9sx_requested: "1" (off: neutral in session 20): project_v9s with the shortcut's 16 rows
# of each task staged too (project_v9sx_kernel)
PROJ_V9_SX_SWITCH = "CUDA_KERNELS_PROJ_V9_SX"
# csrc/mbconv_v3.cu project_v9sr_requested: "1" (measured in session 21, off: 2.1 40.9 -> 43.0 us): project_v9s with the
# shortcut's values loaded into registers one task ahead (project_v9sr_kernel), at blocks with a shortcut
PROJ_V9_RX_SWITCH = "CUDA_KERNELS_PROJ_V9_RX"
# csrc/mbconv_v3.cu project_v9_evict_first_requested: on unless "0" (since session 38: B0 -5.9 us, B2 +0.5):
# project_v9s reading D evict_first from L2 (project_v9se_kernel), the read half of the CUDA_KERNELS_BUILD_D_L2_HINTS
# build chosen at launch
PROJ_V9_EF_SWITCH = "CUDA_KERNELS_PROJ_V9_EF"


def u_bytes_v8(k_pad: int, chunk: int, wg: bool) -> int:
    """Shared memory of U, the chunk's expand weights (csrc/mbconv_v8.cuh u_bytes_v8): version 3's padded rows, or
    with the wgmma expand X's swizzled layout (one 128-byte row per channel and 64 k, x_tx_offset with m_pad = chunk)."""
    return -(-k_pad // V8_TX_COLS) * chunk * 128 if wg else chunk * (k_pad + 8) * 2


def v8_segment_rows(kernel_size: int, stride: int) -> int:
    """Output rows per depthwise segment of version 8's kernel 1 (csrc/mbconv_v8.cuh V8Seg): 4 at k = 3, stride 1,
    else 2 (a stride-2 band is short: B0's 2.0 has 2 output rows a band)."""
    return 4 if kernel_size == 3 and stride == 1 else 2


def kernel1_v8_m_pad(height: int, width: int, kernel_size: int, stride: int, rows: int, images: int = 1) -> int:
    """Pixels of version 8's X for one item, rounded up to 16 (csrc/mbconv_v8.cuh expand_dw_v8_m_pad): `images`
    images of the band's input rows (at most the image)."""
    return _round_up(images * min(height, (rows - 1) * stride + kernel_size) * width, 16)


def kernel1_v8_tx(requested: bool, height: int, width: int, kernel_size: int, stride: int, c_in: int, k_pad: int,
                  rows: int, images: int, chunk: int = 48, wg: bool = False, dh: bool = False) -> bool:
    """Whether version 8's kernel 1 takes X by the tensor memory accelerator (csrc/mbconv_v8.cuh kernel1_v8_tx; the
    launcher also asks stride 1, the depthwise in HFMA2 and x 16-byte aligned): asked for (CUDA_KERNELS_K1_TMA_X; with
    the wgmma expand, `wg`, its U layout counts), X's rows padded otherwise (x_rows_padded_v8), at most
    V8_TX_MAX_ROWS pixels a box, and no fewer CTAs per SM; `dh`: with the packed-fp16 epilogue's smaller taps
    (CUDA_KERNELS_K1_DH2)."""
    m_pad = kernel1_v8_m_pad(height, width, kernel_size, stride, rows, images)
    if not (requested and x_rows_padded_v8(c_in) and m_pad <= V8_TX_MAX_ROWS):
        return False
    args = (rows, height, width, kernel_size, stride, k_pad, chunk, True, 8, c_in, images)
    tx = kernel1_smem_bytes(*args, tx=True, wg=wg, dh=dh)
    return tx <= V8_TWO_CTA_SMEM or tx <= kernel1_smem_bytes(*args, dh=dh)


def kernel1_v8_expand(tx: bool, wg: bool, height: int, width: int, kernel_size: int, stride: int, c_in: int,
                      k_pad: int, rows: int, images: int, dh: bool = False) -> str:
    """What a stride-1 HFMA2 launch of version 8's kernel 1 runs (csrc/mbconv_v8.cuh launch_expand_dw_v8_hf, x 16-byte
    aligned, an sm_90a build): "wgmma" (the expand on warpgroup MMAs over the TMA X), "tma" (mma.sync over the TMA X)
    or "ldmatrix" (X by bulk copies); `tx`, `wg`: CUDA_KERNELS_K1_TMA_X and CUDA_KERNELS_K1_WGMMA (both on by
    default; the wgmma expand needs the TMA X); `dh`: CUDA_KERNELS_K1_DH2 (on by default in version 11), whose
    smaller taps make room."""
    args = (height, width, kernel_size, stride, c_in, k_pad, rows, images)
    if tx and wg and kernel1_v8_tx(True, *args, wg=True, dh=dh):
        return "wgmma"
    return "tma" if tx and kernel1_v8_tx(True, *args, dh=dh) else "ldmatrix"


def x_rows_padded_v8(c_in: int) -> bool:
    """Version 8's X layout (csrc/mbconv_v8.cuh x_padded_v8): version 3's padded rows (k_pad + 8 halves, one bulk
    copy per pixel) where the dense pitch (C_in halves) would put ldmatrix's 8 rows on shared 16-byte bank groups
    and the pixels are long (C_in >= 64: 80, 112, 192, ...); dense rows (one bulk copy per item) elsewhere."""
    return c_in >= 64 and (c_in // 2) % 8 != 4


PROJECT_V9_TILES = (2, 3, 5, 6, 10, 11)  # csrc/mbconv_v3.cu launch_project_v9: C_out / 8 it is built for
PROJECT_V9_MAX_SMEM = 110 * 1024  # kProjV9MaxSmem: V's rows in shared memory


def project_v9_smem_bytes(hidden: int, c_out: int) -> int:
    """Shared memory of project_v9 (csrc/mbconv_v3.cu project_v9_smem_bytes): V's C_out rows at a pitch of
    round_up(hidden, 64) + 16 halves (2 x pitch = 32 mod 128 bytes: a quarter warp's 8-byte loads of rows g .. g + 3
    fall into distinct banks)."""
    return c_out * (_round_up(hidden, 64) + 16) * 2


def project_v9_applies(hidden: int, c_out: int) -> bool:
    """Whether version 9 runs project_v9 (csrc/mbconv_v3.cu project_v9_applies): 16-channel units, a built column
    count and V within the shared-memory cap; version 3's projection otherwise."""
    return (hidden % 16 == 0 and c_out % 8 == 0 and c_out // 8 in PROJECT_V9_TILES
            and project_v9_smem_bytes(hidden, c_out) <= PROJECT_V9_MAX_SMEM)


PROJECT_V9_WARPS = 8  # kProjV9Warps
PROJECT_V9T_MAX_SMEM, PROJECT_V9S_MAX_SMEM = 200 * 1024, 227 * 1024  # kProjV9TMaxSmem, kProjV9SMaxSmem


def project_v9t_smem_bytes(hidden: int, c_out: int, bulk: bool = False, staged: bool = False,
                           residual: bool = False) -> int:
    """Shared memory of project_v9t (csrc/mbconv_v3.cu project_v9t_smem_bytes): V, each warp's ring of two 16-row
    tasks, and either loader option's extra: two mbarriers a warp (bulk), or two fp32 scale rows a warp and with a
    shortcut two slots of 16 rows of x (staged, project_v9s)."""
    warps = PROJECT_V9_WARPS
    extra = warps * 16 if bulk else 0
    extra += warps * 2 * hidden * 4 if staged else 0
    extra += warps * 2 * 16 * c_out * 2 if staged and residual else 0
    return project_v9_smem_bytes(hidden, c_out) + warps * 2 * 16 * hidden * 2 + extra


def project_v9s_applies(hidden: int, c_out: int, hw: int, staged_shortcut: bool = False) -> bool:
    """Whether project_v9s runs (csrc/mbconv_v3.cu project_v9s_runs; unless CUDA_KERNELS_PROJ_V9_SS=0): where project_v9
    does, each 16-row task in one image (H x W a multiple of 16) and the staged rows within its shared-memory cap
    (staged_shortcut: a block with a shortcut under CUDA_KERNELS_PROJ_V9_SX=1)."""
    return (project_v9_applies(hidden, c_out) and hw % 16 == 0
            and project_v9t_smem_bytes(hidden, c_out, staged=True, residual=staged_shortcut) <= PROJECT_V9S_MAX_SMEM)


def project_v9_runs_ring(hidden: int, c_out: int, hw: int) -> bool:
    """Whether project_v9 runs its ring of loads in registers (csrc/mbconv_v3.cu project_v9_runs_ring, with the
    loader switches at their defaults): where it applies and neither project_v9s nor project_v9t fits (B0's 4.1 and
    4.2, where CUDA_KERNELS_PROJ_WG=ring runs project_wg instead)."""
    return (project_v9_applies(hidden, c_out) and not project_v9s_applies(hidden, c_out, hw)
            and project_v9t_smem_bytes(hidden, c_out) > PROJECT_V9T_MAX_SMEM)


PROJECT_V10_MODES = ("off", "late", "all", "auto")  # CUDA_KERNELS_PROJ_V10 (csrc/mbconv_v3.cu project_v10_mode)
PROJECT_V10_BM, PROJECT_V3_STAGES, PROJECT_V3_LD = 64, 4, 40  # kProjV10BM, kProjV3Stages, kProjV3LD


def project_v3_bn(c_out: int) -> int:
    """Columns per tile of project_v3 and project_v10 (csrc/mbconv_v3.cu project_v3_bn): the fewest 64-wide N tiles,
    then the narrowest multiple of 16 that covers C_out in that many."""
    tiles = _round_up(c_out, 64) // 64
    return _round_up(-(-c_out // tiles), 16)


def project_v10_smem_bytes(bn: int) -> int:
    """Shared memory of project_v10 (csrc/mbconv_v3.cu project_v10_smem_bytes): four stages of the 64-row D tile and
    the BN rows of V, 32 channels at a pitch of 40 halves, and the fp32 k-half sums of the 4 row warps."""
    return PROJECT_V3_STAGES * (PROJECT_V10_BM + bn) * PROJECT_V3_LD * 2 + 4 * (bn // 8) * 4 * 32 * 4


def project_v10_auto(rows: int, c_out: int, sms: int) -> bool:
    """Whether version 9's default projection is project_v10 where project_v9 does not apply (csrc/mbconv_v3.cu
    project_v10_auto): project_v3 would have fewer than 1.5 units (128-row x BN tiles over the N x Ho x Wo `rows`) per
    SM, under 6 warps per SM, where project_v10 measured faster (B0's features.6.x on the H200's 132 SMs)."""
    bn = project_v3_bn(c_out)
    units = -(-rows // 128) * -(-c_out // bn)
    return 2 * units < 3 * sms


PROJECT_WG_MODES = ("off", "late", "all", "ring", "unstaged")  # CUDA_KERNELS_PROJ_WG (csrc/mbconv_proj_wg.cu)
PROJECT_WG_DEFAULT_MODE = "unstaged"  # version 11's, since session 22 (project_wg_mode; ring in session 21)
PROJECT_WG_SPLIT_SWITCH = "CUDA_KERNELS_PROJ_WG_SPLIT"  # 0 | 1 | auto (the default): project_wg_sk_kernel
PROJECT_WG_M128_SWITCH = "CUDA_KERNELS_PROJ_WG_M128"  # "1": project_wg_m2_kernel, 128-row tiles (measured: off)


def project_wg_splits(rows: int, c_out: int, sms: int) -> bool:
    """Whether project_wg runs over two warpgroups under CUDA_KERNELS_PROJ_WG_SPLIT=auto (csrc/mbconv_proj_wg.cu
    project_wg_split): where its 64-row tiles times its column tiles are at most the SMs."""
    return -(-rows // PROJECT_WG_ROWS) * (c_out // project_wg_bn(c_out)) <= sms
PROJECT_WG_SWITCH = "CUDA_KERNELS_PROJ_WG"
PROJECT_WG_OPT_SWITCH = "CUDA_KERNELS_PROJ_WG_OPT"  # csrc/mbconv_proj_wg.cu project_wg_opt: PROJECT_WG_OPTIONS
PROJECT_WG_OPT_DEFAULT = 9  # kProjWgOptDefault: 1 with 3 stages, since session 22 (1 before)
PROJECT_WG_PREFETCH_X, PROJECT_WG_OVERLAP, PROJECT_WG_PREFETCH_L2, PROJECT_WG_STAGES3 = 1, 2, 4, 8  # its bits
PROJECT_WG_PRODUCER = 64  # kProjWgProducer: a fifth warp issues the ring's refills (option 73 = 9 | 64, session 33)
# the values built (5: 1 with each tile's D prefetched into L2, measured slower; 9: 1 with 3 stages, the default;
# 73: 9 with the producer warp, measured and off: B0 +20.4 us in s33 call 3)
PROJECT_WG_OPTIONS = (0, 1, 2, 3, 5, 9, 73)
PROJECT_WG_ROWS, PROJECT_WG_K = 64, 64  # kProjWgRows, kProjWgK
PROJECT_WG_SHAPES = (16, 24, 40, 48, 80, 88, 112, 120, 160, 176, 192, 208)  # wgmma m64nNk16 shapes built (csrc/gen_wgmma.py)


def project_wg_bn(c_out: int) -> int:
    """Output tile width of the projection on warpgroup MMAs (csrc/mbconv_proj_wg.cu project_wg_bn): C_out up to 256,
    else half of it; 0 where no wgmma shape is built."""
    bn = c_out if c_out <= 256 else (c_out // 2 if c_out % 16 == 0 else 0)
    return bn if bn in PROJECT_WG_SHAPES else 0


def project_wg_stages(bn: int, ks: int = 1, mw: int = 1, opt: int = 0) -> int:
    """Pipeline stages of the wgmma projection (csrc/mbconv_proj_wg.cu project_wg_stages): 4, and 3 from bn = 160 on
    (two CTAs per SM) or with the option bit PROJECT_WG_STAGES3; with the hidden dimension split over ks = 2
    warpgroups, each warpgroup's ring: 2 up to bn = 120, else 3; with 128-row tiles on mw = 2 warpgroups, 4."""
    if mw == 2:
        return 4
    if ks == 1:
        return 3 if bn >= 160 or opt & PROJECT_WG_STAGES3 else 4
    return 3 if bn > 120 else 2


def project_wg_smem_bytes(bn: int, ks: int = 1, mw: int = 1, opt: int = 0) -> int:
    """Shared memory of the wgmma projection (csrc/mbconv_proj_wg.cu project_wg_smem_bytes): 1 KB of alignment slack,
    then per stage B (bn rows of 128 bytes) and A (64 mw rows of 128 bytes), both in the 128-byte swizzle the tensor
    memory accelerator writes, and the stage's 8-byte mbarrier; ks rings of them; with PROJECT_WG_PRODUCER a second
    mbarrier a stage (empty)."""
    stages = project_wg_stages(bn, ks, mw, opt)
    return 1024 + ks * stages * ((bn + mw * PROJECT_WG_ROWS) * 128 + 8) + (8 * stages if opt & PROJECT_WG_PRODUCER else 0)


def project_wg_threads(opt: int) -> int:
    """Threads a CTA of project_wg_kernel<BN, opt> (csrc/mbconv_proj_wg.cu project_wg_threads): one warpgroup, and
    with the option bit PROJECT_WG_PRODUCER one more warp."""
    return 128 + (32 if opt & PROJECT_WG_PRODUCER else 0)


V8_HALO_MAX = 12  # csrc/mbconv_v8.cuh kV8HaloMax: 8-byte pieces of E's halo rows per thread


def kernel1_v8_halo(width: int, kernel_size: int, stride: int, chunk: int = 48, keep_k5: bool = False) -> bool:
    """Whether version 8 keeps E's halo rows between consecutive bands (csrc/mbconv_v8.cuh halo_v8): not at k = 5,
    stride 1 (the rows held in registers across a barrier made ptxas spill there) unless `keep_k5` (the static
    kernel that copies them after the barrier, CUDA_KERNELS_K1_HALO5), elsewhere where the k - s rows of E (WE
    pixels of chunk / 4 8-byte pieces) fit 256 threads x V8_HALO_MAX pieces held in registers."""
    if kernel_size == 5 and stride == 1:
        return keep_k5  # (copied in a loop: no cap on the rows)
    per_thread = 4 if stride == 1 else 2
    e_width = (_round_up(output_size(width, stride), per_thread) - 1) * stride + kernel_size
    return (kernel_size - stride) * e_width * (chunk // 4) <= 256 * V8_HALO_MAX


def kernel1_smem_bytes(rows: int, height: int, width: int, kernel_size: int, stride: int, k_pad: int, chunk: int,
                       expand: bool, version: int = DEFAULT_VERSION, c_in: int | None = None, images: int = 1,
                       tx: bool = False, wg: bool = False, dh: bool = False, tg: bool = False, hk: bool = False) -> int:
    """Shared memory of kernel 1 for bands of `rows` output rows (mirrors csrc/mbconv.cuh
    ``expand_dw_smem_bytes``, csrc/mbconv_v2.cuh ``expand_dw_v2_smem_bytes`` and csrc/mbconv_v8.cuh
    ``expand_dw_v8_smem_bytes``): the X band and U chunk (expand only), E, the channel sums. Version 8
    (where kernel1_v8_applies) needs `c_in`: its X rows are dense (C_in halves) unless x_rows_padded_v8, E's
    pixel pitch is 60 halves, and it adds the per-group sums, the chunk's depthwise taps and an mbarrier; `images`
    (version 8 only): items of that many images (kernel1_v8_images), X, E and the per-group sums that many times;
    `tx` (version 8 only): X by the tensor memory accelerator (kernel1_v8_tx, x_tx_bytes_v8); `wg`: U in the wgmma
    expand's layout (u_bytes_v8); `dh`: the packed-fp16 epilogue's taps, half2 with the fp32 bias after them
    (CUDA_KERNELS_K1_DH2: k k chunk x 2 bytes less); `tg`: no taps or bias in shared memory (CUDA_KERNELS_K1_TAPS_G);
    `hk`: the halo kept at k = 5 (CUDA_KERNELS_K1_HALO5; expand_dw_v8_m_pad_hk): with at most two bands, each touches
    the image's top or bottom, so X holds k // 2 input rows fewer."""
    in_rows = (rows - 1) * stride + kernel_size
    m_pad = _round_up(min(height, in_rows) * width, 16)
    if version in (9, 10, 11):  # version 8's kernel 1, or version 3's where kernel1_v9_takes_v3
        out_h, out_w = output_size(height, stride), output_size(width, stride)
        version = 3 if kernel1_v9_takes_v3(kernel_size, stride, out_h, out_w) else 8
    if version == 8 and kernel1_v8_applies(expand, chunk):
        if c_in is None:
            raise ValueError("kernel1_smem_bytes: version 8 needs c_in")
        e_width = (_round_up(output_size(width, stride), 4 if stride == 1 else 2) - 1) * stride + kernel_size
        groups, e_pitch = 256 // (chunk // 2), 60  # E's pixel pitch in halves (csrc/mbconv_v8.cuh V8Dw::LDE)
        m_pad = kernel1_v8_m_pad(height, width, kernel_size, stride, rows, images)
        if hk and -(-output_size(height, stride) // rows) <= 2:
            m_pad = _round_up(min(height, in_rows - kernel_size // 2) * width, 16)
        x_halves = m_pad * (k_pad + 8) if x_rows_padded_v8(c_in) else _round_up(m_pad * c_in + 8, 8)
        kk = kernel_size * kernel_size
        taps = 0 if tg else kk * chunk * 2 + chunk * 4 if dh else (kk + 1) * chunk * 4
        return ((x_tx_bytes_v8(m_pad, k_pad) if tx else x_halves * 2) + u_bytes_v8(k_pad, chunk, wg) + images * in_rows * e_width * e_pitch * 2
                + images * groups * chunk * 4 + taps + 8)
    if version == 8:
        version = 3
    x_and_u = (m_pad + chunk) * (k_pad + 8) * 2 if expand else 0
    if version == 1:  # E holds the band's image pixels
        return x_and_u + m_pad * (chunk + 8) * 2 + chunk * 4
    per_thread = 4 if stride == 1 else 2  # v2 and v3: E is a zero-bordered tile, WE wide
    e_width = (_round_up(output_size(width, stride), per_thread) - 1) * stride + kernel_size
    return x_and_u + in_rows * e_width * (chunk + 8) * 2 + chunk * 4


def output_size(size: int, stride: int) -> int:
    """Output side of a k x k convolution with padding k // 2 (k odd)."""
    return (size - 1) // stride + 1


def kernel1_taps_global(version: int, stride: int, kernel_size: int) -> bool:
    """Whether version 8's kernel 1 takes its taps from global memory (csrc/mbconv_v8.cuh launch_expand_dw_v8_hf):
    at stride 2, k = 5, in version 11 with the packed-fp16 epilogue, the HFMA2 depthwise and the bias in the MMA
    (CUDA_KERNELS_K1_TAPS_G, _DH2, _HFMA2, _BIAS_C: on unless 0 there), read at every call."""
    switches = (K1_TAPS_G_SWITCH, K1_DH2_SWITCH, K1_HFMA2_SWITCH, K1_BIAS_C_SWITCH)
    return version == 11 and stride == 2 and kernel_size == 5 and all(os.environ.get(s) != "0" for s in switches)


def kernel1_halo5_bands() -> bool:
    """Whether version 11's kernel 1 runs the static shapes of K1_HALO5_BANDS in their taller bands (csrc/mbconv_v8.cuh
    launch_expand_dw_v8_ur): CUDA_KERNELS_K1_HALO5 at 2 (its default) and the static kernels on
    (CUDA_KERNELS_K1_STATIC, on unless 0), read at every call. (Where another kernel-1 switch takes such a block off
    the static route, its launch-value kernel runs the same bands, at one CTA an SM: the same D, slower.)"""
    return os.environ.get(K1_HALO5_SWITCH, "2") == "2" and os.environ.get(K1_STATIC_SWITCH) != "0"


def rows_override(height: int, width: int, kernel_size: int, stride: int) -> int | None:
    """The cap CUDA_KERNELS_K1_ROWS sets on kernel 1's band rows for this input shape, or None (unset, or another
    shape). ValueError for an entry that is not HxWkKsS=R with R >= 1."""
    text = os.environ.get(K1_ROWS_SWITCH, "").strip()
    for entry in filter(None, (e.strip() for e in text.split(","))):
        key, sep, value = entry.partition("=")
        if not (sep and re.fullmatch(r"\d+x\d+k\d+s\d+", key) and value.isdigit() and int(value) >= 1):
            raise ValueError(f"{K1_ROWS_SWITCH}: {entry!r}: expected HxWkKsS=ROWS, e.g. 28x28k5s1=7")
        if key == f"{height}x{width}k{kernel_size}s{stride}":
            return int(value)
    return None


@functools.lru_cache(maxsize=4096)
def band_rows(height: int, width: int, kernel_size: int, stride: int, k_pad: int, chunk: int,
              expand: bool, version: int = DEFAULT_VERSION, c_in: int | None = None,
              taps_global: bool = False, rows_max: int | None = None) -> int:
    """Output rows per band of kernel 1: the tallest band that fits the budget (and `rows_max`), then evened
    out over the bands. Raises ValueError when one row does not fit. `taps_global`: version 8's kernel 1 without its
    shared taps (CUDA_KERNELS_K1_TAPS_G, which the launcher honours at stride 2 with the packed-fp16 epilogue)."""
    out_h = output_size(height, stride)
    out_h_cap = out_h if rows_max is None else min(out_h, rows_max)
    budgets = (SMEM_BUDGET, SMEM_MAX)
    if version == 4 and kernel_size == 3:
        budgets = (SMEM_BUDGET_4_CTAS, *budgets)
    for budget in budgets:
        fits = [r for r in range(1, out_h_cap + 1)
                if kernel1_smem_bytes(r, height, width, kernel_size, stride, k_pad, chunk, expand, version,
                                      c_in, dh=taps_global, tg=taps_global) <= budget]
        if fits:
            bands = -(-out_h // max(fits))
            return -(-out_h // bands)
    raise ValueError(f"mbconv: a band of one output row of a {height}x{width} input needs more than "
                     f"{SMEM_MAX} bytes of shared memory")


# ---- the block as plain tensors, and its reference ----

@dataclass(frozen=True)
class MBConvParams:
    """An inference-form MBConv: PyTorch convolution weights (BN folded), biases, stride."""

    expand_w: torch.Tensor | None  # [hidden, C_in, 1, 1]; None for expand ratio 1
    expand_b: torch.Tensor | None
    dw_w: torch.Tensor  # [hidden, 1, k, k]
    dw_b: torch.Tensor
    se1_w: torch.Tensor  # [squeeze, hidden, 1, 1]
    se1_b: torch.Tensor
    se2_w: torch.Tensor  # [hidden, squeeze, 1, 1]
    se2_b: torch.Tensor
    project_w: torch.Tensor  # [C_out, hidden, 1, 1]
    project_b: torch.Tensor
    stride: int
    residual: bool

    @property
    def hidden(self) -> int:
        return self.dw_w.shape[0]

    @property
    def in_channels(self) -> int:
        return self.hidden if self.expand_w is None else self.expand_w.shape[1]

    @property
    def out_channels(self) -> int:
        return self.project_w.shape[0]

    @property
    def kernel_size(self) -> int:
        return self.dw_w.shape[-1]


def reference(x: torch.Tensor, p: MBConvParams) -> torch.Tensor:
    """The block in PyTorch operations, in x's dtype."""
    h = x if p.expand_w is None else F.silu(F.conv2d(x, p.expand_w, p.expand_b))
    h = F.silu(F.conv2d(h, p.dw_w, p.dw_b, p.stride, p.kernel_size // 2, groups=p.hidden))
    s = F.silu(F.conv2d(h.mean((2, 3), keepdim=True), p.se1_w, p.se1_b))
    h = h * torch.sigmoid(F.conv2d(s, p.se2_w, p.se2_b))
    y = F.conv2d(h, p.project_w, p.project_b)
    return y + x if p.residual else y


def _mbconv_class():
    from torchvision.models.efficientnet import MBConv

    return MBConv


def _conv_act(layer: nn.Module, activation: type | None) -> tuple[nn.Conv2d | None, str | None]:
    """(conv, None) for a folded Conv2dNormActivation with this activation, else (None, why)."""
    if not isinstance(layer, nn.Sequential) or not isinstance(layer[0], nn.Conv2d):
        return None, f"unexpected layer {type(layer).__name__}"
    if len(layer) < 2 or not isinstance(layer[1], nn.Identity):
        return None, "not in inference form (fold batchnorm first)"
    act = layer[2] if len(layer) > 2 else None
    if (activation is None) != (act is None) or (act is not None and type(act) is not activation):
        return None, f"activation {type(act).__name__} (the kernel has {getattr(activation, '__name__', None)})"
    return layer[0], None


def _parse(block: nn.Module) -> tuple[MBConvParams | None, str | None]:
    """The parameters of a folded torchvision MBConv, or None and why the kernel cannot run it."""
    from torchvision.ops.misc import SqueezeExcitation

    if not isinstance(block, _mbconv_class()):
        return None, f"not a torchvision MBConv ({type(block).__name__})"
    if block.training:
        return None, "training mode (the kernel computes inference only)"
    layers = list(block.block)
    if len(layers) not in (3, 4):
        return None, f"{len(layers)} layers (expected [expand,] depthwise, SE, project)"
    expand = None
    if len(layers) == 4:
        expand, why = _conv_act(layers[0], nn.SiLU)
        if why:
            return None, f"expand: {why}"
    dw, why = _conv_act(layers[-3], nn.SiLU)
    if why:
        return None, f"depthwise: {why}"
    project, why = _conv_act(layers[-1], None)
    if why:
        return None, f"project: {why}"
    for name, conv in (("expand", expand), ("project", project)):
        if conv is not None and (conv.kernel_size != (1, 1) or conv.stride != (1, 1) or conv.groups != 1):
            return None, f"{name}: not a plain 1x1 convolution"
    se = layers[-2]
    if not isinstance(se, SqueezeExcitation) or type(se.activation) is not nn.SiLU \
            or type(se.scale_activation) is not nn.Sigmoid:
        return None, "squeeze-excitation is not avgpool -> SiLU -> sigmoid"
    k, stride = dw.kernel_size[0], dw.stride[0]
    hidden = dw.out_channels
    if dw.kernel_size != (k, k) or k not in KERNEL_SIZES:
        return None, f"depthwise kernel {dw.kernel_size} (kernels for k in {KERNEL_SIZES})"
    if dw.stride != (stride, stride) or stride not in STRIDES:
        return None, f"stride {dw.stride} (kernels for {STRIDES})"
    if dw.groups != hidden or dw.in_channels != hidden or dw.padding != (k // 2, k // 2) or dw.dilation != (1, 1):
        return None, "the k x k conv is not depthwise with padding k // 2"
    c_in = expand.in_channels if expand is not None else hidden
    for name, c in (("C_in", c_in), ("hidden", hidden), ("C_out", project.out_channels)):
        if c % CHANNEL_MULTIPLE:
            return None, f"{name}={c} is not a multiple of {CHANNEL_MULTIPLE}"

    def wb(conv: nn.Conv2d) -> tuple[torch.Tensor, torch.Tensor]:
        bias = conv.bias if conv.bias is not None else torch.zeros(conv.out_channels, dtype=conv.weight.dtype,
                                                                   device=conv.weight.device)
        return conv.weight.detach(), bias.detach()

    params = MBConvParams(*(wb(expand) if expand is not None else (None, None)), *wb(dw), *wb(se.fc1), *wb(se.fc2),
                          *wb(project), stride, bool(block.use_res_connect))
    return params, None


def block_params(block: nn.Module) -> MBConvParams:
    """The parameters of a folded torchvision MBConv; ValueError with the reason otherwise."""
    params, why = _parse(block)
    if params is None:
        raise ValueError(f"cannot run this block on the MBConv kernel: {why}")
    return params


# ---- kernel-ready weights ----

@dataclass(frozen=True)
class MBConvWeights:
    """Weights packed for the kernels (csrc/mbconv_bindings.cpp), zero-padded to their tiles."""

    w_exp: torch.Tensor  # [hid_pad, k_pad] fp16; empty for expand ratio 1
    b_exp: torch.Tensor  # [hid_pad] fp32; empty for expand ratio 1
    w_dw: torch.Tensor  # [k*k, hid_pad] fp32
    b_dw: torch.Tensor  # [hid_pad] fp32
    w_se1: torch.Tensor  # [squeeze, hidden] fp32
    b_se1: torch.Tensor  # [max(squeeze, SE1_BIAS_MIN)] fp32, zero past squeeze
    w_se2: torch.Tensor  # [hidden, squeeze] fp32
    b_se2: torch.Tensor
    w_proj: torch.Tensor  # [cout_pad, hk_pad] fp16
    b_proj: torch.Tensor  # [cout_pad] fp32

    def tensors(self) -> list[torch.Tensor]:
        return [getattr(self, f.name) for f in fields(self)]


WEIGHT_FIELDS = tuple(f.name for f in fields(MBConvWeights))
# b_se1 is padded to at least this many floats: torch.compile with freezing materialises a constant of at most 8
# elements with a kernel of its own at every call (one warp; before B0's blocks 1.0, 2.0, 2.1 and 3.0, whose squeeze
# widths are 8, 4, 6 and 6: three 0.7-1.0 us Triton kernels in s19 call 2, each also a break in the PDL chain)
SE1_BIAS_MIN = 16


def prepare_weights(p: MBConvParams) -> MBConvWeights:
    """Pack once, so that a call launches only the kernels."""
    device, hidden, c_in, c_out, k = p.dw_w.device, p.hidden, p.in_channels, p.out_channels, p.kernel_size
    hid_pad = _round_up(hidden, chunk_for(hidden))

    def padded(t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        out = torch.zeros(shape, dtype=dtype, device=device)
        out[tuple(slice(0, s) for s in t.shape)] = t.detach().to(dtype)
        return out

    f32 = torch.float32
    if p.expand_w is None:
        w_exp = torch.empty(0, dtype=torch.float16, device=device)
        b_exp = torch.empty(0, dtype=f32, device=device)
    else:
        w_exp = padded(p.expand_w.reshape(hidden, c_in), (hid_pad, _round_up(c_in, 16)), torch.float16)
        b_exp = padded(p.expand_b, (hid_pad,), f32)
    cout_pad = _round_up(c_out, PROJECT_TILE_N)
    return MBConvWeights(
        w_exp, b_exp,
        padded(p.dw_w.reshape(hidden, k * k).t(), (k * k, hid_pad), f32), padded(p.dw_b, (hid_pad,), f32),
        p.se1_w.detach().reshape(-1, hidden).to(f32).contiguous(),
        padded(p.se1_b, (max(p.se1_b.numel(), SE1_BIAS_MIN),), f32),
        p.se2_w.detach().reshape(hidden, -1).to(f32).contiguous(), p.se2_b.detach().to(f32).contiguous(),
        padded(p.project_w.reshape(c_out, hidden), (cout_pad, _round_up(hidden, PROJECT_TILE_K)), torch.float16),
        padded(p.project_b, (cout_pad,), f32),
    )


# ---- host-side checks and the operator ----

def check_input(x: torch.Tensor, in_channels: int) -> None:
    """ValueError unless x is what the kernels read: [N, C_in, H, W] in channels_last memory,
    float16, on a CUDA device, 16-byte aligned."""
    if x.dim() != 4 or x.shape[1] != in_channels or x.numel() == 0:
        raise ValueError(f"mbconv: x must be a non-empty [N, {in_channels}, H, W], got {tuple(x.shape)}")
    if not x.is_contiguous(memory_format=torch.channels_last):
        raise ValueError("mbconv: x must be in torch.channels_last memory format (NHWC)")
    if x.dtype != torch.float16:
        raise ValueError(f"mbconv: x must be float16, got {x.dtype}")
    if not x.is_cuda:
        raise ValueError(f"mbconv: x must be on a CUDA device, got {x.device}")
    if x.data_ptr() % 16:
        raise ValueError("mbconv: x must be 16-byte aligned")


def _extension():
    from cuda_kernels._build import load_mbconv_extension

    return load_mbconv_extension()


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


@functools.lru_cache(maxsize=None)
def _warn_fallback(version: int, capability: tuple[int, int]) -> None:  # once per version and kind of GPU
    warnings.warn(f"MBConv version {version} needs compute capability 9.0 (Hopper); this GPU is "
                  f"{capability[0]}.{capability[1]}, so version {FALLBACK_VERSION} runs instead", stacklevel=3)


def runnable_version(version: int, device: torch.device) -> int:
    """`version`, or FALLBACK_VERSION where it needs a newer GPU than `device` (SM90_VERSIONS)."""
    if version not in SM90_VERSIONS or device.type != "cuda":
        return version
    capability = _capability(device.index if device.index is not None else torch.cuda.current_device())
    if capability >= (9, 0):
        return version
    _warn_fallback(version, capability)
    return FALLBACK_VERSION


def _launch(x: torch.Tensor, tensors: list[torch.Tensor], kernel_size: int, stride: int, out_channels: int,
            residual: bool, version: int = DEFAULT_VERSION, out: torch.Tensor | None = None) -> torch.Tensor:
    w_exp, hidden = tensors[0], tensors[6].shape[0]  # w_exp, w_se2
    check_input(x, x.shape[1])  # the channel count against the weights is the binding's check
    version = runnable_version(version, x.device)
    expand = w_exp.numel() > 0
    chunk = chunk_for(hidden)
    _, _, height, width = x.shape
    override = rows_override(height, width, kernel_size, stride)
    rows = band_rows(height, width, kernel_size, stride, w_exp.shape[1] if expand else 0, chunk, expand, version,
                     x.shape[1], kernel1_taps_global(version, stride, kernel_size), override)
    if version == 11 and expand and override is None and kernel1_halo5_bands():  # the taller bands of kV8HaloBands
        rows = K1_HALO5_BANDS.get((height, width, kernel_size, stride, x.shape[1], w_exp.shape[1], hidden), rows)
    out_nhwc = torch.empty(0, dtype=x.dtype, device=x.device) if out is None else out.permute(0, 2, 3, 1)
    y = _extension().mbconv(x.permute(0, 2, 3, 1), *tensors, kernel_size, stride, out_channels, rows, chunk,
                            residual, out_nhwc, KERNEL_VERSION[version], _pdl.enabled())
    return y.permute(0, 3, 1, 2)


@torch.library.custom_op("block_fusion::mbconv", mutates_args=())
def mbconv_op(x: torch.Tensor, w_exp: torch.Tensor, b_exp: torch.Tensor, w_dw: torch.Tensor, b_dw: torch.Tensor,
              w_se1: torch.Tensor, b_se1: torch.Tensor, w_se2: torch.Tensor, b_se2: torch.Tensor,
              w_proj: torch.Tensor, b_proj: torch.Tensor, kernel_size: int, stride: int, out_channels: int,
              residual: bool, version: int) -> torch.Tensor:
    """The fused block as one PyTorch operator (x channels-last float16; packed weights)."""
    tensors = [w_exp, b_exp, w_dw, b_dw, w_se1, b_se1, w_se2, b_se2, w_proj, b_proj]
    return _launch(x, tensors, kernel_size, stride, out_channels, residual, version)


@mbconv_op.register_fake
def _mbconv_fake(x, w_exp, b_exp, w_dw, b_dw, w_se1, b_se1, w_se2, b_se2, w_proj, b_proj, kernel_size, stride,
                 out_channels, residual, version):
    n, _, h, w = x.shape
    return torch.empty((n, out_channels, output_size(h, stride), output_size(w, stride)), dtype=x.dtype,
                       device=x.device, memory_format=torch.channels_last)


def mbconv(x: torch.Tensor, params: MBConvParams, weights: MBConvWeights | None = None,
           out: torch.Tensor | None = None, version: int = DEFAULT_VERSION) -> torch.Tensor:
    """Run the fused block on x (float16, channels_last, CUDA); into `out` (channels_last,
    [N, C_out, Ho, Wo], not overlapping x) when given."""
    check_input(x, params.in_channels)
    weights = prepare_weights(params) if weights is None else weights
    args = (params.kernel_size, params.stride, params.out_channels, params.residual, version)
    return _launch(x, weights.tensors(), *args, out=out)


# ---- the drop-in module ----

class FusedMBConv(nn.Module):
    """A folded torchvision ``MBConv`` on the fused kernels (one ``block_fusion::mbconv`` op).

    Its packed weights are non-persistent buffers, so they follow ``.to()`` and torch.compile
    sees them."""

    def __init__(self, params: MBConvParams, version: int = DEFAULT_VERSION):
        super().__init__()
        self.version = version
        self.in_channels, self.out_channels = params.in_channels, params.out_channels
        self.kernel_size, self.stride, self.residual = params.kernel_size, params.stride, params.residual
        for name, tensor in zip(WEIGHT_FIELDS, prepare_weights(params).tensors()):
            self.register_buffer(name, tensor, persistent=False)

    @staticmethod
    def unsupported(block: nn.Module) -> str | None:
        """Why the kernel cannot run this (folded) torchvision MBConv, or None if it can."""
        return _parse(block)[1]

    @classmethod
    def from_block(cls, block: nn.Module) -> "FusedMBConv":
        return cls(block_params(block))

    @staticmethod
    def block_class() -> type:
        """The PyTorch block this module replaces (torchvision's MBConv)."""
        return _mbconv_class()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tensors = [getattr(self, n) for n in WEIGHT_FIELDS]
        args = (self.kernel_size, self.stride, self.out_channels, self.residual, self.version)
        x = x.contiguous(memory_format=torch.channels_last)
        if torch.compiler.is_compiling():  # one opaque operator in the graph
            return mbconv_op(x, *tensors, *args)
        return _launch(x, tensors, *args)  # eager: the operator's dispatch costs ~20 us of CPU per call

    def extra_repr(self) -> str:
        return (f"{self.in_channels}->{self.out_channels}, k={self.kernel_size}, stride={self.stride}, "
                f"residual={self.residual}, version={self.version}")
