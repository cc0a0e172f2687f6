"""Construction bombs (issue 15, items 15 and 16; §7 "State bound", §11, §13).

A plan is untrusted data, and building it is where its size turns into work and memory. Two
budgets bound that work before it is spent:

* ``max_node_modules`` (default 4,096): how many torch modules one node may create, counting its
  own module and every submodule it registers. ``moe(experts=200000)`` used to construct every
  expert on the meta device, swallow whatever went wrong, and construct them all again for real;
  it never finished. Construction now stops at the 4,097th module, on the meta device, in build,
  ``parameter_counts`` and ``dry_run`` alike.
* ``max_state_bytes``: the meta pass refuses state past the bound before allocating. When the
  default is in force it is the smaller of 64 GiB and the target device's memory (physical
  memory for cpu). An allocation that still fails, because the process may use less than the
  bound (an address-space limit, other tenants), becomes E_RESOURCE naming the node, the bytes it
  needed and the limit key, and what was already built is released.

The allocation tests run in a child process under ``RLIMIT_AS``, so no test here can allocate
tens of GiB for real, even on code that does not bound them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from torch import nn

import hndl
from hndl import HNDLError, Registry
from hndl.limits import DEFAULT_LIMITS, active_limits
from hndl.torch import build, dry_run, parameter_counts

REGISTRY = Registry.from_packs("basic", "vision", "transformer")
SEQUENCE = {"input_shape": ("B", 4, 8), "output_shape": ("B", 4, 8)}
#: Seconds a refused construction bomb may take: refusing costs constructing max_node_modules
#: modules on the meta device, 1.4 to 5.1 s measured on a loaded 2-core machine (the old code
#: took 28 s for parameter_counts and 40 s to build experts=10000, and never finished 200000).
SECONDS = 20.0


def _moe(experts):
    return hndl.resolve(f"moe(experts={experts}, top_k=1, expansion=1)", **SEQUENCE, registry=REGISTRY)


class _Registrations:
    """Counts every module registration in this process while active, and stops a runaway build:
    past ``ceiling`` it raises, so code that does not bound construction fails fast here."""

    def __init__(self, ceiling):
        self.ceiling, self.count = ceiling, 0

    def __enter__(self):
        self.handle = torch.nn.modules.module.register_module_module_registration_hook(self._hook)
        return self

    def _hook(self, parent, name, submodule):
        self.count += 1
        if self.count > self.ceiling:
            raise AssertionError(f"construction went on past {self.ceiling} module registrations")

    def __exit__(self, *exc):
        self.handle.remove()


@pytest.mark.parametrize("run", ["build", "parameter_counts", "dry_run"])
def test_a_node_creating_200000_experts_is_refused_at_max_node_modules(run):
    plan = _moe(200_000)
    call = {"build": lambda: build(plan, device="cpu", registry=REGISTRY),
            "parameter_counts": lambda: parameter_counts(plan, registry=REGISTRY),
            "dry_run": lambda: dry_run(plan, registry=REGISTRY)}[run]
    bound = DEFAULT_LIMITS["max_node_modules"]
    start = time.perf_counter()
    with _Registrations(ceiling=2 * bound) as seen, pytest.raises(HNDLError) as error:
        call()
    elapsed = time.perf_counter() - start
    assert error.value.code == "E_RESOURCE" and error.value.location.node == "n0"
    assert f"more than {bound} torch modules" in error.value.message
    assert f"limits['max_node_modules']={bound}" in error.value.message
    assert any("limits['max_node_modules']" in remedy for remedy in error.value.remedies)
    assert seen.count <= bound  # stopped on the meta device, never retried for real
    assert elapsed < SECONDS, f"refused only after {elapsed:.1f} s"


def test_max_node_modules_counts_the_node_module_and_every_submodule():
    # moe(experts=n): the node, its router, the expert list, and three modules per expert
    plan = _moe(3)
    assert build(plan, device="cpu", registry=REGISTRY, limits={"max_node_modules": 12}).nodes.n_n0 is not None
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu", registry=REGISTRY, limits={"max_node_modules": 11})
    assert error.value.code == "E_RESOURCE" and "more than 11 torch modules" in error.value.message
    assert parameter_counts(plan, registry=REGISTRY, limits={"max_node_modules": 12})["n0"] > 0
    with pytest.raises(HNDLError):
        parameter_counts(plan, registry=REGISTRY, limits={"max_node_modules": 11})


def _probe_registry(constructor):
    """A registry with a ``probe`` operator whose constructor is ``constructor(module)``."""
    registry = Registry.builtins()

    @registry.operator("probe", identity="tests.probe", summary="Runs a test's constructor.",
                       shape="x[B, ...] -> out[B, ...]")
    class Probe(nn.Module):
        """Calls the test's constructor with itself, then passes its input through."""

        def __init__(self):
            super().__init__()
            constructor(self)

        def forward(self, x):
            return x

    plan = hndl.resolve("probe()", input_shape=("B", 8), output_shape=("B", 8), registry=registry)
    return registry, plan


def test_the_module_bound_holds_for_a_node_that_cannot_be_measured_on_the_meta_device():
    devices = []

    def constructor(module):
        devices.append(torch.empty(0).device.type)
        if devices[-1] == "meta":
            raise NotImplementedError("this operator cannot be built on the meta device")
        module.blocks = nn.ModuleList(nn.Identity() for _ in range(10_000))

    registry, plan = _probe_registry(constructor)
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu", registry=registry, limits={"max_node_modules": 100})
    assert error.value.code == "E_RESOURCE" and error.value.location.node == "n0"
    assert devices == ["meta", "cpu"]  # measured after real construction, which the bound stopped


def test_running_out_of_memory_on_the_meta_device_is_e_resource_and_is_not_retried_for_real():
    devices = []

    def constructor(module):
        devices.append(torch.empty(0).device.type)
        if devices[-1] == "meta":
            raise MemoryError

    registry, plan = _probe_registry(constructor)
    for call in (lambda: build(plan, device="cpu", registry=registry),
                 lambda: parameter_counts(plan, registry=registry)):
        devices.clear()
        with pytest.raises(HNDLError) as error:
            call()
        assert error.value.code == "E_RESOURCE" and error.value.location.node == "n0"
        assert "ran out of memory" in error.value.message and "MemoryError" in error.value.message
        assert devices == ["meta"]


@pytest.mark.parametrize("size", [(2**62, 8), (2**63, 8)], ids=["storage size overflow", "extent beyond int64"])
def test_state_whose_size_overflows_torch_is_e_resource_on_the_meta_device_and_not_retried(size):
    """Issue 29, item 9: torch refuses such a size with RuntimeError ("Storage size calculation
    overflowed") or TypeError ("Overflow when unpacking long long"); the meta pass used to take that
    for "cannot be built on meta", construct the node for real and raise torch's error."""
    devices = []

    def constructor(module):
        devices.append(torch.empty(0).device.type)
        module.table = nn.Parameter(torch.empty(*size))

    registry, plan = _probe_registry(constructor)
    for call in (lambda: build(plan, device="cpu", registry=registry),
                 lambda: parameter_counts(plan, registry=registry),
                 lambda: dry_run(plan, registry=registry)):
        devices.clear()
        with pytest.raises(HNDLError) as error:
            call()
        assert error.value.code == "E_RESOURCE" and error.value.location.node == "n0", error.value
        assert "overflows torch's 64-bit size arithmetic" in error.value.message
        assert "max_state_bytes" in error.value.message
        assert devices == ["meta"]


def test_a_size_overflow_in_a_node_measured_only_for_real_is_e_resource():
    devices = []

    def constructor(module):
        devices.append(torch.empty(0).device.type)
        if devices[-1] == "meta":
            raise NotImplementedError("this operator cannot be built on the meta device")
        module.table = nn.Parameter(torch.empty(2**62, 8))

    registry, plan = _probe_registry(constructor)
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu", registry=registry)
    assert error.value.code == "E_RESOURCE" and error.value.location.node == "n0"
    assert "Storage size calculation overflowed" in error.value.message
    assert devices == ["meta", "cpu"]


def test_operator_code_sees_the_limits_of_the_build_in_progress():
    seen = []
    registry, plan = _probe_registry(lambda module: seen.append(dict(active_limits())))
    build(plan, device="cpu", registry=registry, limits={"max_node_modules": 77})
    parameter_counts(plan, registry=registry, limits={"max_node_modules": 78})
    dry_run(plan, registry=registry, limits={"max_node_modules": 79})
    assert [entry["max_node_modules"] for entry in seen] == [77, 77, 78, 79]  # meta pass, real, probe, probe
    assert active_limits() is DEFAULT_LIMITS


# -- allocation failures, in a child process under an address-space cap ----------------------------------

CHILD = textwrap.dedent("""
    import json, resource, sys
    import torch
    import hndl, hndl.torch
    from hndl import HNDLError

    torch.set_num_threads(1)

    def address_space():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))

    cases = json.loads(sys.argv[1])
    saved = {name: hndl.resolve(case["source"], input_shape=tuple(case["input"]),
                                output_shape=tuple(case["output"])).to_json()
             for name, case in cases.items()}
    base = address_space()
    resource.setrlimit(resource.RLIMIT_AS, (base + int(sys.argv[2]), resource.RLIM_INFINITY))
    results = {}
    for name, text in saved.items():
        before = address_space()
        try:
            hndl.torch.restore(text, device="cpu", limits=cases[name].get("limits"))
            result = {"built": True}
        except HNDLError as error:
            result = {"code": error.code, "node": error.location.node, "message": error.message,
                      "remedies": list(error.remedies)}
        except BaseException as error:
            result = {"raw": f"{type(error).__name__}: {error}"}
        result["grown"] = address_space() - before
        results[name] = result
    print(json.dumps(results))
""")

MIB = 1 << 20
#: The child's address space may grow this much past what the imports and the plans took.
HEADROOM = 600 * MIB


def _linear_bytes(fan_in, fan_out):
    return (fan_in * fan_out + fan_out) * 4


def _default_cpu_budget():
    """The documented default state bound on cpu: the smaller of 64 GiB and physical memory."""
    return min(DEFAULT_LIMITS["max_state_bytes"], os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


@pytest.fixture(scope="module")
def capped_child():
    """Restore each case once in one child process capped at HEADROOM above its imports and plans."""
    width = int((_default_cpu_budget() / 4) ** 0.5) + 1  # linear(width) from width features: just over it
    cases = {
        # the case: 16 GiB, below the default bound but far above what the process may map
        "linear(65536)": {"source": "linear(65536)", "input": ["B", 65536], "output": ["B", 65536]},
        # 256 MiB built, then 2 GiB refused: the first node must not stay behind
        "two nodes": {"source": "linear(8192)\nlinear(65536)", "input": ["B", 8192], "output": ["B", 65536],
                      "limits": {"max_state_bytes": 64 << 30}},
        # more state than the default budget (the smaller of 64 GiB and physical memory)
        "over the budget": {"source": f"linear({width})", "input": ["B", width], "output": ["B", width]},
    }
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cases), str(HEADROOM)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_allocation_the_process_cannot_make_is_e_resource_naming_node_bytes_and_limit(capped_child):
    single = capped_child["linear(65536)"]
    assert single.get("code") == "E_RESOURCE", single
    assert single["node"] == "n0" and str(_linear_bytes(65536, 65536)) in single["message"]
    assert "max_state_bytes" in single["message"]
    assert any("limits['max_state_bytes']" in remedy for remedy in single["remedies"])
    pair = capped_child["two nodes"]
    assert pair.get("code") == "E_RESOURCE", pair
    assert pair["node"] == "n1" and f"needs {_linear_bytes(8192, 65536)} bytes" in pair["message"]
    assert "allocating it on cpu failed" in pair["message"]
    assert "limits['max_state_bytes']=68719476736" in pair["message"]
    assert pair["grown"] < _linear_bytes(8192, 8192) // 2, "the 256 MiB of the first node were not released"


def test_by_default_state_above_the_machine_memory_is_refused_before_allocating(capped_child):
    over = capped_child["over the budget"]
    assert over.get("code") == "E_RESOURCE", over
    assert over["node"] == "n0" and "would reach" in over["message"] and "max_state_bytes" in over["message"]
    below_64_gib = _default_cpu_budget() < DEFAULT_LIMITS["max_state_bytes"]
    assert (f"the {_default_cpu_budget()} bytes of physical memory" in over["message"]) == below_64_gib
    assert over["grown"] < 128 * MIB  # nothing was allocated: the node needs GiBs


def test_an_explicit_max_state_bytes_is_used_as_given_on_every_machine():
    from hndl.limits import validate_limits
    from hndl.torch.build import state_budget

    for value in (1 << 20, 64 << 30, 1 << 62):
        given = {"max_state_bytes": value}
        assert state_budget(validate_limits(given), torch.device("cpu"), explicit=True) == (
            value, f"limits['max_state_bytes']={value}")
