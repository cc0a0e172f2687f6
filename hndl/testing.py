"""The example harness: what every operator pack, first- or third-party, runs from its tests.

``check_operator(MyOperator)`` holds an operator to its declaration (§8, §14 "Operator
declarations"): the declaration is complete, and every example resolves identically through
configuration and through callable capture without allocating anything, survives a JSON round
trip, builds, runs forward and backward on every available device, keeps its finalize hook
idempotent, and matches the declared ``reference=`` in training and evaluation mode. An
operator with optional input ports (``name?``) needs examples that bind each such port and
examples that leave it unbound: its module (and reference) receives ``None`` there.

In a pack's tests::

    import pytest
    from hndl.testing import check_operator, example_cases

    from my_pack import OPERATORS

    @pytest.mark.parametrize("case", example_cases(OPERATORS), ids=str)
    def test_examples(case):
        case.check()

Every failure is an ``AssertionError`` naming the operator, the example and the step.
"""

from __future__ import annotations

import ast
import os
import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence
from unittest import mock

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from .contracts import batch_multiple
from .declaration import Example, OperatorSpec, spec_of
from .frontends.pipeline import resolve, resolve_callable
from .plan import ResolvedPlan, thaw
from .registry import Registry

__all__ = ["check_operator", "check_declaration", "check_example", "example_cases", "ExampleCase", "devices", "offline"]

#: The batch size the harness runs every example at (a k*B port gets k times as many rows).
BATCH = 2


def offline() -> bool:
    """True unless the host opted in to downloads (``HNDL_PRETRAINED_DOWNLOAD``) and left the hub
    reachable (``HF_HUB_OFFLINE`` unset): HNDL fetches nothing otherwise (SECURITY.md)."""
    def enabled(name: str) -> bool:
        return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")

    return enabled("HF_HUB_OFFLINE") or not enabled("HNDL_PRETRAINED_DOWNLOAD")


def devices() -> tuple[str, ...]:
    """Every device this machine can run an example on: cpu, plus each visible CUDA device."""
    return ("cpu",) + tuple(f"cuda:{index}" for index in range(torch.cuda.device_count()))


# -- the declaration -------------------------------------------------------------------------------
def check_declaration(cls: type) -> OperatorSpec:
    """The fields the catalog publishes are all present: summary, docstring, category, help, examples."""
    spec = spec_of(cls)
    if spec is None:
        raise AssertionError(f"{cls.__qualname__} carries no @operator declaration")
    problems = []
    if not spec.summary:
        problems.append("no summary")
    if not spec.docstring.strip():
        problems.append("no class docstring (the catalog's long description)")
    if not spec.category:
        problems.append("no category (the catalog index groups by it)")
    problems += [f"argument {name!r} has no help text" for name, arg in spec.args.items() if not arg.help]
    if not spec.examples:
        problems.append("no example")
    if problems:
        raise AssertionError(f"{spec.qualified}: " + "; ".join(problems))
    return spec


# -- resolution without effects --------------------------------------------------------------------
class _RefuseTensorOps(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        raise AssertionError(f"resolution ran the tensor operation {func}")


def _refuse_module_construction(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("resolution constructed an nn.Module")


@contextmanager
def _allocation_free(what: str) -> Iterator[None]:
    """Refuse tensor operations and module construction; the RNG states must come out unchanged."""
    torch_rng, python_rng = torch.get_rng_state(), random.getstate()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    with mock.patch.object(nn.Module, "__init__", _refuse_module_construction), _RefuseTensorOps():
        yield
    if not torch.equal(torch.get_rng_state(), torch_rng) or random.getstate() != python_rng or (
        cuda_rng is not None and not all(map(torch.equal, torch.cuda.get_rng_state_all(), cuda_rng))
    ):
        raise AssertionError(f"{what} drew random numbers")


# -- the example as a callable -----------------------------------------------------------------------
def _input_names(example: Example) -> tuple[str, ...]:
    shape = example.input_shape
    return tuple(shape) if isinstance(shape, dict) else ("x",)


def _output_names(example: Example) -> Optional[tuple[str, ...]]:
    shape = example.output_shape
    return tuple(shape) if isinstance(shape, dict) else None


def example_callable(example: Example, registry: Registry) -> Callable[..., Any]:
    """The example's configuration written as a native entry function over ``registry.ops``.

    Configuration and capture share current-tensor semantics, so the same statements run as
    Python: each alias is bound to its ``ops`` entry, the inputs are the parameters, and the
    function returns the named outputs, an explicit ``out``, or nothing (current).
    """
    tree = ast.parse(example.source)
    bound = {target.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
             for target in ast.walk(node) if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store)}
    names = _input_names(example)
    outputs = _output_names(example)
    if outputs is not None:
        returned = "{" + ", ".join(f"{name!r}: {name}" for name in outputs) + "}"
    else:
        returned = "out" if "out" in bound else "None"
    body = "\n".join("    " + line for line in example.source.splitlines())
    text = f"def entry({', '.join(names)}):\n{body}\n    return {returned}\n"
    ops = registry.ops
    namespace: dict[str, Any] = {alias: getattr(ops, alias) for alias in registry.aliases()}
    exec(compile(text, f"<example of {example.source.splitlines()[0][:40]!r}>", "exec"), namespace)
    return namespace["entry"]


# -- running a plan -------------------------------------------------------------------------------------
def _extents(shape: Sequence[Any], symbol: str) -> list[int]:
    """A port shape at the harness's batch size: ``k*B`` entries of the plan's batch symbol scaled."""
    return [entry if isinstance(entry, int) else batch_multiple(entry, symbol) * BATCH for entry in shape]


def _make_input(extents: list[int], dtype: str, device: str, generator: torch.Generator) -> torch.Tensor:
    if dtype in ("int64", "int32", "bool"):
        # Small ids are valid for any embedding-like consumer (every vocabulary has at least two).
        values = torch.randint(0, 2, extents, generator=generator)
        return values.to(device=device, dtype=getattr(torch, dtype))
    values = torch.randn(extents, generator=generator, dtype=torch.float32)
    return values.to(device=device, dtype=getattr(torch, dtype)).requires_grad_()


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [item for key in value for item in _tensors(value[key])]
    if isinstance(value, (tuple, list)):
        return [item for element in value for item in _tensors(element)]
    return []


def _tolerances(dtype: torch.dtype) -> dict[str, float]:
    if dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 2e-2, "atol": 2e-2}
    return {"rtol": 1e-4, "atol": 1e-5}


class _ReferenceProbe:
    """Records what each node of one operator received and returned, with the RNG state before it."""

    def __init__(self, model: nn.Module, plan: ResolvedPlan, spec: OperatorSpec) -> None:
        self.calls: list[tuple[str, nn.Module, tuple, Any, Any]] = []
        self.handles = []
        for node in plan.nodes:
            if node.op == spec.qualified:
                module = model.nodes[f"n_{node.id}"]
                self.handles.append(module.register_forward_pre_hook(self._before))
                self.handles.append(module.register_forward_hook(self._after(node.id)))
        self._rng: Any = None

    def _before(self, module: nn.Module, args: tuple) -> None:
        self._rng = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)

    def _after(self, node_id: str) -> Callable:
        def record(module: nn.Module, args: tuple, output: Any) -> None:
            saved = tuple(arg.detach().clone() if isinstance(arg, torch.Tensor) else arg for arg in args)
            self.calls.append((node_id, module, saved, [t.detach().clone() for t in _tensors(output)], self._rng))
        return record

    def compare(self, spec: OperatorSpec, where: str) -> None:
        for node_id, module, args, produced, (cpu_rng, cuda_rng) in self.calls:
            reference = spec.reference(module)
            # Replay the RNG state the node saw; fork_rng puts every generator back afterwards.
            with torch.random.fork_rng(devices=range(torch.cuda.device_count())), torch.no_grad():
                torch.set_rng_state(cpu_rng)
                if cuda_rng is not None:
                    torch.cuda.set_rng_state_all(cuda_rng)
                expected = [t.detach() for t in _tensors(reference(*args))]
            if len(expected) != len(produced):
                raise AssertionError(f"{where}: node {node_id} returned {len(produced)} tensor(s), "
                                     f"the reference {len(expected)}")
            for ours, theirs in zip(produced, expected):
                try:
                    torch.testing.assert_close(ours, theirs, **_tolerances(ours.dtype))
                except AssertionError as error:
                    raise AssertionError(f"{where}: node {node_id} differs from its reference: {error}") from None
        self.calls.clear()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _run(plan: ResolvedPlan, spec: OperatorSpec, registry: Registry, device: str, where: str) -> None:
    from .torch import build  # hndl.torch loads only once an example runs

    model = build(plan, device=device, registry=registry, initialization_seed=0)
    generator = torch.Generator().manual_seed(0)
    inputs = {item["name"]: _make_input(_extents(item["shape"], plan.batch), item["dtype"], device, generator)
              for item in plan.inputs}
    probe = _ReferenceProbe(model, plan, spec) if spec.reference is not None else None
    try:
        for training in (True, False):
            model.train(training)
            outputs = model(**inputs)
            for item in plan.outputs:
                value = outputs[item["name"]]
                expected = _extents(item["shape"], plan.batch)
                if list(value.shape) != expected:
                    raise AssertionError(f"{where}: output {item['name']!r} has shape {list(value.shape)}, "
                                         f"the plan says {expected}")
            mode = "training" if training else "evaluation"
            if training:
                floating = [t for t in _tensors(outputs) if t.is_floating_point() and t.requires_grad]
                if floating:
                    sum(t.float().sum() for t in floating).backward()
                    gradients = [t.grad for t in inputs.values() if t.grad is not None]
                    gradients += [p.grad for p in model.parameters() if p.grad is not None]
                    if not gradients:
                        raise AssertionError(f"{where}: backward reached no input and no parameter")
                    if not all(torch.isfinite(g).all() for g in gradients):
                        raise AssertionError(f"{where}: backward produced a non-finite gradient")
            if probe is not None:
                probe.compare(spec, f"{where} ({mode} mode)")
    finally:
        if probe is not None:
            probe.remove()


def _check_finalize(plan: ResolvedPlan, spec: OperatorSpec, where: str) -> None:
    """Running a finalize hook again on its own result changes nothing."""
    for node in plan.nodes:
        if node.op != spec.qualified or spec.finalize is None:
            continue
        args = thaw(node.args)
        again = dict(args)
        spec.finalize(again, thaw(node.input_shapes), thaw(node.output_shapes))
        if again != args:
            raise AssertionError(f"{where}: finalize is not idempotent on node {node.id}: {args} -> {again}")


# -- one example -------------------------------------------------------------------------------------
def check_example(cls: type, example: Example, *, registry: Optional[Registry] = None,
                  on: Optional[Iterable[str]] = None) -> ResolvedPlan:
    """Hold one example to §14 "Operator declarations"; return its plan."""
    spec = spec_of(cls)
    registry = _registry_for(spec, registry)
    where = f"{spec.qualified} example {example.source.splitlines()[0]!r}"
    contracts = dict(input_shape=example.input_shape, output_shape=example.output_shape,
                     input_dtype=example.input_dtype, registry=registry)
    _warm_up()
    with _allocation_free(f"{where}: resolving the configuration"):
        configured = resolve(example.source, **contracts)
    entry = example_callable(example, registry)
    with _allocation_free(f"{where}: capturing the callable"):
        captured = resolve_callable(entry, **contracts)
    if not any(node.op == spec.qualified for node in configured.nodes):
        raise AssertionError(f"{where}: the example does not use {spec.qualified}")
    if configured.semantic_digest != captured.semantic_digest:
        changes = "; ".join(map(str, configured.diff(captured))) or "same nodes, different digest"
        raise AssertionError(f"{where}: configuration and capture resolve differently: {changes}")
    restored = ResolvedPlan.from_json(configured.to_json(), registry=registry)
    if restored != configured or restored.semantic_digest != configured.semantic_digest:
        raise AssertionError(f"{where}: the plan does not survive a JSON round trip")
    _check_finalize(configured, spec, where)
    for device in (devices() if on is None else tuple(on)):
        try:
            _run(restored, spec, registry, device, f"{where} on {device}")
        except AssertionError:
            raise
        except Exception as error:  # the built module failed: report it as the harness's finding
            raise AssertionError(f"{where} on {device}: {type(error).__name__}: {error}") from error
    return configured


def _registry_for(spec: OperatorSpec, registry: Optional[Registry]) -> Registry:
    if registry is not None:
        return registry
    registry = Registry.builtins()
    if not registry.has(spec):
        registry.add(spec.cls)
    return registry


_warmed = False


def _warm_up() -> None:
    """Finish torch's lazy imports before the allocation guard is installed."""
    global _warmed
    if not _warmed:
        import torch._dynamo  # noqa: F401

        with _RefuseTensorOps():
            pass
        _warmed = True


# -- an operator, and parametrisation --------------------------------------------------------------
def check_operator(cls: type, *, registry: Optional[Registry] = None, on: Optional[Iterable[str]] = None) -> None:
    """Check the declaration, then every example (see the module docstring)."""
    spec = check_declaration(cls)
    plans = [check_example(cls, example, registry=registry, on=on) for example in spec.examples]
    _check_optional_coverage(spec, plans)


def _check_optional_coverage(spec: OperatorSpec, plans: Iterable[ResolvedPlan]) -> None:
    """Every optional input port (``name?``) is bound in some example and unbound in another, so the
    harness runs the module (and its ``reference=``) both with a tensor and with ``None`` there."""
    optional = [port for port in spec.input_ports() if port in spec.optional_inputs] if spec.optional_inputs else []
    if not optional:
        return
    nodes = [node for plan in plans for node in plan.nodes if node.op == spec.qualified]
    problems = []
    for port in optional:
        if not any(port in node.inputs for node in nodes):
            problems.append(f"no example binds optional port {port!r}")
        if all(port in node.inputs for node in nodes):
            problems.append(f"every example binds optional port {port!r}; none leaves it unbound")
    if problems:
        raise AssertionError(f"{spec.qualified}: " + "; ".join(problems)
                             + " (add an example for each case, so both paths run against the reference)")


@dataclass(frozen=True)
class ExampleCase:
    """One (operator, example) pair, for ``pytest.mark.parametrize(..., ids=str)``."""

    cls: type
    index: int
    registry: Optional[Registry] = None

    @property
    def example(self) -> Example:
        return spec_of(self.cls).examples[self.index]

    def check(self, *, on: Optional[Iterable[str]] = None) -> Optional[ResolvedPlan]:
        """Check the declaration and this example; an example that needs the network is skipped
        offline (pytest's skip, with the reason) rather than failing or passing unchecked."""
        check_declaration(self.cls)
        if self.example.network and offline():
            import pytest

            pytest.skip(f"{self}: the example needs the network, and downloads are off (HF_HUB_OFFLINE=1, "
                        "or HNDL_PRETRAINED_DOWNLOAD is not 1)")
        return check_example(self.cls, self.example, registry=self.registry, on=on)

    def __str__(self) -> str:
        return f"{getattr(spec_of(self.cls), 'alias', self.cls.__qualname__)}-{self.index}"


def example_cases(operators: Iterable[type], *, registry: Optional[Registry] = None) -> list[ExampleCase]:
    """Every example of every operator, one case each (an operator without examples gets one
    case that fails in ``check`` rather than silently disappearing)."""
    cases = []
    for cls in operators:
        spec = spec_of(cls)
        count = len(spec.examples) if spec is not None else 0
        cases += [ExampleCase(cls, index, registry) for index in range(max(count, 1))]
    return cases
