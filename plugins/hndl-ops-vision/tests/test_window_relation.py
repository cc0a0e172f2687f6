"""convolution.window_relation against the plain statement of its rule: every axis applies the
equation forward, then inverts the output it reads as an interval. The relation skips axes that
teach nothing and reads shapes again only when it must; on random graphs (unknown inputs,
square ties between axes, branches, contradictions) both must give the same plan or error."""

import random

import pytest
from torch import nn

from hndl import Arg, HNDLError, Registry, resolve
from hndl_ops_vision.convolution import conv_input_interval, conv_output, spatial_windows, window_relation


def _windows(s):
    args = s.args
    return spatial_windows(args["kernel_size"], args["stride"], args["padding"], args["dilation"])


def plain_window_relation(s) -> None:
    """The rule as first written: read every shape afresh, assert forward, then backward."""
    x, out = s.shape("x"), s.shape("out")
    if x is None or out is None:
        return
    for axis, k, st, p, d in _windows(s):
        extent = s.shape("x")[axis]
        if extent is not None:
            produced = conv_output(extent, k, st, p, d)
            if produced < 1:
                s.error("E_CONSTRAINT", f"input extent {extent} on axis {axis} is too small for kernel {k}, dilation {d}, padding {p}")
            s.axis("out", axis, produced)
        result = s.shape("out")[axis]
        if result is not None:
            s.interval("x", axis, *conv_input_interval(result, k, st, p, d))


def registry_with(relation) -> Registry:
    registry = Registry.builtins()

    @registry.operator(
        "win", summary="A window over [B, C, H, W].", shape="x[B, C, H, W] -> out[B, C, H_out, W_out]",
        relation=relation,
        args={name: Arg("pair", default, min=low, positional=False, help=name)
              for name, default, low in (("kernel_size", 1, 1), ("stride", 1, 1), ("padding", 0, 0), ("dilation", 1, 1))},
    )
    class Window(nn.Module):
        def __init__(self, **args):
            super().__init__()

    @registry.operator("square", summary="Ties H to W.", shape="x[B, C, S, S] -> out[B, C, S, S]")
    class Square(nn.Module):
        pass

    return registry


FAST = registry_with(lambda s: window_relation(s, _windows(s)))
PLAIN = registry_with(plain_window_relation)


def outcome(source, input_shape, output_shape, registry):
    """The plan's JSON and description, or the error's code, text, chain, location and remedies."""
    try:
        plan = resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry)
    except HNDLError as error:
        return ("error", error.code, str(error), error.chain, str(error.location), error.remedies)
    return ("plan", plan.to_json(), plan.describe())


def random_window(rng) -> str:
    pairs = {
        "kernel_size": (rng.randint(1, 4), rng.randint(1, 4)),
        "stride": (rng.randint(1, 3), rng.randint(1, 3)),
        "padding": (rng.randint(0, 2), rng.randint(0, 2)),
        "dilation": (rng.randint(1, 2), rng.randint(1, 2)),
    }
    return "win(" + ", ".join(f"{name}={value}" for name, value in pairs.items()) + ")"


def random_case(rng):
    lines = []
    if rng.random() < 0.4:
        lines += ["linear()", "reshape(3)"]  # an input whose spatial extents are unknown
        input_shape = ("B", rng.choice((12, 27, 48, 75)))
    else:
        side = rng.randint(4, 12)
        input_shape = ("B", 3, side, rng.choice((side, side + 1, 2 * side)))
    for _ in range(rng.randint(1, 3)):
        lines.append(random_window(rng) if rng.random() < 0.75 else "square()")
    if rng.random() < 0.7:
        output_shape = ("B", 3, rng.randint(1, 12), rng.randint(1, 12))
    else:  # the last window's output stays unknown: only its input can fix it
        lines.append("adaptive_avg_pool(1)")
        output_shape = ("B", 3, 1, 1)
    return "\n".join(lines), input_shape, output_shape


def test_random_graphs_resolve_as_the_plain_rule_does():
    rng = random.Random(20)
    kinds = set()
    for _ in range(300):
        source, input_shape, output_shape = random_case(rng)
        fast = outcome(source, input_shape, output_shape, FAST)
        assert fast == outcome(source, input_shape, output_shape, PLAIN), source
        kinds.add(fast[0] if fast[0] == "plan" else fast[1])
    assert kinds == {"plan", "E_CONSTRAINT", "E_AMBIGUOUS"}  # the cases reach every path, and only these


@pytest.mark.parametrize(
    "source, input_shape, output_shape, expected",
    [
        # both axes known and agreeing on every sweep
        ("win(kernel_size=3, padding=1)\nwin(kernel_size=3, padding=1)", ("B", 3, 8, 8), ("B", 3, 8, 8), "plan"),
        # a known output that disagrees with the produced extent, on the second axis only
        ("win(kernel_size=3)", ("B", 3, 8, 8), ("B", 3, 6, 5), "E_CONSTRAINT"),
        # an input too small for the window
        ("win(kernel_size=4, dilation=2)\nadaptive_avg_pool(1)", ("B", 3, 5, 9), ("B", 3, 1, 1), "E_CONSTRAINT"),
        # backward: stride 1 fixes H's input, and the square tie picks W's input from its interval
        ("linear()\nreshape(3)\nsquare()\nwin(kernel_size=(3, 1), stride=(1, 2))", ("B", 10), ("B", 3, 8, 5), "plan"),
        # backward through a tie where the axes' intervals do not meet
        ("linear()\nreshape(3)\nsquare()\nwin(kernel_size=(1, 3), stride=(2, 1))", ("B", 10), ("B", 3, 4, 9), "E_CONSTRAINT"),
    ],
)
def test_chosen_graphs_resolve_as_the_plain_rule_does(source, input_shape, output_shape, expected):
    fast = outcome(source, input_shape, output_shape, FAST)
    assert fast == outcome(source, input_shape, output_shape, PLAIN)
    assert (fast[0] if fast[0] == "plan" else fast[1]) == expected
