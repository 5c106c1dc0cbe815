"""The eager plan: the op plan plus the kernels eager PyTorch really launches (named rules)."""
import torch
import torchvision

import perfmodel


def _kernels(module, plan, shape=(3, 32, 32), batch=4):
    return perfmodel.analyze(module, shape, batch=batch, plan=plan, hardware="h200-sxm").kernels


def test_conv_bias_split_adds_a_bias_kernel_that_reads_and_writes_the_output():
    conv = torch.nn.Conv2d(3, 16, 3, padding=1, bias=True)
    [op] = _kernels(conv, "op")
    conv_k, add_k = _kernels(conv, "eager")
    x, out, w, b = 2 * 4 * 3 * 32 * 32, 2 * 4 * 16 * 32 * 32, 2 * 16 * 3 * 3 * 3, 2 * 16
    assert op.dram_bytes == x + w + b + out
    assert (conv_k.dram_bytes, conv_k.kernel.weight_bytes) == (x + w + out, w)
    assert add_k.dram_bytes == out + b + out and add_k.kernel.ops == ("bias add (conv-bias-split)",)
    # the arithmetic stays with the convolution: 2 ops per MAC and the 16 bias adds (eq. 22)
    assert conv_k.kernel.flops == 2 * 4 * 32 * 32 * 16 * 27 + 16 and add_k.kernel.flops == 0


def test_a_convolution_without_bias_and_other_ops_are_as_in_the_op_plan():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, bias=False), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(8 * 30 * 30, 10))
    op, eager = _kernels(net, "op"), _kernels(net, "eager")
    assert [k.dram_bytes for k in op] == [k.dram_bytes for k in eager]


def test_eager_plan_conserves_the_work_of_a_model():
    op = perfmodel.analyze_spec("convnext_tiny", plan="op", batch=2)
    eager = perfmodel.analyze_spec("convnext_tiny", plan="eager", batch=2)
    assert (eager.macs, eager.totals.flops) == (op.macs, op.totals.flops)
    # ConvNeXt-T: the 4x4 stem, 18 depthwise 7x7 and 3 downsampling convolutions have biases
    assert len(eager.kernels) - len(op.kernels) == 1 + 18 + 3


def test_inductor_plan_splits_each_convolution_from_its_epilogue():
    """conv + batchnorm + ReLU: one kernel in the layer plan; under the inductor plan the
    library convolution writes its output and a separate epilogue kernel reads it, applies
    the folded batchnorm's bias and the ReLU, and writes it again."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1, bias=False),
                              torch.nn.BatchNorm2d(16), torch.nn.ReLU()).eval()
    [layer] = _kernels(net, "layer")
    conv, epilogue = _kernels(net, "inductor")
    x, out, w, b = 2 * 4 * 3 * 32 * 32, 2 * 4 * 16 * 32 * 32, 2 * 16 * 27, 2 * 16
    assert layer.dram_bytes == x + w + b + out
    assert conv.dram_bytes == x + w + out and conv.kernel.ops == ("convolution",)
    assert epilogue.dram_bytes == out + b + out
    assert conv.kernel.flops + epilogue.kernel.flops == layer.kernel.flops == 2 * 4 * 1024 * 16 * 27 + 16


def test_inductor_plan_on_resnet50_splits_every_convolution():
    """ResNet-50's 53 convolutions each carry a fused epilogue in the layer plan (56 kernels:
    the convolutions, max pool, average pool, fc): 53 more kernels, less 4 for epilogue-merge
    (in each of the 4 downsampling bottlenecks the last convolution's batchnorm joins the
    shortcut's batchnorm, add and ReLU). Nsight Compute counted 106 (fidelity/)."""
    layer = perfmodel.analyze_spec("resnet50", plan="layer", batch=2)
    inductor = perfmodel.analyze_spec("resnet50", plan="inductor", batch=2)
    assert (len(layer.kernels), len(inductor.kernels)) == (56, 56 + 53 - 4)
    merged = [k.kernel.ops for k in inductor.kernels if k.kernel.name == "layer1.0.downsample.0"]
    assert merged == [("convolution",), ("native_batch_norm", "native_batch_norm", "add_", "relu_")]
    assert inductor.macs == layer.macs and inductor.totals.t_min_s > layer.totals.t_min_s


def test_each_eager_batchnorm_brings_two_small_parameter_kernels():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1, bias=False),
                              torch.nn.BatchNorm2d(16), torch.nn.ReLU()).eval()
    op, eager = _kernels(net, "op"), _kernels(net, "eager")
    assert [k.kernel.ops for k in op] == [("convolution",), ("native_batch_norm",), ("relu",)]
    assert [k.kernel.ops[0] for k in eager] == [
        "convolution", "batchnorm parameters (bn-stat-kernels)",
        "batchnorm parameters (bn-stat-kernels)", "native_batch_norm", "relu"]
    params = 2 * 4 * 16  # weight, bias, running mean and variance: 16 channels in fp16
    assert all(k.dram_bytes == 2 * params for k in eager[1:3])
    assert eager[3].dram_bytes == op[1].dram_bytes


def test_eager_plan_counts_the_kernels_eager_resnet50_launches():
    """Nsight Compute counted 282 kernels in one eager ResNet-50 pass (committed rows): the op
    plan's 174 plus two per batchnorm (53) make 280."""
    eager = perfmodel.analyze_spec("resnet50", plan="eager", batch=2)
    op = perfmodel.analyze_spec("resnet50", plan="op", batch=2)
    assert (len(op.kernels), len(eager.kernels)) == (174, 174 + 2 * 53)


def test_eager_max_pool_writes_its_int64_indices():
    """Rule dead-outputs-written: eager's max pool writes the unused indices too (8 bytes an
    element beside the fp16 output's 2); the layer plan never materialises them."""
    pool = torch.nn.MaxPool2d(3, stride=2, padding=1)
    [eager] = _kernels(pool, "eager", shape=(16, 32, 32))
    [layer] = _kernels(pool, "layer", shape=(16, 32, 32))
    x, out = 2 * 4 * 16 * 32 * 32, 4 * 16 * 16 * 16
    assert eager.kernel.output_bytes == 2 * out + 8 * out and eager.dram_bytes == x + 10 * out
    assert layer.dram_bytes == x + 2 * out


class _Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(64, 4, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def test_eager_multihead_attention_runs_its_fused_fast_path():
    """Rule mha-fast-path: three kernels (in-projection with its bias, attention, output
    projection), each reading and writing what the fused path does: attention reads q, k and
    v (the whole 3x projection) and writes one output."""
    eager = _kernels(_Attention().eval(), "eager", shape=(10, 64), batch=2)
    assert [k.kernel.ops[0] for k in eager] == ["bmm", "scaled_dot_product_attention", "addmm"]
    tokens = 2 * 10
    qkv, out = 2 * tokens * 3 * 64, 2 * tokens * 64
    attention = eager[1].kernel
    assert (attention.input_bytes, attention.output_bytes) == (qkv, out)
    assert eager[0].kernel.output_bytes == qkv
    assert eager[0].kernel.weight_bytes == 2 * (3 * 64 * 64 + 3 * 64)


class _SqueezeExcite(torch.nn.Module):
    """conv -> batchnorm -> SiLU -> squeeze-excitation, as in an MBConv block."""

    def __init__(self, c=8, squeeze=2):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False)
        self.bn, self.act = torch.nn.BatchNorm2d(c), torch.nn.SiLU()
        self.se = torchvision.ops.SqueezeExcitation(c, squeeze)

    def forward(self, x):
        return self.se(self.act(self.bn(self.conv(x))))


def test_inductor_fuses_the_se_pool_into_the_batchnorm_kernel_and_stores_it_in_float32():
    """se-pool-fusion: [bn, SiLU] and [mean] become one reduction kernel that stores the
    batchnorm output in float32 (2 x the fp16 activation) and the pooled means; the SE scale
    kernel reads that float32 tensor instead of the fp16 activation."""
    net = _SqueezeExcite().eval()
    layer_plan = [k.kernel for k in _kernels(net, "layer", shape=(8, 16, 16))]
    kernels = [k.kernel for k in _kernels(net, "inductor", shape=(8, 16, 16))]
    # library-epilogue-split: 3 products lose their epilogues (+3); se-pool-fusion: -1
    act = 4 * 8 * 16 * 16  # activation elements, batch 4
    means = 4 * 8
    assert (len(layer_plan), len(kernels)) == (4, 4 + 3 - 1)
    red = next(k for k in kernels if "mean" in k.ops)
    assert red.ops[:2] == ("native_batch_norm", "silu") and red.ops[-1] == "mean"
    assert red.input_bytes == 2 * act and red.output_bytes == 4 * act + 2 * means
    scale = kernels[-1]
    assert scale.ops[-1] == "mul" and scale.input_bytes == 4 * act + 2 * means
    assert scale.output_bytes == 2 * act
    assert sum(k.flops for k in kernels) == sum(k.flops for k in layer_plan)


def test_inductor_freezing_stores_the_se_tensor_in_its_own_dtype():
    """inductor:freezing folds the batchnorm into the convolution, so the tensor the SE
    reduction stores for the scale kernel is the float16 biased convolution output."""
    net = _SqueezeExcite().eval()
    kernels = [k.kernel for k in _kernels(net, "inductor:freezing", shape=(8, 16, 16))]
    act, means = 4 * 8 * 16 * 16, 4 * 8
    red = next(k for k in kernels if "mean" in k.ops)
    assert red.output_bytes == 2 * act + 2 * means
    assert kernels[-1].input_bytes == 2 * act + 2 * means
    assert str(perfmodel.PlanSpec.parse("inductor:freezing")) == "inductor:freezing"


def test_the_inductor_plan_refuses_other_options():
    import pytest
    from perfmodel.errors import InputError
    with pytest.raises(InputError, match="only ':freezing'"):
        perfmodel.PlanSpec.parse("inductor:fast")
