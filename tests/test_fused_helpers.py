"""cuda_kernels._fused's launch helpers (CPU): the [pixels, C] rows the bindings take."""
import torch

from cuda_kernels._fused import nhwc_rows


def test_nhwc_rows_is_a_view_of_the_channels_last_tensor():
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float16).reshape(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    rows = nhwc_rows(x, x, 2 * 4 * 5, 3)
    assert rows.shape == (40, 3) and rows.data_ptr() == x.data_ptr()  # no copy
    # row = pixel (n, h, w) in raster order, column = channel: element (n=1, c=2, h=3, w=4)
    assert rows[1 * 20 + 3 * 5 + 4, 2] == x[1, 2, 3, 4] == 1 * 60 + 2 * 20 + 3 * 5 + 4


def test_nhwc_rows_of_none_asks_the_binding_to_allocate():
    x = torch.zeros(1, 8, 2, 2, dtype=torch.float16)
    empty = nhwc_rows(None, x, 4, 8)
    assert empty.numel() == 0 and empty.dtype == torch.float16 and empty.device == x.device
