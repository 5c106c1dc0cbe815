import pytest
import torch


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `cuda` cleanly on machines without a GPU."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA; no GPU on this machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
