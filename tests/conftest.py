"""Shared pytest set-up."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The course's test models are tiny: one intra-op thread runs them faster than two, and
    far faster when other processes share the CPU (torch's default is one thread per core)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
