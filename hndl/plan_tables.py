"""The shape table ``print(plan)`` and ``print(model)`` show (§7), read from any resolved plan.

A restored plan is untrusted text, so every cell and the header are shown with control characters
escaped (``hndl.errors.escaped``): printing the table never acts on the terminal or forges a row.
"""

from __future__ import annotations

from .errors import escaped
from .shape_text import format_shape


def is_unary_chain(plan) -> bool:
    """One input, one output, and every node reads exactly the previous node's only output."""
    if len(plan.inputs) != 1 or len(plan.outputs) != 1 or not plan.nodes:
        return False
    previous = f"input:{plan.inputs[0]['name']}"
    for node in plan.nodes:
        if len(node.inputs) != 1 or len(node.outputs) != 1:
            return False
        (ref,) = node.inputs.values()
        if ref != previous:
            return False
        previous = f"node:{node.id}/{node.outputs[0]}"
    return plan.output_ref == previous


def header(plan) -> str:
    """``Network: <inputs> -> <outputs>  dtype=...`` as §7 prints it, control characters escaped."""
    return escaped(_header(plan))


def _header(plan) -> str:
    differing = [port for port in plan.inputs if port["dtype"] != plan.dtype]
    if len(plan.inputs) == 1 and len(plan.outputs) == 1 and plan.inputs[0]["name"] == "x" and plan.outputs[0]["name"] == "output":
        text = f"Network: {format_shape(plan.input_shape)} -> {format_shape(plan.output_shape)}  dtype={plan.dtype}"
        if differing:
            text += f"  input_dtype={differing[0]['dtype']}"
        return text
    ins = ", ".join(f"{port['name']}={format_shape(port['shape'])}" for port in plan.inputs)
    outs = ", ".join(f"{port['name']}={format_shape(port['shape'])}" for port in plan.outputs)
    text = f"Network: {ins} -> {outs} dtype={plan.dtype}"
    if differing:
        text += " input_dtype=" + ",".join(f"{port['name']}:{port['dtype']}" for port in differing)
    return text


def shape_table(plan) -> str:
    """The header plus one aligned row per node (§7 "print(model)")."""
    if is_unary_chain(plan):
        rows = [["index", "name", "operation", "input shape", "output shape"]]
        for index, node in enumerate(plan.nodes):
            rows.append([
                str(index), node.id, node.alias,
                format_shape(next(iter(node.input_shapes.values()))),
                format_shape(next(iter(node.output_shapes.values()))),
            ])
    else:
        rows = [["name", "operation", "inputs", "outputs"]]
        for node in plan.nodes:
            ins = ", ".join(
                f"{port}={format_shape(node.input_shapes[port])} <- {ref}" for port, ref in node.inputs.items()
            )
            outs = ", ".join(f"{port}={format_shape(node.output_shapes[port])}" for port in node.outputs)
            rows.append([node.id, node.alias, ins, outs])
        if not plan.nodes:
            rows.append(["(identity)", "", "", ""])
    rows = [[escaped(cell) for cell in row] for row in rows]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = [header(plan)]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return "\n".join(lines)
