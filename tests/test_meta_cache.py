"""The trace's fast paths change nothing: cached meta outputs equal the meta kernel's, and
the argument walker equals torch's pytree."""
import torch
from torch.utils._pytree import tree_flatten, tree_map

from perfmodel.aten_args import map_tensors, tensors_in
from perfmodel.meta_cache import MetaCache

aten = torch.ops.aten


def _layout(out):
    return [(tuple(t.shape), t.stride(), t.dtype, t.device.type) for t in tree_flatten(out)[0]]


def test_a_repeated_call_is_served_from_the_cache_with_the_kernels_metadata():
    cache, calls = MetaCache(), []

    class Counting:  # an op that counts how often its kernel runs
        _schema = aten.native_batch_norm.default._schema
        is_view = False

        def __call__(self, *args, **kwargs):
            calls.append(1)
            return aten.native_batch_norm.default(*args, **kwargs)

    op = Counting()
    w = torch.empty(16, device="meta", dtype=torch.float16)
    for fmt in (torch.contiguous_format, torch.channels_last):
        x = torch.empty(8, 16, 5, 5, device="meta", dtype=torch.float16).to(memory_format=fmt)
        args = (x, w, w, w, w, False, 0.1, 1e-5)
        first, second = cache.run(op, args, {}), cache.run(op, args, {})
        assert _layout(second) == _layout(first) == _layout(op(*args))
        assert type(second) is type(first) and second[0] is not first[0]
    assert len(calls) == 2 + 2  # one kernel run per layout, plus the two reference calls


def test_views_and_in_place_ops_are_never_cached():
    cache = MetaCache()
    x = torch.empty(4, 6, device="meta")
    assert cache.run(aten.relu_.default, (x,), {}) is x
    assert cache.run(aten.view.default, (x, [24]), {})._base is x
    assert not cache._templates


def test_argument_walker_matches_pytree():
    a, b = torch.empty(2, 3, device="meta"), torch.empty(4, device="meta")
    values = torch.empty(3, 2).max(dim=1)  # a structseq, the way aten returns named results
    tree = ((a, [b, 1.5, None], {"k": a, "dtype": torch.float16}), values, "s")
    expected = [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]
    assert [id(t) for t in tensors_in(tree)] == [id(t) for t in expected]

    def shape(t):
        return tuple(t.shape)

    mapped = map_tensors(tree, shape)
    assert mapped == tree_map(lambda t: shape(t) if isinstance(t, torch.Tensor) else t, tree)
    assert type(mapped[1]) is type(values)
