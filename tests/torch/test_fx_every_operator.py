"""torch.fx's symbolic tracer records a network of every first-party operator (issue 28: every tool a
researcher applies must work), and the recorded program computes what the network computes.

Under fx the values are proxies, so an operator may not decide in Python on a traced size or dtype:
the attention kernels choose torch's math kernel for float64 inside one function fx records as a
call (``attend``), shapes are indexed rather than unpacked, and per-channel broadcasts use an index
fixed at build. Each first example of every operator of the basic, vision and transformer packs is
built, traced and run in eval mode on the same inputs.
"""

from __future__ import annotations

import pytest
import torch

from hndl import Registry
from hndl.torch import network

REGISTRY = Registry.from_packs("basic", "vision", "transformer")
CASES = [(alias, REGISTRY.get(alias).examples[0]) for alias in REGISTRY.aliases()]


def _inputs(plan) -> dict:
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for port in plan.inputs:
        extents = [2 if isinstance(entry, str) else entry for entry in port["shape"]]
        if port["dtype"] in ("int64", "int32", "bool"):
            tensors[port["name"]] = torch.randint(0, 2, extents, generator=generator).to(getattr(torch, port["dtype"]))
        else:
            tensors[port["name"]] = torch.randn(extents, generator=generator)
    return tensors


@pytest.mark.parametrize("alias, example", CASES, ids=[alias for alias, _ in CASES])
def test_fx_traces_the_first_example_of_every_operator_and_computes_the_same(alias, example):
    contract = dict(input_shape=example.input_shape, output_shape=example.output_shape)
    if example.input_dtype:
        contract["input_dtype"] = example.input_dtype
    model = network(example.source, **contract, device="cpu", registry=REGISTRY, initialization_seed=0).eval()
    inputs = _inputs(model.plan)
    traced = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        expected, got = model(**inputs), traced(**inputs)
    for want, have in zip(*(value.values() if isinstance(value, dict) else (value,) for value in (expected, got))):
        torch.testing.assert_close(have, want)
