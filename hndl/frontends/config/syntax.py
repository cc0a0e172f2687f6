"""Reading python_config@1 source into a Python AST, within its budgets (§11).

Before the allowlist sees a tree: f-strings are refused by a linear scan, the text is parsed
by ``ast.parse`` pinned to the Python 3.11 grammar, and the whole tree is measured against
the node-count and depth budgets without recursion. Every failure is a located HNDLError.
"""

from __future__ import annotations

import ast
import re
from typing import Mapping, NoReturn, Optional

from ...errors import HNDLError
from .source import Source

__all__ = ["PARSER_FEATURE_VERSION", "PARSE_FILENAME", "FORMATTED_STRINGS", "REMEDY_SYNTAX",
           "reject_formatted_strings", "parse_module", "check_ast_budgets"]

#: The Python grammar the parser is pinned to, whatever the host interpreter accepts.
PARSER_FEATURE_VERSION = (3, 11)
#: The filename of the one AST-only compile the parser performs (the worker's audit hook allows only it).
PARSE_FILENAME = "<hndl-config>"
#: How a diagnostic names the f-string forms.
FORMATTED_STRINGS = "formatted strings (f-strings)"
#: The remedy of a form outside python_config@1.
REMEDY_SYNTAX = "Use only operator calls and simple assignments of python_config@1."
#: SyntaxError messages that mean "too big or too deep", not "malformed".
_RESOURCE_SYNTAX_MESSAGES = ("too many nested", "too complex", "exceeds the limit")


#: A comment or a whole string literal (without its prefix). A backslash in a string always
#: takes the next character with it, in raw strings too, as Python's tokenizer does.
_COMMENT_OR_STRING = re.compile(
    r"""#[^\n]*+"""
    r"""|'''(?:[^'\\]++|\\.|'(?!''))*+'''|\"\"\"(?:[^"\\]++|\\.|"(?!""))*+\"\"\""""
    r"""|'(?:[^'\\\n]++|\\.)*+'|"(?:[^"\\\n]++|\\.)*+\"""",
    re.DOTALL,
)
#: Where an f-string could open; a source without one needs no scan.
_FORMATTED_OPENING = re.compile(r"""[fF][rR]?['"]""")
_FORMATTED_PREFIXES = frozenset({"f", "F", "rf", "rF", "Rf", "RF", "fr", "fR", "Fr", "FR"})


def reject_formatted_strings(source: Source) -> None:
    """E_SYNTAX at the first f-string, found by a linear scan before anything is parsed.

    f-strings are never python_config@1, and CPython parses one with many fields in quadratic
    time (200,000 fields take about 10 s), so they are refused before ``ast.parse`` sees them.
    Comments and string bodies are skipped whole, so ``name="elf'"`` is untouched, and a
    literal's prefix is the whole name-like run before its quote, as Python reads it
    (``elf"x"`` is the name ``elf`` and a plain string).
    """
    text = source.text
    if _FORMATTED_OPENING.search(text) is None:
        return  # no f-string can open anywhere: the common case costs one search
    for lexeme in _COMMENT_OR_STRING.finditer(text):
        quote = lexeme.start()
        if quote and text[quote - 1] in "fFrR" and text[quote] != "#":
            start = quote - 1
            while start > 0 and quote - start < 3 and (text[start - 1].isalnum() or text[start - 1] == "_"):
                start -= 1
            if text[start:quote] in _FORMATTED_PREFIXES:
                _formatted_string_error(source, start)


def _formatted_string_error(source: Source, index: int) -> NoReturn:
    """The f-string rejection, at the original position of the literal's prefix."""
    text = source.text
    line, column = source.position(text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1))
    raise HNDLError(
        "E_SYNTAX",
        f"{FORMATTED_STRINGS} are not part of python_config@1",
        line=line,
        column=column,
        file=source.file,
        remedies=(REMEDY_SYNTAX,),
    )


def parse_module(source: Source) -> ast.Module:
    """Run the pinned parser, turning its failures into located HNDL errors."""
    try:
        return ast.parse(
            source.text, filename=PARSE_FILENAME, mode="exec", feature_version=PARSER_FEATURE_VERSION
        )
    except SyntaxError as exc:
        raise _syntax_error(source, exc) from None
    except (RecursionError, MemoryError) as exc:
        raise HNDLError(
            "E_RESOURCE",
            f"configuration source is too deeply nested or too large to parse ({type(exc).__name__})",
            file=source.file,
            remedies=("Flatten deeply nested expressions or shrink the source.",),
        ) from None
    except ValueError as exc:
        raise HNDLError(
            "E_RESOURCE",
            f"configuration source exceeds a parser limit: {exc}",
            file=source.file,
            remedies=("Shrink the literal or expression the parser rejected.",),
        ) from None


def _syntax_error(source: Source, exc: SyntaxError) -> HNDLError:
    """Map a parser SyntaxError (character offsets, dedented lines) to the original text."""
    message = exc.msg or "invalid syntax"
    lowered = message.lower()
    resource = any(marker in lowered for marker in _RESOURCE_SYNTAX_MESSAGES)
    line = column = None
    if exc.lineno is not None:
        line, column = source.position(exc.lineno, max(0, (exc.offset or 1) - 1))
    return HNDLError(
        "E_RESOURCE" if resource else "E_SYNTAX",
        f"{message}" if resource else f"invalid python_config@1 source: {message}",
        line=line,
        column=column,
        file=source.file,
        remedies=(
            ("Flatten the nesting or shrink the literal; it exceeds a parser limit.",)
            if resource
            else ("Fix the Python syntax at the reported position.",)
        ),
    )


def check_ast_budgets(module: ast.Module, source: Source, budgets: Mapping[str, int]) -> None:
    """Count nodes and measure depth with an explicit stack; never recurse over the tree.

    The module is depth 1. Every AST object counts as a node except the Load/Store/Del
    expression contexts, which carry no content and would only inflate the measures.
    """
    max_nodes, max_depth = budgets["max_ast_nodes"], budgets["max_ast_depth"]
    node_type, context = ast.AST, ast.expr_context
    child_fields = _CHILD_FIELDS
    # Each entry is (node, depth, parent entry); the parent chain is followed only on failure,
    # to find the nearest node with a position. A plain loop over ``_fields`` instead of
    # ``ast.iter_child_nodes`` with per-node anchors measures the few hundred thousand nodes of
    # a dense source near the byte budget about five times faster.
    stack: list[tuple] = [(module, 1, None)]
    pop, push = stack.pop, stack.append
    count = 0
    while stack:
        entry = pop()
        node, depth, _ = entry
        count += 1
        if count > max_nodes:
            _budget_error(source, _anchor_of(entry), f"more than {max_nodes} syntax nodes", "max_ast_nodes")
        if depth > max_depth:
            _budget_error(source, _anchor_of(entry), f"syntax nesting deeper than {max_depth}", "max_ast_depth")
        depth += 1
        fields = child_fields.get(type(node))
        if fields is None:
            fields = child_fields[type(node)] = _child_fields(type(node))
        for field in fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, node_type) and not isinstance(item, context):
                        push((item, depth, entry))
            elif isinstance(value, node_type) and not isinstance(value, context):
                push((value, depth, entry))


#: Fields that only ever hold text, numbers, constants or an expression context, never a
#: counted node; skipping them changes no count. Only the most frequent node types are listed.
_LEAF_FIELDS: Mapping[type, frozenset[str]] = {
    ast.Name: frozenset({"id", "ctx"}),
    ast.Constant: frozenset({"value", "kind"}),
    ast.keyword: frozenset({"arg"}),
}
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(kind: type) -> tuple[str, ...]:
    """The fields of an AST class that may hold child nodes."""
    skipped = _LEAF_FIELDS.get(kind, frozenset())
    return tuple(field for field in kind._fields if field not in skipped)


def _anchor_of(entry: Optional[tuple]) -> Optional[ast.AST]:
    """The nearest node on ``entry``'s parent chain that carries a position."""
    while entry is not None:
        if hasattr(entry[0], "lineno"):
            return entry[0]
        entry = entry[2]
    return None


def _budget_error(source: Source, node: Optional[ast.AST], what: str, key: str) -> NoReturn:
    """Raise E_RESOURCE for an exceeded source budget, located at ``node`` when known."""
    line = column = None
    if node is not None:
        line, column = source.node_position(node.lineno, node.col_offset)
    raise HNDLError(
        "E_RESOURCE",
        f"configuration source has {what}",
        line=line,
        column=column,
        file=source.file,
        remedies=(f"Shrink the source, or raise {key} explicitly.",),
    )
