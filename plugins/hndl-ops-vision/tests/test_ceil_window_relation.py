"""pooling.ceil_window_relation (ceil_mode) against plain statements of its rule.

The closed form O = ceil((I + m) / s), m = min(2p - d(k - 1) - 1 + s, p) must equal torch's own
steps (round up, then drop a last window that starts in the right padding) and torch's actual
output sizes; the inverse interval must hold exactly the inputs that produce an output; and on
random graphs the relation (which skips axes that teach nothing and reads shapes again only when
it must) must give the same plan or error as the rule written out plainly."""

import itertools
import random

import torch
import torch.nn.functional as F
from torch import nn

from hndl import Arg, HNDLError, Registry, resolve
from hndl_ops_vision.convolution import spatial_windows
from hndl_ops_vision.pooling import ceil_input_interval, ceil_output, ceil_window_relation


def torch_steps(extent, k, s, p, d):
    """pooling_output_shape in ATen, ceil branch, step by step."""
    size = -(-(extent + 2 * p - d * (k - 1) - 1) // s) + 1
    if (size - 1) * s >= extent + p:
        size -= 1
    return size


def admissible():
    """Window parameters torch accepts (padding at most half the kernel), small enough to sweep."""
    for k, s, p, d in itertools.product(range(1, 6), range(1, 5), range(0, 3), range(1, 3)):
        if 2 * p <= k:
            yield k, s, p, d


def test_the_closed_form_is_torchs_steps_and_torchs_sizes():
    for k, s, p, d in admissible():
        for extent in range(1, 25):
            assert ceil_output(extent, k, s, p, d) == torch_steps(extent, k, s, p, d), (extent, k, s, p, d)
        for extent in range(1, 12):
            try:
                size = F.max_pool1d(torch.zeros(1, 1, extent), k, s, p, d, ceil_mode=True).shape[2]
            except RuntimeError:  # torch: output size too small
                size = 0
            assert max(ceil_output(extent, k, s, p, d), 0) == size, (extent, k, s, p, d)


def test_the_interval_holds_exactly_the_inputs_of_an_output():
    for k, s, p, d in admissible():
        by_output = {}
        for extent in range(1, 60):
            by_output.setdefault(ceil_output(extent, k, s, p, d), []).append(extent)
        for out in range(1, 12):
            low, high = ceil_input_interval(out, k, s, p, d)
            assert list(range(low, high + 1)) == by_output.get(out, []), (out, k, s, p, d)
            assert high - low + 1 <= s


def _windows(s):
    args = s.args
    return spatial_windows(args["kernel_size"], args["stride"], args["padding"], args["dilation"])


def plain_ceil_relation(s) -> None:
    """The rule as first written: read every shape afresh, assert forward, then backward."""
    x, out = s.shape("x"), s.shape("out")
    if x is None or out is None:
        return
    for axis, k, st, p, d in _windows(s):
        extent = s.shape("x")[axis]
        if extent is not None:
            produced = ceil_output(extent, k, st, p, d)
            if produced < 1:
                s.error("E_CONSTRAINT", f"input extent {extent} on axis {axis} is too small for kernel {k}, "
                                        f"dilation {d}, padding {p} even in ceil mode")
            s.axis("out", axis, produced)
        result = s.shape("out")[axis]
        if result is not None:
            s.interval("x", axis, *ceil_input_interval(result, k, st, p, d))


def registry_with(relation) -> Registry:
    registry = Registry.builtins()

    @registry.operator(
        "win", summary="A ceil-mode window over [B, C, H, W].", shape="x[B, C, H, W] -> out[B, C, H_out, W_out]",
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


FAST = registry_with(lambda s: ceil_window_relation(s, _windows(s)))
PLAIN = registry_with(plain_ceil_relation)


def outcome(source, input_shape, output_shape, registry):
    """The plan's JSON and description, or the error's code, text, chain, location and remedies."""
    try:
        plan = resolve(source, input_shape=input_shape, output_shape=output_shape, registry=registry)
    except HNDLError as error:
        return ("error", error.code, str(error), error.chain, str(error.location), error.remedies)
    return ("plan", plan.to_json(), plan.describe())


def random_window(rng) -> str:
    kernel = (rng.randint(1, 4), rng.randint(1, 4))
    pairs = {
        "kernel_size": kernel,
        "stride": (rng.randint(1, 3), rng.randint(1, 3)),
        "padding": (rng.randint(0, kernel[0] // 2), rng.randint(0, kernel[1] // 2)),
        "dilation": (rng.randint(1, 2), rng.randint(1, 2)),
    }
    return "win(" + ", ".join(f"{name}={value}" for name, value in pairs.items()) + ")"


def random_case(rng):
    lines = []
    if rng.random() < 0.4:
        lines += ["linear()", "reshape(3)"]  # an input whose spatial extents are unknown
        input_shape = ("B", rng.choice((12, 27, 48, 75)))
    else:
        side = rng.randint(1, 12)
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
    rng = random.Random(27)
    kinds = set()
    for _ in range(250):
        source, input_shape, output_shape = random_case(rng)
        fast = outcome(source, input_shape, output_shape, FAST)
        assert fast == outcome(source, input_shape, output_shape, PLAIN), source
        kinds.add(fast[0] if fast[0] == "plan" else fast[1])
    assert kinds == {"plan", "E_CONSTRAINT", "E_AMBIGUOUS"}  # the cases reach every path, and only these
