"""Hostile configuration sources (§7 "Declarative grammar and trust boundary", "Loading limits
and trust boundaries").

Each source goes through hndl.resolve exactly as a user's would and must fail with the
expected HNDLError code, quickly, without anything executing in the host, and without
costing the persistent worker its life. A subprocess then shows what the parser itself does
with the same sources: nothing but its own AST-only compile.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

import hndl
from hndl.errors import HNDLError
from hndl.frontends.config import worker
from hndl.frontends.config.syntax import PARSE_FILENAME, reject_formatted_strings
from hndl.frontends.config.source import load_text

CONTRACT = {"input_shape": ("B", 8), "output_shape": ("B", 8)}

# ---------------------------------------------------------------------------------------
# One process-wide audit hook, recording only while a case runs
# ---------------------------------------------------------------------------------------

_RECORDING = False
_EVENTS: list = []


def _record(event: str, args: tuple) -> None:
    if not _RECORDING:
        return
    detail = None
    if event == "compile" and len(args) > 1:
        detail = repr(args[1])
    elif event == "open" and args:
        detail = repr(args[0])
    _EVENTS.append((event, detail))


sys.addaudithook(_record)  # cannot be removed; inert while _RECORDING is False

#: Events that would mean configuration caused code execution, imports, file access,
#: processes or network in the host.
FORBIDDEN_EVENTS = {"exec", "compile", "import", "open", "os.system", "subprocess.Popen", "socket.connect"}
FORBIDDEN_PREFIXES = ("os.exec", "os.fork", "os.posix_spawn", "os.spawn", "socket.", "ctypes.",
                      "code.__new__", "function.__new__", "marshal.", "pickle.", "cpython.run_",
                      "urllib.", "webbrowser.", "shutil.")


def _forbidden(events, allowed_opens=()) -> list:
    bad = []
    for event, detail in events:
        if event == "open" and detail in allowed_opens:
            continue
        if event in FORBIDDEN_EVENTS or event.startswith(FORBIDDEN_PREFIXES):
            bad.append((event, detail))
    return bad


# ---------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------

DEEP = 10**4

HOSTILE = [
    # imports and dynamic code: a non-operator callee is an unknown operator (grammar.callee)
    ("import", "import os", "E_SYNTAX"),
    ("from-import", "from os import path", "E_SYNTAX"),
    ("__import__", '__import__("os")', "E_OPERATOR"),
    ("exec", 'exec("1")', "E_OPERATOR"),
    ("eval", 'eval("1")', "E_OPERATOR"),
    ("open", 'open("/etc/passwd")', "E_OPERATOR"),
    ("globals", "globals()", "E_OPERATOR"),
    ("print", "print(1)", "E_OPERATOR"),
    ("breakpoint", "breakpoint()", "E_OPERATOR"),
    ("fullwidth exec", "ｅｘｅｃ(\"1\")", "E_OPERATOR"),  # NFKC-normalizes to exec
    ("exec assigned", 'h = exec("import os")', "E_OPERATOR"),
    ("exec nested", 'linear(exec("1"))', "E_OPERATOR"),
    # attribute and special-name access
    ("attribute", "x.__class__", "E_SYNTAX"),
    ("attribute chain", "().__class__.__bases__", "E_SYNTAX"),
    ("subclasses", "().__class__.__base__.__subclasses__()", "E_SYNTAX"),
    ("attribute call", "ops.linear(4)", "E_SYNTAX"),
    ("attribute target", "x = linear(4)\nx.weight = 1", "E_SYNTAX"),
    ("subscript", "linear(4)[0]", "E_SYNTAX"),
    ("builtins name", "__builtins__", "E_SYNTAX"),
    ("dunder target", "__builtins__ = linear(4)", "E_NAME"),
    ("dunder node name", 'linear(4, name="__init__")', "E_NAME"),
    # forbidden expression forms
    ("lambda", "lambda: 0", "E_SYNTAX"),
    ("lambda argument", "linear(4, init=lambda: 0)", "E_SYNTAX"),
    ("comprehension", "[a for a in b]", "E_SYNTAX"),
    ("generator argument", "linear(a for a in b)", "E_SYNTAX"),
    ("f-string", 'f"{x}"', "E_SYNTAX"),
    ("f-string argument", 'linear(4, name=f"{x.__class__}")', "E_SYNTAX"),
    ("arithmetic", "x = 1 + 2", "E_SYNTAX"),
    ("string arithmetic", 'linear(("a" * 10))', "E_SYNTAX"),
    ("walrus bare", "y := linear()", "E_SYNTAX"),
    ("walrus parenthesized", "(y := linear())", "E_SYNTAX"),
    ("conditional", "linear(x if x else x)", "E_SYNTAX"),
    ("call in a container", 'linear(4, init={"weight": __import__("os")})', "E_SYNTAX"),
    ("star args", "linear(*[4])", "E_SYNTAX"),
    ("keyword expansion", 'linear(**{"out_features": 4})', "E_SYNTAX"),
    ("dict expansion", "linear({**{}})", "E_SYNTAX"),
    ("bytes", 'linear(b"x")', "E_SYNTAX"),
    ("yield", "x = yield", "E_SYNTAX"),
    ("await", "await x", "E_SYNTAX"),
    # forbidden statements
    ("def", "def f(): pass", "E_SYNTAX"),
    ("async def", "async def f(): pass", "E_SYNTAX"),
    ("decorator", "@linear\ndef f(): pass", "E_SYNTAX"),
    ("class", "class A: pass", "E_SYNTAX"),
    ("if", "if x: pass", "E_SYNTAX"),
    ("for", "for a in b: pass", "E_SYNTAX"),
    ("while", "while 1: pass", "E_SYNTAX"),
    ("with", 'with open("f") as f: pass', "E_SYNTAX"),
    ("try", "try:\n    pass\nexcept Exception:\n    pass", "E_SYNTAX"),
    ("match", "match x:\n    case 1:\n        pass", "E_SYNTAX"),
    ("type alias", "type X = int", "E_SYNTAX"),
    ("del", "del x", "E_SYNTAX"),
    ("global", "global x", "E_SYNTAX"),
    ("raise", "raise SystemExit", "E_SYNTAX"),
    ("assert", "assert x", "E_SYNTAX"),
    ("docstring", '"""import os"""', "E_SYNTAX"),
    ("import after a valid call", "linear(8); import os", "E_SYNTAX"),
    ("import after a line continuation", "\\\nimport os", "E_SYNTAX"),
    ("import after a valid program", "linear(8)\nrelu()\nimport os", "E_SYNTAX"),
    # characters
    ("null byte", "linear(8)\x00", "E_SYNTAX"),
    ("null byte in a string", 'linear(8, name="a\x00b")', "E_SYNTAX"),
    ("lone surrogate", 'linear(8, name="\ud800")', "E_SYNTAX"),
    # resource exhaustion
    ("deep parentheses", "linear(" + "(" * DEEP + "x" + ")" * DEEP + ")", "E_RESOURCE"),
    ("deep lists", "linear(" + "[" * DEEP + "]" * DEEP + ")", "E_RESOURCE"),
    ("deep calls", "x = " + "relu(" * DEEP + ")" * DEEP, "E_RESOURCE"),
    ("deep but parseable", "linear(" + "[" * 150 + "]" * 150 + ")", "E_RESOURCE"),
    ("million-digit integer", "linear(" + "9" * 10**6 + ")", "E_RESOURCE"),
    ("huge integer", "linear(" + "9" * 100 + ")", "E_RESOURCE"),
    ("million-element list", "linear(8, v=[" + "0," * 10**6 + "])", "E_RESOURCE"),
    ("10 MB source", "#" * (10 * 10**6), "E_RESOURCE"),
    ("10**5 lines", "relu()\n" * 10**5, "E_RESOURCE"),
    ("long string literal", 'linear(8, name="' + "a" * (16 * 1024 + 1) + '")', "E_RESOURCE"),
    ("many small literals", "linear(8, v=[" + "[0, 0]," * 3000 + "])", "E_RESOURCE"),
]

IDS = [name for name, _, _ in HOSTILE]


def _invalid_utf8_file(tmp_path):
    path = tmp_path / "hostile.py"
    path.write_bytes(b"linear(8)\nx = linear(4, name='\xff\xfe')\n")
    return path


# ---------------------------------------------------------------------------------------
# Through hndl.resolve, in the host
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def warm_worker():
    """Default process isolation, a running worker and every lazy import done."""
    saved = worker._settings
    worker.configure(mode="process", memory_bytes=1 << 30, cpu_seconds=10, timeout_seconds=30.0,
                     max_reply_bytes=16 << 20)
    try:
        hndl.resolve("linear(16)\nrelu()\nlinear()", **CONTRACT)
        with pytest.raises(HNDLError):
            hndl.resolve("foo bar", **CONTRACT)  # and the error path's lazy imports too
        yield worker._worker.process.pid
    finally:
        with worker._lock:
            if worker._worker is not None:
                worker._worker.close()
                worker._worker = None
        worker._settings = saved


def _resolve_recorded(call):
    """Run ``call`` with host audit recording on; return (error, seconds, events)."""
    global _RECORDING
    del _EVENTS[:]
    start = time.perf_counter()
    _RECORDING = True
    try:
        call()
    except BaseException as error:  # judged by the caller: only HNDLError is acceptable
        outcome = error
    else:
        outcome = None
    finally:
        _RECORDING = False
    seconds = time.perf_counter() - start
    return outcome, seconds, list(_EVENTS)


@pytest.mark.parametrize("name, source, code", HOSTILE, ids=IDS)
def test_hostile_source_fails_with_its_code_quickly_and_executes_nothing_in_the_host(
    warm_worker, name, source, code
):
    outcome, seconds, events = _resolve_recorded(lambda: hndl.resolve(source, **CONTRACT))
    assert isinstance(outcome, HNDLError), f"{name}: expected HNDLError {code}, got {outcome!r}"
    assert outcome.code == code, f"{name}: {outcome}"
    assert seconds < 2.0, f"{name} took {seconds:.2f} s"
    assert _forbidden(events) == [], f"{name}: the host saw {_forbidden(events)}"
    # Hostile input is answered with a diagnostic; it never costs the persistent worker its life.
    assert worker._worker is not None and worker._worker.process.pid == warm_worker
    assert worker._worker.process.poll() is None


def test_invalid_utf8_file_is_e_syntax_and_the_host_only_opens_that_file(warm_worker, tmp_path):
    path = _invalid_utf8_file(tmp_path)
    outcome, seconds, events = _resolve_recorded(lambda: hndl.resolve_file(path, **CONTRACT))
    assert isinstance(outcome, HNDLError) and outcome.code == "E_SYNTAX", outcome
    assert "UTF-8" in outcome.message and outcome.location.line == 2
    assert seconds < 2.0
    opened = {detail for event, detail in events if event == "open"}
    assert opened <= {repr(str(path)), repr(path)}
    assert _forbidden(events, allowed_opens=opened) == []


def test_the_recorder_sees_host_effects_so_its_silence_means_something(warm_worker, tmp_path):
    """Guard the guard: the same recording does catch exec, compile, import and open."""
    marker = tmp_path / "marker.txt"
    marker.write_text("x")

    def effects():
        exec("1 + 1")
        open(marker).close()
        try:
            __import__("hndl_no_such_module_for_the_audit_test")
        except ImportError:
            pass

    _, _, events = _resolve_recorded(effects)
    names = {event for event, _ in events}
    assert {"exec", "compile", "open", "import"} <= names


def test_a_valid_source_still_resolves_after_the_corpus(warm_worker):
    assert hndl.resolve("linear(16)\nrelu()\nlinear()", **CONTRACT).output_shape == ("B", 8)
    assert worker._worker.process.pid == warm_worker


# ---------------------------------------------------------------------------------------
# In a clean subprocess: what the parser itself does with the same sources
# ---------------------------------------------------------------------------------------

PARSER_PROBE = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = json.loads(sys.argv[1])
    mode = sys.argv[3]
    with open(sys.argv[2], encoding="utf-8") as handle:
        sources = json.load(handle)

    import hndl
    from hndl.errors import HNDLError
    from hndl.frontends.config import worker
    from hndl.frontends.config.grammar import parse_config
    from hndl.frontends.config.source import load_text

    aliases = sorted(hndl.Registry.builtins().aliases())
    worker._preload()  # what the worker imports before it arms its guard
    guard = worker._AuditGuard()
    if mode == "guarded":
        sys.addaudithook(guard)  # first, as in the worker: what it refuses, later hooks never see

    recording = False
    events = []

    def record(event, args):
        if recording:
            detail = None
            if event == "compile" and len(args) > 1:
                detail = args[1]
            elif event == "open" and args:
                detail = str(args[0])
            events.append([event, detail])

    sys.addaudithook(record)

    results = []
    for text in sources:
        try:
            source = load_text(text)
        except HNDLError as error:
            results.append({"loaded": False, "code": error.code, "events": []})
            continue
        events = []
        guard.__enter__()
        recording = True
        try:
            parse_config(source, aliases=aliases, inputs=["x"])
            code = None
        except HNDLError as error:
            code = error.code
        except BaseException as error:
            code = "raised " + type(error).__name__
        finally:
            recording = False
            guard.__exit__(None, None, None)
        results.append({"loaded": True, "code": code, "events": events})
    print(json.dumps(results))
    """
)


def _probe(tmp_path, sources, mode):
    data = tmp_path / f"sources-{mode}.json"
    data.write_text(json.dumps(sources), encoding="utf-8")
    script = tmp_path / "probe.py"
    script.write_text(PARSER_PROBE)
    done = subprocess.run(
        [sys.executable, "-I", str(script), json.dumps(sys.path), str(data), mode],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def parser_runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("parser-probe")
    sources = [source for _, source, _ in HOSTILE] + ["linear(16)\nrelu()\nlinear()", "ä = linear(4)\nrelu(ä)"]
    return sources, _probe(tmp_path, sources, "raw"), _probe(tmp_path, sources, "guarded")


def _refused_before_parsing(source):
    """Whether the f-string scan refuses ``source`` before ``ast.parse`` runs."""
    try:
        reject_formatted_strings(load_text(source))
    except HNDLError:
        return True
    return False


def test_the_parser_alone_only_compiles_its_own_source_to_an_ast(parser_runs):
    sources, raw, _ = parser_runs
    parsed = 0
    for source, result in zip(sources, raw):
        if not result["loaded"]:
            continue
        parsed += 1
        assert not (result["code"] or "").startswith("raised"), (source[:60], result)
        names = [event for event, _ in result["events"]]
        compiles = [detail for event, detail in result["events"] if event == "compile"]
        # exactly one compile per parse, always the parser's own AST-only one; an f-string is
        # refused by the scan before anything is parsed, so it compiles nothing at all
        assert compiles == ([] if _refused_before_parsing(source) else [PARSE_FILENAME]), (source[:60], result["events"])
        assert not {"exec", "import"} & set(names), (source[:60], result["events"])
        # CPython tries to quote the offending line of a SyntaxError by opening the "file"
        # the source claims to come from; that is the only open the parser ever attempts.
        opens = [detail for event, detail in result["events"] if event == "open"]
        assert set(opens) <= {PARSE_FILENAME}, (source[:60], opens)
        assert not [name for name in names if name not in ("compile", "open")], (source[:60], result["events"])
    assert parsed > 60  # the corpus really reached the parser


def test_inside_the_worker_guard_nothing_but_that_compile_happens(parser_runs):
    sources, raw, guarded = parser_runs
    for source, bare, inside in zip(sources, raw, guarded):
        assert inside["code"] == bare["code"], (source[:60], bare["code"], inside["code"])
        if inside["loaded"]:
            expected = [] if _refused_before_parsing(source) else [["compile", PARSE_FILENAME]]
            assert inside["events"] == expected, (source[:60], inside["events"])


def test_the_corpus_codes_in_the_parser_match_resolve(parser_runs):
    """The parser stage alone already rejects everything except what the binder rejects
    (the dunder node name, a valid call whose name is only checked later)."""
    sources, raw, _ = parser_runs
    expected = {source: code for _, source, code in HOSTILE}
    for source, result in zip(sources, raw):
        if source not in expected:
            assert result["code"] is None  # the valid controls parse
        elif source == 'linear(4, name="__init__")':
            assert result["code"] is None
        else:
            assert result["code"] == expected[source], (source[:60], result["code"])


# ---------------------------------------------------------------------------------------
# The worker's audit guard itself
# ---------------------------------------------------------------------------------------

GUARD_PROBE = textwrap.dedent(
    """
    import ast, json, os, socket, subprocess, sys
    sys.path[:0] = json.loads(sys.argv[1])
    from hndl.errors import HNDLError
    from hndl.frontends.config.syntax import PARSE_FILENAME
    from hndl.frontends.config.worker import _AuditGuard

    path = sys.argv[2]
    code = compile("1 + 1", "<precompiled>", "eval")
    guard = _AuditGuard()
    sys.addaudithook(guard)
    results = {}

    def attempt(name, action):
        try:
            with guard:
                action()
            results[name] = ["allowed"]
        except HNDLError as error:
            results[name] = [error.code, error.message]
        except BaseException as error:
            results[name] = ["raised", type(error).__name__, str(error)]

    def sticky():
        try:
            exec("1")
        except HNDLError:
            pass
        open(path).close()  # the guard must still be armed after a swallowed refusal

    attempt("exec source", lambda: exec("1"))
    attempt("exec code object", lambda: exec(code))
    attempt("eval", lambda: eval("1"))
    attempt("open", lambda: open(path).close())
    attempt("os.open", lambda: os.close(os.open(path, os.O_RDONLY)))
    attempt("compile", lambda: compile("1", "x", "eval"))
    attempt("compile to an AST under another name", lambda: ast.parse("1", filename="<other>"))
    attempt("import", lambda: __import__("colorsys"))
    attempt("os.system", lambda: os.system("true"))
    attempt("subprocess", lambda: subprocess.Popen(["true"]))
    attempt("socket", lambda: socket.socket())
    attempt("sticky", sticky)
    attempt("the parser's own compile", lambda: ast.parse("linear(4)", filename=PARSE_FILENAME))
    attempt("plain computation", lambda: sum(range(10)))
    # Inactive outside parsing: the worker's own plumbing is untouched.
    exec("1")
    open(path).close()
    results["outside"] = ["allowed"]
    print(json.dumps(results))
    """
)


def test_the_worker_audit_guard_refuses_every_effect_but_the_parsers_compile(tmp_path):
    script = tmp_path / "guard_probe.py"
    script.write_text(GUARD_PROBE)
    done = subprocess.run(
        [sys.executable, "-I", str(script), json.dumps(sys.path), str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    refused = {
        "exec source": "compile",
        "exec code object": "exec",
        "eval": "compile",
        "open": "open",
        "os.open": "open",
        "compile": "compile",
        "compile to an AST under another name": "compile",
        "import": "import",
        "os.system": "os.system",
        "subprocess": "subprocess.Popen",
        "socket": "socket.__new__",
        "sticky": "open",
    }
    for name, event in refused.items():
        code, message = results[name]
        assert code == "E_SYNTAX", (name, results[name])
        assert f"forbidden effect ({event})" in message, (name, message)
    for name in ("the parser's own compile", "plain computation", "outside"):
        assert results[name] == ["allowed"], (name, results[name])
