"""torch.profiler (issue 28, item 4): a network is one module event holding its nodes' events.

``torch.profiler.profile(with_stack=True)`` records an ``nn.Module: <Class>_<n>`` event for every
``nn.Module.__call__``. A built network's ``__call__`` skips ``nn.Module.__call__`` when that would
do nothing but call ``forward``; under a profiler it must take the normal path, so the network
shows up like its handwritten twin: one ``nn.Module: Network_0`` event around the node events.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

import hndl
from hndl.torch import build, network

MLP = "linear(32)\nrelu()\nlinear()"
CONTRACT = {"input_shape": ("B", 16), "output_shape": ("B", 4)}
NODE_EVENTS = ["nn.Module: Linear_0", "nn.Module: ReLU_0", "nn.Module: Linear_1"]


def _module_events(model: nn.Module, call) -> tuple[list, object]:
    """The ``nn.Module:`` events of one profiled call, in start order, and the call's result."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's own notices about absent accelerators
        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as recorded:
            result = call()
    events = sorted((event for event in recorded.events() if event.name.startswith("nn.Module: ")),
                    key=lambda event: event.time_range.start)
    return events, result


def _within(event, outer) -> bool:
    """Whether ``event`` ran inside ``outer``: its time range, and ``outer`` among its parents."""
    parent = event.cpu_parent
    while parent is not None and parent is not outer:
        parent = parent.cpu_parent
    return parent is outer and outer.time_range.start <= event.time_range.start <= event.time_range.end <= \
        outer.time_range.end


def _twin(model: nn.Module) -> nn.Sequential:
    twin = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    twin.load_state_dict({"0.weight": model["n0"].weight, "0.bias": model["n0"].bias,
                          "2.weight": model["n2"].weight, "2.bias": model["n2"].bias})
    return twin


@pytest.mark.parametrize("calls_before", [0, 2], ids=["first call", "remembered signature"])
def test_the_network_is_one_module_event_holding_its_node_events_like_its_twin(calls_before):
    model = network(MLP, **CONTRACT, device="cpu", initialization_seed=0)
    twin = _twin(model)
    x = torch.randn(3, 16)
    for _ in range(calls_before):  # the second call takes the generated fast path
        model(x)
    twin_events, expected = _module_events(twin, lambda: twin(x))
    events, out = _module_events(model, lambda: model(x))
    assert [event.name for event in twin_events] == ["nn.Module: Sequential_0", *NODE_EVENTS]
    assert [event.name for event in events] == ["nn.Module: Network_0", *NODE_EVENTS]
    assert all(_within(event, events[0]) for event in events[1:])
    torch.testing.assert_close(out, expected)


def test_a_built_graph_module_shows_as_graph_module():
    graph = build(hndl.resolve(MLP, **CONTRACT), device="cpu")
    x = torch.randn(2, 16)
    graph(x=x)
    events, out = _module_events(graph, lambda: graph(x=x))
    assert [event.name for event in events] == ["nn.Module: GraphModule_0", *NODE_EVENTS]
    assert all(_within(event, events[0]) for event in events[1:])
    assert out["output"].shape == (2, 4)


def test_profiling_changes_no_value_and_the_fast_path_returns_afterwards():
    model = network(MLP, **CONTRACT, device="cpu", initialization_seed=0)
    x = torch.randn(3, 16)
    before = model(x)
    _, profiled = _module_events(model, lambda: model(x))
    torch.testing.assert_close(profiled, before, rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU]) as recorded:  # without stacks: no module events
            model(x)
    assert not [event for event in recorded.events() if event.name.startswith("nn.Module: ")]
    torch.testing.assert_close(model(x), before, rtol=0, atol=0)
