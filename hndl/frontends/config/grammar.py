"""The python_config@1 grammar: a pinned, allowlisted Python AST subset (§7, §11).

A source read and budget-checked by ``syntax`` is validated statement by statement against
the allowlist while the immutable statement IR of ``ir`` is built. Nothing is evaluated,
executed or compiled to code: literal values are read directly from the tree with bounded
traversal, and the IR is returned only after the complete module has been accepted.

Which operator a call reaches, which arguments are tensor ports, and what the values mean
are the interpreter's business; this module only guarantees the shapes of the IR it hands
over.
"""

from __future__ import annotations

import ast
import math
import re
from keyword import iskeyword
from typing import Any, Collection, Mapping, NoReturn, Optional, Sequence, Union

from ...construction import SCHEME_NAMES
from ...errors import MAX_NAME_CHARS, HNDLError, echo, shown
from ...limits import SOURCE_BUDGETS
from .ir import IR, Assign, Call, Evaluate, Expr, Literal, Name, Pack, Pos, Program, SchemeCall, Statement
from .source import Source, resolve_budgets
from .syntax import FORMATTED_STRINGS, REMEDY_SYNTAX, check_ast_budgets, parse_module, reject_formatted_strings

__all__ = ["GRAMMAR_VERSION", "UNKNOWN_OPERATOR", "parse_config", "validate_config", "unknown_operator"]

#: The frontend version recorded with source provenance.
GRAMMAR_VERSION = "python_config@1"
#: The message of an unknown callee; the host reads the name back to suggest the fix (``unknown_operator``).
#: A name past ``MAX_NAME_CHARS`` is shown cut, cannot be read back, and gets no suggestion (none is close).
UNKNOWN_OPERATOR = "unknown operator '{}'"
_UNKNOWN_OPERATOR = re.compile(r"unknown operator '(\w+)'\Z")


# ---------------------------------------------------------------------------------------
# Forbidden forms, by AST class name (looked up by name so newer node types need no import)
# ---------------------------------------------------------------------------------------

_STATEMENT_FORMS: Mapping[str, str] = {
    "Import": "import statements",
    "ImportFrom": "import statements",
    "FunctionDef": "function definitions",
    "AsyncFunctionDef": "async function definitions",
    "ClassDef": "class definitions",
    "Return": "return statements",
    "Delete": "del statements",
    "AugAssign": "augmented assignments",
    "AnnAssign": "annotated assignments",
    "TypeAlias": "type alias statements",
    "For": "for loops",
    "AsyncFor": "async for loops",
    "While": "while loops",
    "If": "if statements",
    "With": "with statements",
    "AsyncWith": "async with statements",
    "Match": "match statements",
    "Raise": "raise statements",
    "Try": "try statements",
    "TryStar": "try statements",
    "Assert": "assert statements",
    "Global": "global statements",
    "Nonlocal": "nonlocal statements",
    "Pass": "pass statements",
    "Break": "break statements",
    "Continue": "continue statements",
}

_EXPRESSION_FORMS: Mapping[str, str] = {
    "Lambda": "lambda expressions",
    "ListComp": "comprehensions",
    "SetComp": "comprehensions",
    "DictComp": "comprehensions",
    "GeneratorExp": "generator expressions",
    "JoinedStr": FORMATTED_STRINGS,
    "FormattedValue": FORMATTED_STRINGS,
    "Attribute": "attribute access",
    "Subscript": "subscript access",
    "Slice": "slices",
    "BinOp": "arithmetic expressions",
    "Compare": "comparisons",
    "BoolOp": "boolean operators",
    "IfExp": "conditional expressions",
    "Starred": "star expansions",
    "Await": "await expressions",
    "Yield": "yield expressions",
    "YieldFrom": "yield expressions",
    "Set": "set literals",
    "NamedExpr": "assignment expressions (:=)",
    "UnaryOp": "unary operators other than a sign on a number",
}

_LITERAL_NODES = (ast.Constant, ast.Tuple, ast.List, ast.Dict, ast.UnaryOp)


def _form_of(node: ast.AST) -> str:
    """A readable name for a node's syntactic form, for diagnostics."""
    kind = type(node).__name__
    if isinstance(node, ast.Constant):
        return _constant_form(node.value) or "literals"
    return _EXPRESSION_FORMS.get(kind) or _STATEMENT_FORMS.get(kind) or f"{kind} nodes"


def _constant_form(value: object) -> Optional[str]:
    """The forbidden-form name of a constant's type, or None for allowed scalars."""
    if isinstance(value, bytes):
        return "bytes literals"
    if value is Ellipsis:
        return "ellipsis literals (...)"
    if isinstance(value, complex):
        return "complex literals"
    return None


def _is_dunder(name: str) -> bool:
    """Special double-underscore names are reserved in configuration."""
    return name.startswith("__")


# ---------------------------------------------------------------------------------------
# Request checks
# ---------------------------------------------------------------------------------------


def _check_source(source: object) -> Source:
    """The parser accepts only a loaded ``Source`` (bounded and dedented already)."""
    if not isinstance(source, Source):
        raise HNDLError(
            "E_SCHEMA",
            f"parse_config needs a Source from load_text/load_file, not {type(source).__name__}",
            remedies=("Load the text with load_text or load_file first.",),
        )
    return source


def _string_collection(value: object, what: str) -> tuple[str, ...]:
    """Validate a non-str collection of str (aliases or input names)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection):
        raise HNDLError(
            "E_SCHEMA",
            f"{what} must be a collection of str, not {type(value).__name__}",
            field=what,
            remedies=(f"Pass {what} as a tuple, list or set of names.",),
        )
    items = tuple(value)
    for item in items:
        if not isinstance(item, str):
            raise HNDLError(
                "E_SCHEMA",
                f"{what} must contain only str, found {type(item).__name__}",
                field=what,
                remedies=(f"Pass {what} as names.",),
            )
    return items


def _check_aliases(aliases: object) -> frozenset[str]:
    """Aliases may not shadow a reserved initializer scheme (E_NAME in a parse request)."""
    names = frozenset(_string_collection(aliases, "aliases"))
    for alias in sorted(names):
        if alias in SCHEME_NAMES:
            raise HNDLError(
                "E_NAME",
                f"operator alias {shown(alias)} shadows the reserved initializer scheme {shown(alias)}",
                field="aliases",
                remedies=("Register the operator under a different alias.",),
            )
    return names


def _check_inputs(inputs: object, aliases: frozenset[str]) -> tuple[str, ...]:
    """External input names become prebound locals, so they obey the local-name rules."""
    if isinstance(inputs, (set, frozenset)):
        raise HNDLError(
            "E_SCHEMA",
            "inputs must be an ordered sequence of names, not a set",
            field="inputs",
            remedies=("Pass the input names in declaration order.",),
        )
    names = _string_collection(inputs, "inputs")
    for name in names:
        problem = None
        if not name.isidentifier() or _is_keyword(name):
            problem = "is not a Python identifier"
        elif _is_dunder(name):
            problem = "is a reserved double-underscore name"
        elif name in aliases:
            problem = "is a registered operator alias"
        elif name in SCHEME_NAMES:
            problem = "is a reserved initializer scheme"
        if problem is not None:
            raise HNDLError(
                "E_NAME",
                f"external input name {shown(name)} {problem}",
                field="inputs",
                remedies=("Rename the external input in the contract.",),
            )
    if len(set(names)) != len(names):
        raise HNDLError(
            "E_NAME",
            "external input names must be distinct",
            field="inputs",
            remedies=("Give every external input its own name.",),
        )
    return names


def _check_max_nodes(max_nodes: object) -> None:
    """``max_nodes`` is None (no bound) or a positive int, as validate_limits makes it."""
    if max_nodes is not None and (type(max_nodes) is not int or max_nodes < 1):
        raise HNDLError(
            "E_SCHEMA",
            f"max_nodes must be None or a positive int, not {max_nodes!r}"[:200],
            field="max_nodes",
            remedies=("Pass the resolution's limits['max_nodes'].",),
        )


def _is_keyword(name: str) -> bool:
    """Python keywords cannot be locals (soft keywords such as ``match`` can)."""
    return iskeyword(name)



# ---------------------------------------------------------------------------------------
# Validation and IR construction
# ---------------------------------------------------------------------------------------


class _Validator:
    """Walks a budget-checked module once, validating and building the IR.

    Recursion here follows expression nesting, which the AST depth budget already bounds.
    """

    def __init__(
        self,
        source: Source,
        aliases: frozenset[str],
        inputs: Sequence[str],
        budgets: Mapping[str, int],
        max_nodes: Optional[int] = None,
        build: Any = IR,
    ) -> None:
        self.source = source
        self.build = build
        self.aliases = aliases
        self.defined: set[str] = set(inputs)
        self.budgets = budgets
        self.int_bound = 10 ** budgets["max_int_digits"]
        self.max_nodes = max_nodes
        self.calls = 0
        #: One position per distinct (lineno, col_offset): a statement and its call start at the same place.
        self.positions: dict[tuple[int, int], Any] = {}

    # -- diagnostics -----------------------------------------------------------------

    def pos(self, node: ast.AST) -> Any:
        """The original position of a node, as the builder represents positions."""
        key = (node.lineno, node.col_offset)
        pos = self.positions.get(key)
        if pos is None:
            line, column = self.source.node_position(*key)
            pos = self.positions[key] = self.build.position(line, column)
        return pos

    def fail(self, code: str, message: str, node: ast.AST, remedy: str) -> NoReturn:
        """Raise a located error; every failure names one remedy."""
        where = self.source.node_position(node.lineno, node.col_offset) if hasattr(node, "lineno") else None
        raise HNDLError(
            code,
            message,
            line=where[0] if where else None,
            column=where[1] if where else None,
            file=self.source.file,
            remedies=(remedy,),
        )

    def forbidden(self, node: ast.AST, context: str = "") -> NoReturn:
        """E_SYNTAX naming a form that python_config@1 does not contain."""
        suffix = f" ({context})" if context else ""
        self.fail(
            "E_SYNTAX",
            f"{_form_of(node)} are not part of python_config@1{suffix}",
            node,
            REMEDY_SYNTAX,
        )

    # -- statements ------------------------------------------------------------------

    def program(self, module: ast.Module) -> Any:
        """Validate every statement in order; return the program only if all pass."""
        statement = self.statement
        return self.build.program(tuple([statement(node) for node in module.body]), self.source)

    def statement(self, node: ast.stmt) -> Statement:
        """Dispatch on the two allowed statement kinds."""
        if isinstance(node, ast.Assign):
            return self.assign(node)
        if isinstance(node, ast.Expr):
            return self.evaluate(node)
        self.forbidden(node)

    def evaluate(self, node: ast.Expr) -> Evaluate:
        """An expression statement must be exactly one operator call."""
        value = node.value
        if isinstance(value, ast.Call):
            return self.build.evaluate(self.call(value), self.pos(node))
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            what = "docstrings and bare strings as statements"
        elif isinstance(value, ast.Name):
            what = f"bare names as statements ({shown(value.id)})"
        elif isinstance(value, _LITERAL_NODES):
            what = "literals as statements"
        else:
            what = f"{_form_of(value)} as statements"
        self.fail(
            "E_SYNTAX",
            f"{what} are not part of python_config@1; "
            "an expression statement must be one operator call",
            value,
            "Delete the statement or turn it into an operator call; use # for comments.",
        )

    def assign(self, node: ast.Assign) -> Assign:
        """``target = value``: check the target shape, then the value, then bind."""
        if len(node.targets) != 1:
            self.fail(
                "E_SYNTAX",
                "chained assignments (a = b = ...) are not part of python_config@1",
                node.targets[1],
                "Assign to one target per statement.",
            )
        targets, unpack = self.targets(node.targets[0])
        value = self.value(node.value)
        self.defined.update(targets)
        return self.build.assign(targets, unpack, value, self.pos(node))

    def targets(self, node: ast.expr) -> tuple[tuple[str, ...], bool]:
        """A local name, or a flat tuple/list of distinct local names for unpacking."""
        if isinstance(node, ast.Name):
            return (self.target_name(node),), False
        if isinstance(node, (ast.Tuple, ast.List)):
            if not node.elts:
                self.fail("E_SYNTAX", "empty unpacking targets are not part of python_config@1",
                          node, "Unpack into one name per operator output.")
            names: list[str] = []
            for element in node.elts:
                if not isinstance(element, ast.Name):
                    self.bad_target(element, nested=True)
                name = self.target_name(element)
                if name in names:
                    self.fail("E_SYNTAX", f"name {shown(name)} appears twice in one unpacking target",
                              element, "Unpack into distinct names.")
                names.append(name)
            return tuple(names), True
        self.bad_target(node, nested=False)

    def bad_target(self, node: ast.expr, *, nested: bool) -> NoReturn:
        """E_SYNTAX for attribute, subscript, starred and nested assignment targets."""
        if isinstance(node, (ast.Tuple, ast.List)):
            what = "nested unpacking targets"
        elif isinstance(node, ast.Starred):
            what = "starred assignment targets"
        elif isinstance(node, ast.Attribute):
            what = "attribute assignment targets"
        elif isinstance(node, ast.Subscript):
            what = "subscript assignment targets"
        else:
            what = f"{_form_of(node)} as assignment targets"
        where = " inside an unpacking target" if nested and "unpacking" not in what else ""
        self.fail("E_SYNTAX", f"{what}{where} are not part of python_config@1", node,
                  "Assign to a plain local name or a flat tuple of distinct names.")

    def target_name(self, node: ast.Name) -> str:
        """A target may not be reserved, an operator alias or an initializer scheme."""
        name = node.id
        if _is_dunder(name):
            self.fail("E_NAME", f"{shown(name)} is a reserved double-underscore name", node,
                      "Choose an ordinary local name.")
        if name in self.aliases:
            self.fail("E_NAME", f"cannot rebind operator alias {shown(name)}", node,
                      "Choose a local name that is not a registered operator alias.")
        if name in SCHEME_NAMES:
            self.fail("E_NAME", f"cannot rebind reserved initializer scheme {shown(name)}", node,
                      "Choose a local name that is not an initializer scheme.")
        return name

    def value(self, node: ast.expr) -> Union[Name, Pack, Call]:
        """Assignment values: a tensor name, a flat tuple/list of tensor names, or a call."""
        if isinstance(node, ast.Name):
            return self.reference(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Tuple, ast.List)) and all(
            isinstance(element, ast.Name) for element in node.elts
        ):
            if not node.elts:
                self.literal_local(node)
            items = tuple(self.reference(element) for element in node.elts)
            return self.build.pack(items, self.pos(node))
        if isinstance(node, (ast.Tuple, ast.List)):
            bad = next(e for e in node.elts if not isinstance(e, ast.Name))
            if isinstance(bad, ast.Starred):
                self.forbidden(bad, "in an assignment value")
            if not isinstance(bad, _LITERAL_NODES):
                self.fail("E_SYNTAX", "assigned tuples may hold only tensor names", bad,
                          "Assign a flat tuple of earlier tensor names.")
            self.literal_local(node)
        if isinstance(node, _LITERAL_NODES + (ast.Set,)):
            self.literal_local(node)
        self.forbidden(node, "as an assignment value")

    def literal_local(self, node: ast.expr) -> NoReturn:
        """Literal-only locals are not part of v1; literals belong in call arguments."""
        self.fail("E_SYNTAX", "literal-only locals are not part of v1; literals belong in "
                  "call arguments", node, "Write the literal directly as an operator argument.")

    # -- calls and arguments ---------------------------------------------------------

    def reference(self, node: ast.Name) -> Name:
        """A tensor reference must name an input or a local bound by an earlier statement."""
        name = node.id
        if name in self.defined:
            return self.build.name(name, self.pos(node))
        if name in self.aliases:
            self.fail("E_NAME", f"operator alias {shown(name)} is not a tensor; calls cannot be "
                      "redirected through local aliases", node,
                      f"Call the operator, {name}(...), or pass an earlier tensor name.")
        if name in SCHEME_NAMES:
            self.fail("E_NAME", f"{shown(name)} is a reserved initializer scheme, not a tensor", node,
                      "Call schemes only as direct values of an init mapping.")
        self.fail("E_NAME", f"undefined or forward reference {shown(name)}", node,
                  "Use an external input or a local assigned by an earlier statement.")

    def callee(self, node: ast.Call) -> str:
        """The callee must be a registered alias named directly."""
        func = node.func
        if isinstance(func, ast.Attribute):
            self.fail("E_SYNTAX", "attribute calls are reserved for trusted native Python",
                      func, "Call the operator by its registered alias, e.g. linear(...).")
        if not isinstance(func, ast.Name):
            self.fail("E_SYNTAX", f"calls through {_form_of(func)} are not part of "
                      "python_config@1; name a registered operator alias directly", func,
                      "Call the operator by its registered alias, e.g. linear(...).")
        name = func.id
        if name in SCHEME_NAMES:
            self.misplaced_scheme(node)
        if name in self.aliases:
            return name
        if name in self.defined:
            self.fail("E_SYNTAX", f"{shown(name)} is a tensor, not an operator; tensors cannot be "
                      "called", func, "Pass the tensor to an operator call instead.")
        self.fail("E_OPERATOR", UNKNOWN_OPERATOR.format(echo(name, MAX_NAME_CHARS)), func,
                  f"Register an operator with alias {shown(name)} before interpretation, "
                  "or fix the spelling.")

    def misplaced_scheme(self, node: ast.Call) -> NoReturn:
        """Scheme calls are legal only as direct values of an init mapping."""
        self.fail("E_SYNTAX", f"initializer scheme {node.func.id}(...) is legal only as a "
                  "direct value of an init mapping", node,
                  f'Write init={{"weight": {node.func.id}(...)}} on the operator call.')

    def call(self, node: ast.Call) -> Call:
        """Validate an operator call and its arguments, in Python evaluation order."""
        alias = self.callee(node)
        args = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                self.fail("E_SYNTAX", "star expansion (*args) is not part of python_config@1",
                          arg, "Write each argument explicitly.")
            args.append(self.argument(arg, keyword=None))
        kwargs = []
        seen: set[str] = set()
        for keyword in node.keywords:
            if keyword.arg is None:
                self.fail("E_SYNTAX", "keyword expansion (**kwargs) is not part of "
                          "python_config@1", keyword, "Write each keyword argument explicitly.")
            if keyword.arg in seen:
                self.fail("E_SYNTAX", f"keyword argument {shown(keyword.arg)} is repeated", keyword,
                          "Give each keyword once.")
            seen.add(keyword.arg)
            kwargs.append((keyword.arg, self.argument(keyword.value, keyword=keyword.arg)))
        self.count_call(node)
        return self.build.call(alias, tuple(args), tuple(kwargs), self.pos(node))

    def count_call(self, node: ast.Call) -> None:
        """Each operator call becomes one graph node; refuse the first past ``max_nodes``.

        Counted once a call's arguments are done, which is the order the binder records nodes
        in (nested calls first), so the refused call is the one the binder would refuse, and a
        source too large for max_nodes never reaches the host's decoder or binder.
        """
        self.calls += 1
        if self.max_nodes is not None and self.calls > self.max_nodes:
            self.fail("E_RESOURCE", f"the configuration has more than {self.max_nodes} operator calls, "
                      f"above max_nodes={self.max_nodes}", node, "Shrink the graph or raise limits['max_nodes'].")

    def argument(self, node: ast.expr, *, keyword: Optional[str]) -> Expr:
        """A call argument: tensor name, nested operator call, or bounded literal."""
        kind = type(node)
        if kind is ast.Constant:
            value = node.value
            if type(value) is int and -self.int_bound < value < self.int_bound:
                return self.build.literal(value, self.pos(node))  # the common literal, fully checked
        elif kind is ast.Name:
            return self.reference(node)
        elif kind is ast.Call:
            return self.call(node)
        if keyword == "init" and isinstance(node, ast.Dict):
            return self.init_mapping(node)
        return self.build.literal(self.literal(node, [0], 0), self.pos(node))

    def init_mapping(self, node: ast.Dict) -> Literal:
        """``init={...}``: direct values may be scheme calls; everything else is literal."""
        counter = [0]
        result: dict[str, Any] = {}
        self.count_items(node, counter, len(node.keys))
        self.check_depth(node, 1)
        for key, value in zip(node.keys, node.values):
            name = self.dict_key(node, key, result)
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                    and value.func.id in SCHEME_NAMES:
                result[name] = self.scheme_call(value, counter)
            else:
                result[name] = self.element(value, counter, 1)
        return self.build.literal(result, self.pos(node))

    def scheme_call(self, node: ast.Call, counter: list[int]) -> SchemeCall:
        """A scheme call with keyword-only literal arguments."""
        if node.args:
            self.fail("E_SYNTAX", f"initializer scheme {node.func.id}(...) takes keyword "
                      "arguments only", node.args[0],
                      f"Name every argument, e.g. {node.func.id}(gain=1.0).")
        self.count_items(node, counter, len(node.keywords))
        self.check_depth(node, 2)
        kwargs = []
        seen: set[str] = set()
        for keyword in node.keywords:
            if keyword.arg is None:
                self.fail("E_SYNTAX", "keyword expansion (**kwargs) is not part of "
                          "python_config@1", keyword, "Write each keyword argument explicitly.")
            if keyword.arg in seen:
                self.fail("E_SYNTAX", f"keyword argument {shown(keyword.arg)} is repeated", keyword,
                          "Give each keyword once.")
            seen.add(keyword.arg)
            kwargs.append((keyword.arg, self.literal(keyword.value, counter, 2)))
        return SchemeCall(scheme=node.func.id, kwargs=tuple(kwargs),
                          pos=Pos(*self.source.node_position(node.lineno, node.col_offset)))

    # -- literals --------------------------------------------------------------------

    def literal(self, node: ast.expr, counter: list[int], depth: int) -> Any:
        """Read one literal value directly from the tree; ``depth`` counts enclosing containers."""
        if isinstance(node, ast.Constant):
            return self.scalar(node, node.value)
        if isinstance(node, ast.UnaryOp):
            return self.signed_number(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            self.count_items(node, counter, len(node.elts))
            self.check_depth(node, depth + 1)
            items = [self.element(e, counter, depth + 1) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict):
            self.count_items(node, counter, len(node.keys))
            self.check_depth(node, depth + 1)
            result: dict[str, Any] = {}
            for key, value in zip(node.keys, node.values):
                name = self.dict_key(node, key, result)
                result[name] = self.element(value, counter, depth + 1)
            return result
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in SCHEME_NAMES:
            self.misplaced_scheme(node)
        self.forbidden(node, "in an argument")

    def element(self, node: ast.expr, counter: list[int], depth: int) -> Any:
        """A container element: a literal, never a name or a call."""
        if isinstance(node, ast.Name):
            self.fail("E_SYNTAX", f"literal containers cannot contain names ({shown(node.id)})",
                      node, "Pass tensors as direct operator arguments, not inside containers: "
                      "concat(a, b, axis=1), not concat([a, b], axis=1).")
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in SCHEME_NAMES:
                self.misplaced_scheme(node)
            self.fail("E_SYNTAX", "literal containers cannot contain calls", node,
                      "Pass calls as direct operator arguments, not inside containers.")
        if isinstance(node, ast.Starred):
            self.forbidden(node, "inside a literal container")
        return self.literal(node, counter, depth)

    def dict_key(self, node: ast.Dict, key: Optional[ast.expr], seen: dict[str, Any]) -> str:
        """Dict keys are unique str constants; ``**mapping`` expansion is not allowed."""
        if key is None:
            self.fail("E_SYNTAX", "dict expansion (**mapping) is not part of python_config@1",
                      node, "Write every key explicitly.")
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            self.fail("E_SYNTAX", "dict keys must be string constants", key,
                      'Use a quoted string key, e.g. {"weight": 0}.')
        name = self.string(key, key.value)
        if name in seen:
            self.fail("E_SYNTAX", f"dict key {shown(name)} is repeated", key, "Give each key once.")
        return name

    def scalar(self, node: ast.Constant, value: Any) -> Any:
        """int (bounded digits), finite float, bool, bounded str, or None."""
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            return self.integer(node, value)
        if isinstance(value, float):
            return self.real(node, value)
        if isinstance(value, str):
            return self.string(node, value)
        self.forbidden(node)

    def integer(self, node: ast.AST, value: int) -> int:
        """Integers are bounded by decimal digit count, checked without str(value)."""
        if abs(value) >= self.int_bound:
            limit = self.budgets["max_int_digits"]
            self.fail("E_RESOURCE", f"integer literal has more than {limit} digits", node,
                      "Use a smaller integer, or raise max_int_digits explicitly.")
        return value

    def real(self, node: ast.AST, value: float) -> float:
        """Floats must be finite; 1e400 parses to inf and is rejected."""
        if not math.isfinite(value):
            self.fail("E_SYNTAX", "float literals must be finite", node,
                      "Write a finite number.")
        return value

    def string(self, node: ast.AST, value: str) -> str:
        """Strings are valid Unicode text within the string byte budget."""
        encoded = value.encode("utf-8", "surrogatepass")
        limit = self.budgets["max_string_bytes"]
        if len(encoded) > limit:
            self.fail("E_RESOURCE", f"string literal is {len(encoded)} UTF-8 bytes; the limit "
                      f"is {limit}", node, "Shorten the string, or raise max_string_bytes "
                      "explicitly.")
        if any("\ud800" <= char <= "\udfff" for char in value):
            self.fail("E_SYNTAX", "string literals cannot contain lone surrogates", node,
                      "Use only valid Unicode characters.")
        return value

    def signed_number(self, node: ast.UnaryOp) -> Any:
        """A single +/- applied directly to an int or float constant (not a bool)."""
        operand = node.operand
        if not isinstance(node.op, (ast.UAdd, ast.USub)):
            self.forbidden(node, "in an argument")
        if not (isinstance(operand, ast.Constant) and type(operand.value) in (int, float)):
            self.fail("E_SYNTAX", "a sign may only be applied directly to a number; "
                      "computed expressions are not part of python_config@1", node,
                      "Write the signed number directly, e.g. -1 or -0.5.")
        value = operand.value if isinstance(node.op, ast.UAdd) else -operand.value
        if isinstance(value, float):
            return self.real(node, value)
        return self.integer(node, value)

    def count_items(self, node: ast.AST, counter: list[int], items: int) -> None:
        """Total container items of one argument literal stay within max_literal_items."""
        counter[0] += items
        limit = self.budgets["max_literal_items"]
        if counter[0] > limit:
            self.fail("E_RESOURCE", f"literal has more than {limit} items", node,
                      "Shrink the literal, or raise max_literal_items explicitly.")

    def check_depth(self, node: ast.AST, depth: int) -> None:
        """Container nesting of one argument literal stays within max_literal_depth."""
        limit = self.budgets["max_literal_depth"]
        if depth > limit:
            self.fail("E_RESOURCE", f"literal containers nest deeper than {limit}", node,
                      "Flatten the literal, or raise max_literal_depth explicitly.")


def unknown_operator(error: HNDLError) -> Optional[str]:
    """The callee an ``E_OPERATOR`` from this parser names, or None for any other error.

    The worker knows only the alias names; the host, which holds the registry and the installed
    packs, turns the name back into a remedy.
    """
    if error.code != "E_OPERATOR":
        return None
    match = _UNKNOWN_OPERATOR.match(error.message)
    return match.group(1) if match else None


def parse_config(
    source: Source,
    *,
    aliases: Collection[str],
    inputs: Sequence[str],
    budgets: Optional[Mapping[str, int]] = SOURCE_BUDGETS,
    max_nodes: Optional[int] = None,
) -> Program:
    """Parse and completely validate python_config@1 source into an immutable Program.

    ``aliases`` are the operator aliases of the selected registry; ``inputs`` are the
    external input names, prebound as locals in declaration order. ``max_nodes`` (the
    resolution's limit; None for no bound) caps the operator calls, one graph node each,
    with E_RESOURCE at the first call past it. No part of the source is evaluated: the tree
    is budget-checked, validated statement by statement, and returned only when every
    statement is accepted.
    """
    return validate_config(source, aliases=aliases, inputs=inputs, budgets=budgets, max_nodes=max_nodes)


def validate_config(
    source: Source,
    *,
    aliases: Collection[str],
    inputs: Sequence[str],
    budgets: Optional[Mapping[str, int]] = SOURCE_BUDGETS,
    max_nodes: Optional[int] = None,
    build: Any = IR,
) -> Any:
    """``parse_config`` with every accepted form built by ``build`` (default: the IR).

    The checks and their order are the same whatever the builder; the parser worker passes
    the wire encoding's builder so that it never builds an IR only to encode it.
    """
    source = _check_source(source)
    resolved = resolve_budgets(budgets)
    _check_max_nodes(max_nodes)
    alias_names = _check_aliases(aliases)
    input_names = _check_inputs(inputs, alias_names)
    reject_formatted_strings(source)
    module = parse_module(source)
    check_ast_budgets(module, source, resolved)
    try:
        return _Validator(source, alias_names, input_names, resolved, max_nodes, build).program(module)
    except RecursionError:
        raise HNDLError(
            "E_RESOURCE",
            "configuration source nests too deeply to validate",
            file=source.file,
            remedies=("Flatten nested calls, or lower max_ast_depth.",),
        ) from None
