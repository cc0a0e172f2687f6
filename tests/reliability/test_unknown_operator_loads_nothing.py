"""An unknown operator, or a configuration naming ``__import__``, imports and runs nothing (issue 29, item 4).

The remedy for an alias the registry lacks names the installed pack that provides it. That used
to load every installed pack into a scratch registry: with ``Registry.from_packs("basic",
"vision", "transformer")``, ``resolve("frobnicate(8)")`` imported 814+ modules (the pretrained
pack, ``torch._dynamo``, sympy), ran thousands of exec/compile events in the host and took seconds.
Now the providing pack is read from the aliases each pack's distribution declares in its
metadata (entry-point group ``hndl.operators``).

Audit hooks cannot be removed and this test process has imported everything already, so the
check runs in a fresh interpreter: it resolves one valid configuration first (which starts the
parser worker, a process of its own), then records every import, exec and compile while the
hostile names are resolved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from hndl.packs import installed_packs

PROBE = textwrap.dedent("""
    import json
    import sys

    import hndl
    from hndl import HNDLError, Registry

    registry = Registry.from_packs("basic", "vision", "transformer")
    contract = dict(input_shape=("B", 16), output_shape=("B", 4), registry=registry)
    hndl.resolve("linear(8)\\nlinear()", **contract)  # the resolution path and the parser worker, loaded

    CASES = {
        "frobnicate": lambda: hndl.resolve("frobnicate(8)", **contract),
        "__import__ called": lambda: hndl.resolve("__import__('os')\\nlinear()", **contract),
        "__import__ assigned": lambda: hndl.resolve("x = __import__(8)\\nlinear()", **contract),
        "__import__ referenced": lambda: hndl.resolve("linear(__import__)", **contract),
        "a pack left out": lambda: hndl.resolve("pretrained('timm:resnet18')", **contract),
        "captured frobnicate": lambda: getattr(registry.ops, "frobnicate"),
    }
    loaded = set(sys.modules)
    events = []

    def record(event, args):
        if event in ("import", "exec", "compile"):
            events.append(f"{event}: {str(args[0])[:120]}")

    sys.addaudithook(record)
    outcomes = {}
    for label, case in CASES.items():
        try:
            case()
            outcomes[label] = None
        except HNDLError as error:
            outcomes[label] = [error.code, error.message, list(error.remedies)]
    seen = list(events)
    new_modules = sorted(set(sys.modules) - loaded)
    print(json.dumps({"new_modules": new_modules, "events": seen, "outcomes": outcomes}))
""")


def _probe() -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_unknown_names_import_nothing_execute_nothing_and_still_name_the_fix():
    assert "pretrained" in installed_packs()  # the pack the old remedy imported, and the one named below
    found = _probe()
    assert found["new_modules"] == []
    assert found["events"] == []
    outcomes = found["outcomes"]
    code, message, remedies = outcomes["frobnicate"]
    assert (code, message) == ("E_OPERATOR", "unknown operator 'frobnicate'")
    assert remedies[-1] == "Register an operator with alias 'frobnicate' before interpretation, or fix the spelling."
    for label in ("__import__ called", "__import__ assigned"):
        assert outcomes[label][:2] == ["E_OPERATOR", "unknown operator '__import__'"], label
    assert outcomes["__import__ referenced"][:2] == ["E_NAME", "undefined or forward reference '__import__'"]
    assert outcomes["a pack left out"][2] == [
        "The installed pack 'pretrained' provides 'pretrained': resolve with Registry.from_packs('basic', "
        "'vision', 'transformer', 'pretrained') (on the command line: --packs basic,vision,transformer,pretrained)."
    ]
    assert outcomes["captured frobnicate"][:2] == ["E_OPERATOR", "operator 'frobnicate' is not in this registry"]
