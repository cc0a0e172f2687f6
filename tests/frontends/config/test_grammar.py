"""The python_config@1 grammar: allowlist, budgets, name scoping and the statement IR."""

from __future__ import annotations

import ast
import dataclasses

import pytest

from hndl.errors import HNDLError
from hndl.frontends.config import grammar
from hndl.construction import SCHEME_NAMES
from hndl.frontends.config.grammar import parse_config
from hndl.frontends.config.ir import Assign, Call, Evaluate, Literal, Name, Pack, Pos, Program, SchemeCall
from hndl.frontends.config.source import load_text

ALIASES = frozenset(
    {
        "linear",
        "relu",
        "reshape",
        "concat",
        "conv",
        "leaky_relu",
        "flatten",
        "split",
        "add",
        "adaptive_norm",
        "deconv",
        "tanh",
    }
)


def parse(text: str, *, inputs=("x",), budgets=None, aliases=ALIASES) -> Program:
    kwargs = {} if budgets is None else {"budgets": budgets}
    return parse_config(load_text(text), aliases=aliases, inputs=inputs, **kwargs)


def fails(text: str, code: str, *, inputs=("x",), budgets=None, aliases=ALIASES) -> HNDLError:
    with pytest.raises(HNDLError) as info:
        parse(text, inputs=inputs, budgets=budgets, aliases=aliases)
    error = info.value
    assert error.code == code, str(error)
    assert error.remedies
    return error


def where(error: HNDLError) -> tuple:
    return error.location.line, error.location.column


# -- the spec's configuration examples, verbatim -----------------------------------------

MLP = """
linear(64)
relu()
linear()
"""

DISCRIMINATOR = """
plane = linear(y, 784, name="label_projection")
label = reshape(plane, 1, 28, 28, name="label_plane")
concat(x, label, name="conditioned")
conv(64, policy="down2", name="stage1")
leaky_relu(0.2)
features = flatten(name="features")
logits = linear(1, name="logits")
"""

BRANCH = """
# Split clears current; explicitly choose the next branch.
z1, z2 = split(64, name="partition")
linear(z1, 128, name="content")
features = relu(name="features")
style = linear(z2, 128, name="style")
add(features, style, name="combined")
"""

ADAPTIVE = """
z1, z2 = split(64)
linear(z1)
features = reshape(32, 4, 4)
adaptive_norm(features, z2)
"""

GENERATOR = """
linear()
relu()
reshape(512)
deconv(256, policy="up2")
relu()
deconv(128, policy="up2")
relu()
deconv(64, policy="up2")
relu()
conv(3, kernel_size=3, stride=1, padding=1)
tanh()
"""

INIT = """
relu()
linear(init={"weight": xavier_uniform(gain=1.0), "bias": 0}, trainable={"bias": False})
"""


def test_mlp_example():
    program = parse(MLP)
    assert [s.call.alias for s in program.statements] == ["linear", "relu", "linear"]
    first = program.statements[0]
    assert first == Evaluate(
        call=Call(alias="linear", args=(Literal(64, Pos(2, 8)),), kwargs=(), pos=Pos(2, 1)),
        pos=Pos(2, 1),
    )


def test_discriminator_example_with_named_inputs():
    program = parse(DISCRIMINATOR, inputs=("x", "y"))
    plane = program.statements[0]
    assert isinstance(plane, Assign) and plane.targets == ("plane",) and not plane.unpack
    assert plane.value.args[0] == Name("y", Pos(2, 16))
    assert plane.value.kwargs == (("name", Literal("label_projection", Pos(2, 29))),)
    assert program.statements[-1].targets == ("logits",)


def test_branch_example_with_split():
    program = parse(BRANCH)
    split = program.statements[0]
    assert split.targets == ("z1", "z2") and split.unpack
    assert split.pos == Pos(3, 1)  # the comment line keeps line numbers honest
    assert program.statements[-1].call.args == (Name("features", Pos(7, 5)), Name("style", Pos(7, 15)))


def test_adaptive_norm_example():
    assert len(parse(ADAPTIVE).statements) == 4


def test_worked_generator_example():
    program = parse(GENERATOR)
    conv = program.statements[9].call
    assert conv.alias == "conv"
    assert [k for k, _ in conv.kwargs] == ["kernel_size", "stride", "padding"]


def test_init_example_builds_scheme_calls():
    program = parse(INIT)
    call = program.statements[1].call
    init = dict(call.kwargs)["init"]
    assert isinstance(init, Literal)
    assert init.value == {
        "weight": SchemeCall("xavier_uniform", (("gain", 1.0),), Pos(3, 24)),
        "bias": 0,
    }
    assert dict(call.kwargs)["trainable"].value == {"bias": False}


# -- allowed forms -----------------------------------------------------------------------


def test_empty_and_comment_only_source():
    assert parse("").statements == ()
    assert parse("# nothing here\n\n").statements == ()


def test_rebinding_x_and_out_and_saving_references():
    program = parse(
        """
        saved = x
        x = linear(saved, 4)
        out = saved
        out = relu(x)
        """
    )
    kinds = [(s.targets, type(s.value).__name__) for s in program.statements]
    assert kinds == [(("saved",), "Name"), (("x",), "Call"), (("out",), "Name"), (("out",), "Call")]


def test_packs_and_unpacking_forms():
    program = parse(
        """
        parts = split(x, 64)
        z1, z2 = parts
        [a, b] = parts
        pair = (z1, b)
        again = [a, z2]
        c, = split(x, 1)
        """
    )
    statements = program.statements
    assert statements[1].targets == ("z1", "z2") and statements[1].unpack
    assert statements[2].targets == ("a", "b") and statements[2].unpack
    assert statements[3].value == Pack((Name("z1", Pos(5, 17)), Name("b", Pos(5, 21))), Pos(5, 16))
    assert isinstance(statements[4].value, Pack)
    assert statements[5].targets == ("c",) and statements[5].unpack


def test_nested_calls_and_keyword_tensor_ports():
    program = parse("h = add(linear(64), linear(x=x, out_features=64), name='sum')")
    call = program.statements[0].value
    assert [a.alias for a in call.args] == ["linear", "linear"]
    assert call.args[1].kwargs[0] == ("x", Name("x", Pos(1, 30)))


def test_deeply_nested_calls_within_budget():
    text = "relu(" * 30 + ")" * 30
    program = parse(text)
    call, depth = program.statements[0].call, 1
    while call.args:
        call, depth = call.args[0], depth + 1
    assert depth == 30


def test_multiline_calls_with_comments():
    program = parse(
        """
        conv(
            64,              # channels
            kernel_size=3,   # square kernel
            # a comment line inside the call
            policy="down2",
        )
        relu()
        """
    )
    conv = program.statements[0].call
    assert conv.args[0] == Literal(64, Pos(3, 13))
    assert conv.kwargs[1] == ("policy", Literal("down2", Pos(6, 20)))
    assert program.statements[1].pos == Pos(8, 9)


def test_literal_forms():
    program = parse(
        "linear(1, -2, +3, 1.5, -0.25, True, False, None, 'a' 'b', (1, [2, {'k': (3,)}]),"
        " 0x1F, 1_000, -0.0)"
    )
    values = [arg.value for arg in program.statements[0].call.args]
    assert values[:9] == [1, -2, 3, 1.5, -0.25, True, False, None, "ab"]
    assert values[9] == (1, [2, {"k": (3,)}])
    assert values[10:12] == [31, 1000]
    assert str(values[12]) == "-0.0"


def test_schemes_in_init_mapping():
    text = (
        "linear(init={'w': kaiming_normal(a=0.1, mode='fan_out', nonlinearity='relu'),"
        " 'b': -1, 'c': orthogonal(), 'd': 0.5})"
    )
    program = parse(text)
    init = dict(program.statements[0].call.kwargs)["init"].value
    assert init["w"].kwargs == (("a", 0.1), ("mode", "fan_out"), ("nonlinearity", "relu"))
    assert init["b"] == -1 and init["d"] == 0.5
    assert init["c"] == SchemeCall("orthogonal", (), Pos(1, text.index("orthogonal") + 1))


def test_non_dict_init_and_trainable_are_plain_literals():
    program = parse("linear(init=0, trainable=True)\nrelu(init={}, trainable={})")
    first, second = program.statements
    assert dict(first.call.kwargs) == {"init": Literal(0, Pos(1, 13)), "trainable": Literal(True, Pos(1, 26))}
    assert dict(second.call.kwargs)["init"].value == {}


def test_soft_keywords_and_underscore_are_ordinary_locals():
    program = parse("match = relu()\n_ = relu(match)\ntype = relu(_)")
    assert [s.targets for s in program.statements] == [("match",), ("_",), ("type",)]


def test_ir_is_frozen():
    statement = parse("relu()").statements[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        statement.pos = Pos(9, 9)  # type: ignore[misc]


def test_named_inputs_are_prebound():
    parse("add(z, y)", inputs=("z", "y"))
    assert fails("add(z, x)", "E_NAME", inputs=("z", "y"))


# -- positions ---------------------------------------------------------------------------


def test_indented_source_reports_original_positions():
    error = fails(
        """
            linear(64)
            relu(  undefined_thing)
        """,
        "E_NAME",
    )
    assert where(error) == (3, 20)
    assert "undefined or forward reference" in error.message


def test_positions_count_characters_not_bytes():
    error = fails("    linear('ééé', bogus)", "E_NAME")
    assert where(error) == (1, 19)  # a byte offset would say 22


def test_python_syntax_error_position_is_mapped():
    error = fails("\n    relu()\n    linear(1 2)\n", "E_SYNTAX")
    assert where(error) == (3, 12)


def test_file_name_is_carried_in_errors(tmp_path):
    from hndl.frontends.config.source import load_file

    path = tmp_path / "cfg.py"
    path.write_text("import os\n")
    with pytest.raises(HNDLError) as info:
        parse_config(load_file(path), aliases=ALIASES, inputs=("x",))
    assert info.value.location.file == str(path)


# -- forbidden statements ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, form",
    [
        ("import os", "import statements"),
        ("from os import path", "import statements"),
        ("def f():\n    pass", "function definitions"),
        ("@d\ndef f():\n    pass", "function definitions"),
        ("async def f():\n    pass", "async function definitions"),
        ("class A:\n    pass", "class definitions"),
        ("if x:\n    relu()", "if statements"),
        ("for i in x:\n    relu()", "for loops"),
        ("while x:\n    relu()", "while loops"),
        ("with x:\n    relu()", "with statements"),
        ("try:\n    relu()\nexcept E:\n    relu()", "try statements"),
        ("return x", "return statements"),
        ("del x", "del statements"),
        ("global x", "global statements"),
        ("assert x", "assert statements"),
        ("pass", "pass statements"),
        ("raise x", "raise statements"),
        ("x += relu()", "augmented assignments"),
        ("y: int = relu()", "annotated assignments"),
        ("match x:\n    case 1:\n        relu()", "match statements"),
    ],
)
def test_forbidden_statements(text, form):
    error = fails(text, "E_SYNTAX")
    assert error.message.startswith(f"{form} are not part of python_config@1")
    assert where(error) == (1, 1) or text.startswith("@")


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('"""docstring"""', "docstrings"),
        ("x", "bare names"),
        ("1", "literals as statements"),
        ("[1, 2]", "literals as statements"),
        ("(y := relu())", "assignment expressions"),
        ("x + x", "arithmetic expressions"),
        ("await relu()", "await expressions"),
        ("lambda: 1", "lambda expressions"),
    ],
)
def test_expression_statements_must_be_calls(text, fragment):
    error = fails(text, "E_SYNTAX")
    assert fragment in error.message


# -- targets and names -------------------------------------------------------------------


def test_chained_assignment():
    assert "chained" in fails("a = b = relu()", "E_SYNTAX").message


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("a.b = relu()", "attribute assignment targets"),
        ("a[0] = relu()", "subscript assignment targets"),
        ("*a, b = split(x, 1)", "starred assignment targets"),
        ("a, *b = split(x, 1)", "starred assignment targets"),
        ("a, (b, c) = split(x, 1)", "nested unpacking targets"),
        ("a, b.c = split(x, 1)", "attribute assignment targets"),
        ("a, a = split(x, 1)", "appears twice"),
        ("() = relu()", "empty unpacking targets"),
    ],
)
def test_bad_targets(text, fragment):
    assert fragment in fails(text, "E_SYNTAX").message


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("linear = relu()", "cannot rebind operator alias 'linear'"),
        ("a, relu = split(x, 1)", "cannot rebind operator alias 'relu'"),
        ("xavier_uniform = relu()", "initializer scheme"),
        ("__x__ = relu()", "double-underscore"),
        ("__hidden = relu()", "double-underscore"),
    ],
)
def test_reserved_target_names(text, fragment):
    assert fragment in fails(text, "E_NAME").message


def test_undefined_and_forward_references():
    fails("relu(h)\nh = relu()", "E_NAME")
    fails("h = relu(h)", "E_NAME")  # right-hand side is checked before binding
    fails("a = b", "E_NAME")
    fails("pair = (x, nope)", "E_NAME")
    fails("linear(__builtins__)", "E_NAME")
    parse("h = relu()\nh = relu(h)")


def test_aliases_are_not_values():
    assert "local aliases" in fails("f = linear", "E_NAME").message
    assert "local aliases" in fails("add(linear, x)", "E_NAME").message
    fails("add(normal, x)", "E_NAME")


@pytest.mark.parametrize(
    "text",
    ["h = 1", "h = 'a'", "h = None", "h = [1, 2]", "h = (x, 1)", "h = {'a': 1}", "h = -1", "h = ()"],
)
def test_literal_only_locals(text):
    assert "literal-only locals are not part of v1" in fails(text, "E_SYNTAX").message


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("h = x + x", "arithmetic"),
        ("h = x[0]", "subscript"),
        ("h = x.T", "attribute"),
        ("h = (x, relu())", "only tensor names"),
        ("h = (x, *x)", "star"),
        ("h = {x}", "literal-only"),
        ("h = lambda: x", "lambda"),
        ("h = x if x else x", "conditional"),
    ],
)
def test_bad_assignment_values(text, fragment):
    assert fragment in fails(text, "E_SYNTAX").message


# -- calls -------------------------------------------------------------------------------


def test_attribute_calls_are_reserved():
    error = fails("ops.linear(64)", "E_SYNTAX")
    assert "attribute calls are reserved for trusted native Python" in error.message
    fails("h = hndl.ops.linear(x, 64)", "E_SYNTAX")
    fails("relu(ops.linear(64))", "E_SYNTAX")


def test_unknown_operator():
    error = fails("foo(1)", "E_OPERATOR")
    assert "unknown operator 'foo'" in error.message
    fails("relu(foo())", "E_OPERATOR")
    fails("print(x)", "E_OPERATOR")


def test_calling_a_tensor_or_a_call_result():
    assert "tensors cannot be called" in fails("x()", "E_SYNTAX").message
    fails("h = relu()\nh(x)", "E_SYNTAX")
    fails("relu()()", "E_SYNTAX")
    fails("(lambda: 1)()", "E_SYNTAX")


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("linear(*x)", "star expansion"),
        ("linear(**x)", "keyword expansion"),
        ("linear(x, k=1, k=2)", "repeated"),
        ("linear(x=x, x=x)", "repeated"),
    ],
)
def test_star_and_duplicate_arguments(text, fragment):
    assert fragment in fails(text, "E_SYNTAX").message


def test_scheme_placement():
    for text in [
        "xavier_uniform()",
        "h = normal()",
        "linear(init=xavier_uniform())",
        "linear(init=[xavier_uniform()])",
        "linear(init={'w': [normal()]})",
        "linear(init={'w': {'v': normal()}})",
        "linear(relu(init=uniform()))",
        "linear(uniform())",
        "linear(trainable={'w': normal()})",
        "linear(other={'w': normal()})",
        "linear([orthogonal()])",
    ]:
        error = fails(text, "E_SYNTAX")
        assert "direct value of an init mapping" in error.message, text


def test_scheme_arguments():
    assert "keyword arguments only" in fails("linear(init={'w': normal(0.0)})", "E_SYNTAX").message
    fails("linear(init={'w': normal(**k)})", "E_SYNTAX")
    fails("linear(init={'w': normal(std=x)})", "E_SYNTAX")
    fails("linear(init={'w': normal(std=relu())})", "E_SYNTAX")
    fails("linear(init={'w': normal(std=1, std=2)})", "E_SYNTAX")
    fails("linear(init={'w': normal(std=1e999)})", "E_SYNTAX")


def test_init_mapping_rules():
    fails("linear(init={'w': x})", "E_SYNTAX")
    fails("linear(init={'w': relu()})", "E_SYNTAX")
    fails("linear(init={'w': 0, 'w': 1})", "E_SYNTAX")
    fails("linear(init={1: 0})", "E_SYNTAX")
    fails("linear(init={**m})", "E_SYNTAX")


# -- literals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("linear([x])", "cannot contain names"),
        ("linear((1, relu()))", "cannot contain calls"),
        ("linear({'a': relu()})", "cannot contain calls"),
        ("linear([*x])", "star"),
        ("linear({1: 2})", "string constants"),
        ("linear({'a': 1, 'a': 2})", "repeated"),
        ("linear({**d})", "dict expansion"),
        ("linear(1e400)", "finite"),
        ("linear(-1e400)", "finite"),
        ("linear(-True)", "directly to a number"),
        ("linear(--1)", "directly to a number"),
        ("linear(-(1 + 2))", "directly to a number"),
        ("linear(-x)", "directly to a number"),
        ("linear(not True)", "unary operators"),
        ("linear(~1)", "unary operators"),
        ("linear(b'raw')", "bytes literals"),
        ("linear(...)", "ellipsis literals"),
        ("linear(1j)", "complex literals"),
        ("linear({1, 2})", "set literals"),
        ("linear(f'{1}')", "formatted strings"),
        ("linear(lambda: 1)", "lambda expressions"),
        ("linear([i for i in y])", "comprehensions"),
        ("linear({k: 1 for k in y})", "comprehensions"),
        ("linear(i for i in y)", "generator expressions"),
        ("linear(x.shape)", "attribute access"),
        ("linear(x[0])", "subscript access"),
        ("linear(1 + 1)", "arithmetic expressions"),
        ("linear(1 < 2)", "comparisons"),
        ("linear(True and False)", "boolean operators"),
        ("linear(1 if True else 2)", "conditional expressions"),
        ("linear((y := 1))", "assignment expressions"),
        ("linear('\\ud800')", "surrogates"),
    ],
)
def test_forbidden_argument_forms(text, fragment):
    assert fragment in fails(text, "E_SYNTAX").message


def test_int_digit_budget():
    parse("linear(" + "9" * 20 + ")")
    parse("linear(-" + "9" * 20 + ")")
    fails("linear(" + "1" + "0" * 20 + ")", "E_RESOURCE")
    fails("linear([" + "1" * 21 + "])", "E_RESOURCE")
    fails("linear(0x" + "F" * 40 + ")", "E_RESOURCE")
    fails("linear(" + "1" * 5000 + ")", "E_RESOURCE")  # Python's own conversion limit
    parse("linear(123)", budgets={"max_int_digits": 3})
    fails("linear(1234)", "E_RESOURCE", budgets={"max_int_digits": 3})


def test_string_budget_counts_utf8_bytes():
    budgets = {"max_string_bytes": 4}
    parse("linear('abcd')", budgets=budgets)
    parse("linear('éé')", budgets=budgets)
    fails("linear('ééé')", "E_RESOURCE", budgets=budgets)
    fails("linear(name='abcde')", "E_RESOURCE", budgets=budgets)
    fails("linear({'abcde': 1})", "E_RESOURCE", budgets=budgets)
    fails("linear(init={'w': normal(mode='abcde')})", "E_RESOURCE", budgets=budgets)


def test_literal_item_budget():
    budgets = {"max_literal_items": 4}
    parse("linear([1, 2, 3, 4])", budgets=budgets)
    parse("linear([1, 2, 3, 4], [1, 2, 3, 4])", budgets=budgets)  # per argument
    fails("linear([1, 2, 3, 4, 5])", "E_RESOURCE", budgets=budgets)
    fails("linear([1, [2, 3], 4])", "E_RESOURCE", budgets=budgets)  # nested items count
    fails("linear({'a': 1, 'b': (2, 3, 4)})", "E_RESOURCE", budgets=budgets)
    fails("linear(init={'w': normal(mean=0, std=1), 'b': 0, 'c': 1})", "E_RESOURCE", budgets=budgets)


def test_literal_depth_budget():
    budgets = {"max_literal_depth": 3}
    parse("linear([[[1]]])", budgets=budgets)
    fails("linear([[[[1]]]])", "E_RESOURCE", budgets=budgets)
    fails("linear({'a': {'b': {'c': {'d': 1}}}})", "E_RESOURCE", budgets=budgets)
    parse("linear(init={'w': normal(std=1)})", budgets={"max_literal_depth": 2})
    fails("linear(init={'w': normal(std=1)})", "E_RESOURCE", budgets={"max_literal_depth": 1})


def test_default_literal_depth_budget():
    parse("linear(" + "[" * 8 + "]" * 8 + ")")
    fails("linear(" + "[" * 9 + "]" * 9 + ")", "E_RESOURCE")


# -- AST budgets and parser failures -----------------------------------------------------


def test_ast_node_budget():
    text = "relu()\n" * 10
    nodes = sum(1 for n in ast.walk(ast.parse(text)) if not isinstance(n, ast.expr_context))
    parse(text, budgets={"max_ast_nodes": nodes})
    error = fails(text, "E_RESOURCE", budgets={"max_ast_nodes": nodes - 1})
    assert "syntax nodes" in error.message


def test_ast_depth_budget():
    parse("relu(relu(relu()))", budgets={"max_ast_depth": 6})
    error = fails("relu(relu(relu(relu())))", "E_RESOURCE", budgets={"max_ast_depth": 6})
    assert "nesting" in error.message and error.location.line == 1


def _measured(text: str) -> tuple[int, int]:
    """Counted syntax nodes (expression contexts excluded) and the deepest level, module = 1."""
    def depth(node: ast.AST) -> int:
        children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.expr_context)]
        return 1 + max((depth(child) for child in children), default=0)
    tree = ast.parse(text)
    return sum(1 for n in ast.walk(tree) if not isinstance(n, ast.expr_context)), depth(tree)


@pytest.mark.parametrize("text", [
    "linear(x, 4, k=-1, t=(1, [2, 'a']), name='h')\nout = add(h, relu(h))",
    "a, b = split(x, 2)\nrelu(a)\nlinear(b, 8, init={'weight': normal(std=1.0)})",
    "relu(relu(relu(x)))",  # names as the deepest leaves
    "linear(16)\n" * 20,  # constants as the deepest leaves, many statements
])
def test_ast_budgets_accept_exactly_up_to_the_measured_count_and_depth(text):
    """Leaves are the deepest nodes and the bulk of a tree: every one counts, at its depth."""
    nodes, deepest = _measured(text)
    inputs = ("x", "h")
    parse(text, inputs=inputs, budgets={"max_ast_nodes": nodes, "max_ast_depth": deepest})
    assert "syntax nodes" in fails(text, "E_RESOURCE", inputs=inputs, budgets={"max_ast_nodes": nodes - 1}).message
    assert "nesting" in fails(text, "E_RESOURCE", inputs=inputs, budgets={"max_ast_depth": deepest - 1}).message


def test_default_ast_depth_budget_rejects_deep_nesting():
    fails("relu(" * 70 + ")" * 70, "E_RESOURCE")


def test_parser_limits_are_resource_errors():
    fails("relu(" + "(" * 300 + "1" + ")" * 300 + ")", "E_RESOURCE")
    fails("relu(" + "-" * 100_000 + "1)", "E_RESOURCE")


def test_wide_modules_validate_without_deep_recursion():
    text = "relu()\n" * 5000
    assert len(parse(text).statements) == 5000


def test_syntax_errors():
    fails("linear(", "E_SYNTAX")
    fails("linear(64", "E_SYNTAX")
    fails("  relu()\nrelu()\n    relu()", "E_SYNTAX")  # inconsistent indentation


def test_whole_module_is_validated_before_returning():
    # the error is on the last line; nothing is returned for the valid prefix
    fails("relu()\nlinear(64)\nimport os", "E_SYNTAX")


# -- request validation ------------------------------------------------------------------


def test_request_arguments():
    source = load_text("relu()")
    with pytest.raises(HNDLError) as info:
        parse_config("relu()", aliases=ALIASES, inputs=("x",))  # type: ignore[arg-type]
    assert info.value.code == "E_SCHEMA"
    with pytest.raises(HNDLError) as info:
        parse_config(source, aliases="relu", inputs=("x",))
    assert info.value.code == "E_SCHEMA"
    with pytest.raises(HNDLError) as info:
        parse_config(source, aliases=ALIASES, inputs="x")
    assert info.value.code == "E_SCHEMA"
    with pytest.raises(HNDLError) as info:
        parse_config(source, aliases=ALIASES | {"normal"}, inputs=("x",))
    assert info.value.code == "E_NAME"
    for inputs in [("relu",), ("__x",), ("class",), ("x", "x"), ("uniform",), ("1x",)]:
        with pytest.raises(HNDLError) as info:
            parse_config(source, aliases=ALIASES, inputs=inputs)
        assert info.value.code == "E_NAME", inputs


def test_scheme_names_constant():
    assert SCHEME_NAMES == (
        "xavier_uniform",
        "xavier_normal",
        "kaiming_uniform",
        "kaiming_normal",
        "truncated_normal",
        "normal",
        "uniform",
        "orthogonal",
    )
    assert grammar.GRAMMAR_VERSION == "python_config@1"


def test_nothing_is_evaluated(monkeypatch):
    import builtins

    def refuse(*args, **kwargs):
        raise AssertionError("configuration must never be evaluated")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    parse(GENERATOR)
    parse(INIT)


# -- f-strings are refused before parsing (issue 15, item 14) -------------------------------------


def test_an_f_string_with_200000_fields_is_refused_before_the_quadratic_parse():
    """CPython parses one f-string with n fields in time quadratic in n: 200,000 fields (600 KB,
    inside the byte budget) took about 10 s. A linear scan refuses it first, at its position."""
    import time

    text = 'relu()\nlinear(8, name=f"' + "{x}" * 200_000 + '")'
    start = time.perf_counter()
    error = fails(text, "E_SYNTAX")
    seconds = time.perf_counter() - start
    assert error.message == "formatted strings (f-strings) are not part of python_config@1"
    assert where(error) == (2, 16)
    assert "python_config@1" in error.remedies[0]
    assert seconds < 2.0, f"refused only after {seconds:.2f} s"  # measured: about 0.05 s


@pytest.mark.parametrize(
    "text, position",
    [
        ("linear(f'{1}')", (1, 8)),
        ('linear(rf"x")', (1, 8)),
        ('linear(Fr"x")', (1, 8)),
        ("linear('a', name=f'b')", (1, 18)),
        ("    linear(8)\n    relu(name=F'x')", (2, 15)),  # dedented source, original column
        ("linear(name='''\nf'x'\n''')\nrelu(name=f'y')", (4, 11)),
        ("linear(8)  # f'x'\nrelu(name=f'y')", (2, 11)),
    ],
)
def test_the_f_string_scan_reports_the_same_code_and_position_as_the_allowlist(text, position):
    error = fails(text, "E_SYNTAX")
    assert error.message.startswith("formatted strings (f-strings) are not part of python_config@1")
    assert where(error) == position


@pytest.mark.parametrize(
    "text",
    [
        "linear(8, name=\"elf'\")",
        "linear(8, name='elf\"')",
        "linear(8, name='f\"x\"')",
        "linear(8, name=r'\\'f\"')",
        "linear(8, name='''f'x' f\"y\"''')",
        "linear(8)  # f'not an f-string, a comment'",
        "linear(8, name='a' \"f'\" 'b')",
    ],
)
def test_text_that_only_contains_f_and_a_quote_is_still_configuration(text):
    parse(text)


def test_names_ending_in_f_before_a_string_are_not_f_strings():
    # Python reads elf"x" as the name elf followed by a string, a syntax error, never an f-string
    assert "formatted strings" not in fails('linear(8, name=elf"x")', "E_SYNTAX").message


# -- max_nodes: one graph node per operator call (issue 15, item 18) -------------------------

NESTED = "a = relu(relu(x))\nb = relu(relu(a))\nout = relu(b)\n"  # five calls, nested ones first


def test_exactly_max_nodes_operator_calls_parse_and_one_more_is_e_resource_at_that_call():
    assert len(parse_config(load_text("relu()\n" * 5), aliases=ALIASES, inputs=("x",), max_nodes=5).statements) == 5
    with pytest.raises(HNDLError) as caught:
        parse_config(load_text("relu()\n" * 6), aliases=ALIASES, inputs=("x",), max_nodes=5)
    error = caught.value
    assert error.code == "E_RESOURCE"
    assert error.message == "the configuration has more than 5 operator calls, above max_nodes=5"
    assert where(error) == (6, 1)
    assert error.remedies == ("Shrink the graph or raise limits['max_nodes'].",)


def test_nested_calls_are_nodes_too_counted_in_the_binders_order():
    """The binder records ``relu(relu(a))`` inner call first; the parser refuses the same call the
    binder would, in the author's coordinates, so the two can never disagree on what a node is."""
    from hndl.contracts import parse_contracts
    from hndl.frontends.binder import Binder
    from hndl.frontends.config.interpret import interpret
    from hndl.registry import Registry

    registry = Registry.from_packs("basic")
    contracts = parse_contracts(("B", 4), ("B", 4), aliases=registry.aliases())
    text = "\n    " + NESTED.replace("\n", "\n    ")  # indented: positions are the author's
    assert len(parse_config(load_text(text), aliases=ALIASES, inputs=("x",), max_nodes=5).statements) == 3
    refused_at = {}
    for bound in (1, 2, 3, 4):
        with pytest.raises(HNDLError) as parsed:
            parse_config(load_text(text), aliases=ALIASES, inputs=("x",), max_nodes=bound)
        program = parse_config(load_text(text), aliases=ALIASES, inputs=("x",))
        with pytest.raises(HNDLError) as bound_late:
            interpret(program, Binder(contracts, max_nodes=bound), registry)
        assert parsed.value.code == bound_late.value.code == "E_RESOURCE"
        assert f"above max_nodes={bound}" in parsed.value.message
        assert parsed.value.remedies == bound_late.value.remedies
        assert where(parsed.value) == where(bound_late.value)
        refused_at[bound + 1] = where(parsed.value)
    assert refused_at == {2: (2, 9), 3: (3, 14), 4: (3, 9), 5: (4, 11)}  # call -> (line, column)


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "5"])
def test_a_bad_max_nodes_is_e_schema(bad):
    with pytest.raises(HNDLError) as caught:
        parse_config(load_text("relu()"), aliases=ALIASES, inputs=("x",), max_nodes=bad)
    assert caught.value.code == "E_SCHEMA" and "max_nodes" in caught.value.message
