"""Training and deployment tools on a built network, each beside its handwritten twin.

Issue 28's tools that already work with a built network and must keep working: Lightning
(``Trainer.fit`` and ``load_from_checkpoint``), accelerate (``prepare``, ``save_state``,
``load_state``), torchview (``draw_graph``) and ONNX (the dynamo and the classic TorchScript
exporter with a dynamic batch, checked by ``onnx.checker`` and run in onnxruntime). Every test
runs the real library (pinned dev dependencies; nothing is downloaded) on three small networks,
an MLP, a conv net with batch norm and a tiny pre-norm attention layer (``attention@2`` fed by a
``rotary_embedding`` node, a residual ``add``), and runs it the same way on the same architecture
written as plain torch modules holding a copy of the weights: what the tool produces for the
network must equal what it produces for the twin. docs/backend.md's "Works with" table names
these tests.

No warning may come from HNDL's code under a tool. The classic exporter traces with
``torch.jit.trace``, where sizes are traced tensors: ``apply_rotary`` compared two of them and
warned that the trace "might not generalize" (it now records its general form while tracing);
``test_onnx_export_with_a_dynamic_batch_runs_in_onnxruntime_like_the_handwritten_twin[attention-classic]``
is the regression test. The same exporter has no ``enable_gqa`` for scaled_dot_product_attention,
so ``attention`` and ``scaled_dot_product_attention`` with grouped key/value heads failed
(``AssertionError: conversion of scaled_dot_product_attention not implemented if enable_gqa is
True``); while tracing they now repeat the key/value heads, as transformers' ``repeat_kv`` does
(the ``[llama-attention-classic]`` and ``[grouped-primitives-classic]`` cases). And the window
operators counted windows as ``-(-extent // window)``, which the traced program turns into a
truncating division: a padded map gave wrong values (``window_partition``) or an onnxruntime
Reshape failure (``window_attention``, ``swin_block``; the ``[shifted-windows-classic]`` case).
"""

from __future__ import annotations

import math
import os
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable

import lightning
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hndl.torch import network, restore

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRECTORIES = (str(ROOT / "hndl"), str(ROOT / "plugins"))

MLP = "linear(32)\nrelu()\nlinear()"
CONV = """
conv(8, kernel_size=3, padding=1)
batch_norm()
relu()
max_pool(kernel_size=2)
flatten()
linear()
"""
ATTENTION = """
h = linear(x, 16)
r = rotary_embedding(h)
n = layer_norm(h)
a = attention(n, 2, causal=True, rope=r)
h = add(h, a)
linear(h)
"""
THETA = 10000.0


class HandwrittenAttention(nn.Module):
    """Causal multi-head self-attention with rotary positions, written out: one fused input
    projection (``in_proj_weight``, ``in_proj_bias``), rotate-half rotary on queries and keys,
    softmax(Q K^T / sqrt(E) + causal mask) V, and the output projection."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(width // heads)
        self.in_proj_weight = nn.Parameter(torch.empty(3 * width, width))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * width))
        self.out_proj = nn.Linear(width, width)

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        scores = q @ k.transpose(-2, -1) * self.scale
        future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(batch, length, width))


class HandwrittenTransformer(nn.Module):
    """``ATTENTION`` written by hand: embed, pre-norm rotary attention with a residual, head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.attention = HandwrittenAttention(16, heads=2)
        self.head = nn.Linear(16, 4)
        head_width = 8
        exponents = torch.arange(0, head_width, 2, dtype=torch.float32) / head_width
        self.register_buffer("inv_freq", 1.0 / THETA ** exponents, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        positions = torch.arange(h.shape[1], dtype=torch.float32, device=h.device)
        angles = positions[:, None] * self.inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        return self.head(h + self.attention(self.norm(h), angles.cos(), angles.sin()))


class HandwrittenGroupedAttention(nn.Module):
    """Grouped-query causal attention as transformers' LLaMA writes it: separate q/k/v/out
    projections, optional rotate-half rotary, the key/value heads repeated to the query heads
    (``repeat_kv``), softmax(Q K^T / sqrt(E) + causal mask) V."""

    def __init__(self, width: int, heads: int, kv_heads: int, bias: bool, theta: float | None = None) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.size = heads, kv_heads, width // heads
        self.q_proj = nn.Linear(width, width, bias=bias)
        self.k_proj = nn.Linear(width, kv_heads * self.size, bias=bias)
        self.v_proj = nn.Linear(width, kv_heads * self.size, bias=bias)
        self.out_proj = nn.Linear(width, width, bias=bias)
        inv_freq = None if theta is None else 1.0 / theta ** (torch.arange(0, self.size, 2, dtype=torch.float32) /
                                                              self.size)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q = self.q_proj(x).view(batch, length, self.heads, self.size).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.kv_heads, self.size).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.kv_heads, self.size).transpose(1, 2)
        if self.inv_freq is not None:
            angles = torch.arange(length, dtype=torch.float32, device=x.device)[:, None] * self.inv_freq[None, :]
            angles = torch.cat((angles, angles), dim=-1)
            q = HandwrittenAttention.rotate(q, angles.cos(), angles.sin())
            k = HandwrittenAttention.rotate(k, angles.cos(), angles.sin())
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.size)
        future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        mixed = scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v
        return self.out_proj(mixed.transpose(1, 2).reshape(batch, length, width))


def _mlp_twin() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))


def _conv_twin() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(128, 10))


def _swin_twin() -> nn.Module:
    from torchvision.models.swin_transformer import SwinTransformerBlock
    from torchvision.ops.misc import Permute

    return nn.Sequential(Permute([0, 2, 3, 1]), SwinTransformerBlock(16, 2, [4, 4], [2, 2], mlp_ratio=2.0),
                         Permute([0, 3, 1, 2]))


#: name -> (HNDL source, input shape, output shape, twin factory, example input shape at batch 3)
NETWORKS: dict[str, tuple[str, tuple, tuple, Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp": (MLP, ("B", 8), ("B", 4), _mlp_twin, (3, 8)),
    "conv": (CONV, ("B", 3, 8, 8), ("B", 10), _conv_twin, (3, 3, 8, 8)),
    "attention": (ATTENTION, ("B", 6, 8), ("B", 6, 4), HandwrittenTransformer, (3, 6, 8)),
}
NAMES = list(NETWORKS)
#: Exported only: grouped-query attention, fused and from the primitives (torch's TorchScript exporter has no
#: ``enable_gqa``), and a shifted-window Swin block on a map it pads (6 x 6 in 4 x 4 windows) beside torchvision's
#: SwinTransformerBlock, whose parameters and buffers it holds in the same order.
GROUPED = {
    "llama-attention": ("attention(4, kv_heads=2, causal=True, bias=False, qkv='separate', rope_theta=10000.0)",
                        ("B", 6, 32), ("B", 6, 32),
                        lambda: HandwrittenGroupedAttention(32, 4, 2, bias=False, theta=THETA), (3, 6, 32)),
    "grouped-primitives": ("""
q = split_heads(linear(x, 32), 4)
k = split_heads(linear(x, 16), 2)
v = split_heads(linear(x, 16), 2)
o = scaled_dot_product_attention(q, k, v, causal=True)
linear(merge_heads(o), 32)
""", ("B", 6, 32), ("B", 6, 32), lambda: HandwrittenGroupedAttention(32, 4, 2, bias=True), (3, 6, 32)),
    "shifted-windows": ("swin_block(2, 4, 2, mlp_ratio=2.0)", ("B", 16, 6, 6), ("B", 16, 6, 6), _swin_twin,
                        (3, 16, 6, 6)),
}
NETWORKS.update(GROUPED)


def build(name: str) -> nn.Module:
    source, input_shape, output_shape, _, _ = NETWORKS[name]
    return network(source, input_shape=input_shape, output_shape=output_shape, device="cpu", initialization_seed=0)


def copy_state(source: nn.Module, target: nn.Module) -> None:
    """Copy state entry by entry, in order (both register their state in the same layer order)."""
    ours, theirs = source.state_dict(), target.state_dict()
    assert [value.shape for value in ours.values()] == [value.shape for value in theirs.values()]
    target.load_state_dict(dict(zip(theirs, ours.values())))


def pair(name: str) -> tuple[nn.Module, nn.Module]:
    """The built network and its handwritten twin holding a copy of its state."""
    model = build(name)
    twin = NETWORKS[name][3]()
    copy_state(model, twin)
    return model, twin


def inputs(name: str, batch: int = 3, seed: int = 0) -> torch.Tensor:
    shape = (batch, *NETWORKS[name][4][1:])
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def dataset(name: str, samples: int = 24) -> torch.utils.data.TensorDataset:
    """Inputs and regression targets of the network's output shape (fixed seed, no shuffling)."""
    x = inputs(name, samples, seed=1)
    with torch.no_grad():
        out_shape = build(name)(x[:1]).shape[1:]
    targets = torch.randn(samples, *out_shape, generator=torch.Generator().manual_seed(2))
    return torch.utils.data.TensorDataset(x, targets)


def assert_states_close(ours: nn.Module, theirs: nn.Module, **tolerance) -> None:
    mine, other = ours.state_dict(), theirs.state_dict()
    assert len(mine) == len(other)
    for (key, value), (their_key, expected) in zip(mine.items(), other.items()):
        torch.testing.assert_close(value, expected, **tolerance,
                                   msg=lambda text, key=key, other=their_key: f"{key} vs {other}: {text}")


def hndl_warnings(caught) -> list[str]:
    return [f"{item.filename}:{item.lineno}: {item.message}" for item in caught
            if str(item.filename).startswith(PACKAGE_DIRECTORIES)]


def test_the_twins_compute_what_the_networks_compute():
    for name in NETWORKS:
        model, twin = pair(name)
        model.eval()
        twin.eval()
        x = inputs(name)
        torch.testing.assert_close(model(x), twin(x))


# -- Lightning ------------------------------------------------------------------------------------------


class Regression(lightning.LightningModule):
    """A LightningModule around a network (rebuilt from its saved plan) or around a twin."""

    def __init__(self, plan: str = "", twin: str = "") -> None:
        super().__init__()
        self.save_hyperparameters()
        # The checkpoint carries the plan as a hyperparameter: load_from_checkpoint rebuilds the network from it.
        self.model = restore(plan, device="cpu", initialization_seed=0) if plan else NETWORKS[twin][3]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch, index):
        x, target = batch
        return F.mse_loss(self(x), target)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


@pytest.fixture
def lightning_environment():
    """A Trainer sets environment variables for the process (PYTORCH_NVML_BASED_CUDA_CHECK, ...): undo them."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _fit(module: lightning.LightningModule, name: str, root: Path) -> lightning.Trainer:
    """Three SGD steps on CPU; the one checkpoint lands under ``root`` (no logger, no progress bar)."""
    trainer = lightning.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                                enable_model_summary=False, default_root_dir=root)
    loader = torch.utils.data.DataLoader(dataset(name), batch_size=8)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="lightning")
        warnings.filterwarnings("ignore", message=".*(LeafSpec|num_workers|weights_only).*")
        trainer.fit(module, loader)
    assert trainer.global_step == 3
    checkpoint = Path(trainer.checkpoint_callback.best_model_path)
    assert checkpoint.is_file() and checkpoint.is_relative_to(root)
    return trainer


@pytest.mark.parametrize("name", NAMES)
def test_lightning_fit_and_load_from_checkpoint_match_the_handwritten_twin(name, tmp_path, lightning_environment):
    model, _ = pair(name)
    ours = Regression(plan=model.plan.to_json())
    copy_state(model, ours.model)
    theirs = Regression(twin=name)
    copy_state(model, theirs.model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = _fit(ours, name, tmp_path / "hndl")
    assert hndl_warnings(caught) == []
    their_trainer = _fit(theirs, name, tmp_path / "twin")
    moved = [key for key, value in ours.model.state_dict().items() if not torch.equal(value, model.state_dict()[key])]
    assert moved, "fit changed nothing"
    assert_states_close(ours.model, theirs.model)

    # load_from_checkpoint rebuilds the network from the plan in the checkpoint's hyperparameters.
    loaded = Regression.load_from_checkpoint(trainer.checkpoint_callback.best_model_path, map_location="cpu")
    their_loaded = Regression.load_from_checkpoint(their_trainer.checkpoint_callback.best_model_path,
                                                   map_location="cpu")
    assert type(loaded.model) is type(ours.model)
    assert loaded.model.plan == ours.model.plan
    assert_states_close(loaded.model, ours.model, rtol=0, atol=0)
    assert_states_close(loaded.model, their_loaded.model)
    loaded.eval()
    their_loaded.eval()
    x = inputs(name, batch=5, seed=3)
    torch.testing.assert_close(loaded(x), their_loaded(x))


# -- accelerate -----------------------------------------------------------------------------------------
@pytest.fixture
def accelerator_state():
    """accelerate keeps its state in process-wide singletons and its load_state sets torch's RNG: undo both."""
    from accelerate.state import AcceleratorState, GradientState

    rng = torch.random.get_rng_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    torch.random.set_rng_state(rng)


def _accelerate_run(module: nn.Module, name: str, directory: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Two steps, save_state, two more steps, load_state, one step: the states after each stage."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(dataset(name, 16), batch_size=4)
    prepared, optimizer, loader = accelerator.prepare(module, optimizer, loader)
    assert accelerator.unwrap_model(prepared) is module

    def steps(count: int) -> None:
        for _, (x, target) in zip(range(count), loader):
            loss = F.mse_loss(prepared(x), target)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()

    def snapshot() -> dict[str, torch.Tensor]:
        return {key: value.detach().clone() for key, value in prepared.state_dict().items()}

    stages = {}
    steps(2)
    stages["saved"] = snapshot()
    accelerator.save_state(directory)
    steps(2)
    stages["moved on"] = snapshot()
    accelerator.load_state(directory)
    stages["loaded"] = snapshot()
    steps(1)
    stages["resumed"] = snapshot()
    return stages


@pytest.mark.parametrize("name", NAMES)
def test_accelerate_prepare_save_state_and_load_state_match_the_handwritten_twin(name, tmp_path, accelerator_state):
    model, twin = pair(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = _accelerate_run(model, name, tmp_path / "hndl")
    assert hndl_warnings(caught) == []
    theirs = _accelerate_run(twin, name, tmp_path / "twin")
    assert sorted(path.name for path in (tmp_path / "hndl").iterdir()) == sorted(
        path.name for path in (tmp_path / "twin").iterdir())
    for key in ours["saved"]:
        torch.testing.assert_close(ours["loaded"][key], ours["saved"][key], rtol=0, atol=0)
    moved = [key for key in ours["saved"] if not torch.equal(ours["moved on"][key], ours["saved"][key])]
    assert moved, "the two steps after save_state changed nothing, so load_state was not tested"
    for stage in ours:
        for (key, value), expected in zip(ours[stage].items(), theirs[stage].values()):
            torch.testing.assert_close(value, expected,
                                       msg=lambda text, key=key, stage=stage: f"{stage}, {key}: {text}")


# -- torchview --------------------------------------------------------------------------------------------
#: A node class that issue 28's item 2 turns into the torch class the twin uses (so both names count as one).
_SAME_LAYER = {"BatchNorm": "BatchNorm2d"}


def _drawn(module: nn.Module, shape: tuple[int, ...], depth: int):
    from torchview import draw_graph

    return draw_graph(module, input_size=shape, device="cpu", depth=depth, save_graph=False)


def _torch_layers(graph) -> Counter:
    """(class, input shapes, output shapes, depth) of every drawn module node that is a torch layer."""
    from torchview.computation_node import ModuleNode

    nodes = {id(node): node for edge in graph.edge_list for node in edge}.values()
    return Counter((_SAME_LAYER.get(node.name, node.name), repr(node.input_shape), repr(node.output_shape), node.depth)
                   for node in nodes if isinstance(node, ModuleNode)
                   and isinstance(getattr(nn, _SAME_LAYER.get(node.name, node.name), None), type))


def _tensors(graph) -> list[tuple[str, tuple]]:
    from torchview.computation_node import TensorNode

    nodes = {id(node): node for edge in graph.edge_list for node in edge}.values()
    return sorted((node.name, tuple(node.tensor_shape)) for node in nodes
                  if isinstance(node, TensorNode) and node.name in ("output-tensor", "auxiliary-tensor"))


@pytest.mark.parametrize("name", NAMES)
def test_torchview_draw_graph_draws_the_layers_of_the_handwritten_twin(name):
    model, twin = pair(name)
    shape = NETWORKS[name][4]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = _drawn(model, shape, depth=3)
    assert hndl_warnings(caught) == []
    theirs = _drawn(twin, shape, depth=3)
    assert _torch_layers(ours) == _torch_layers(theirs)
    assert _tensors(ours) == _tensors(theirs)
    assert sum(_torch_layers(ours).values()) >= 3
    # At depth 1 the network draws one box per node, named by the node's module class.
    from torchview.computation_node import ModuleNode

    top = _drawn(model, shape, depth=1)
    boxes = Counter(node.name for node in {id(n): n for edge in top.edge_list for n in edge}.values()
                    if isinstance(node, ModuleNode))
    assert boxes == Counter(type(module).__name__ for module in model.nodes.values())
    source = top.visual_graph.source
    assert "input-tensor" in source and "output-tensor" in source and str(shape) in source


# -- ONNX -----------------------------------------------------------------------------------------------
def _export(module: nn.Module, x: torch.Tensor, path: Path, exporter: str) -> None:
    if exporter == "dynamo":
        from torch.export import Dim

        program = torch.onnx.export(module, (x,), dynamo=True, input_names=["x"], output_names=["out"],
                                    dynamic_shapes=({0: Dim("batch")},), verbose=False)
        program.save(str(path))
    else:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*legacy TorchScript-based ONNX.*")
            warnings.filterwarnings("ignore", category=DeprecationWarning, message="The feature will be removed")
            torch.onnx.export(module, (x,), str(path), dynamo=False, input_names=["x"], output_names=["out"],
                              dynamic_axes={"x": {0: "batch"}, "out": {0: "batch"}})


def _session(path: Path):
    import onnx
    import onnxruntime

    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("exporter", ["dynamo", "classic"])
@pytest.mark.parametrize("name", NAMES + list(GROUPED))
def test_onnx_export_with_a_dynamic_batch_runs_in_onnxruntime_like_the_handwritten_twin(name, exporter, tmp_path,
                                                                                        capsys):
    model, twin = pair(name)
    model.eval()
    twin.eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _export(model, inputs(name), tmp_path / "hndl.onnx", exporter)
    assert hndl_warnings(caught) == []
    _export(twin, inputs(name), tmp_path / "twin.onnx", exporter)
    ours, theirs = _session(tmp_path / "hndl.onnx"), _session(tmp_path / "twin.onnx")
    assert [port.name for port in ours.get_inputs()] == ["x"]
    assert [port.name for port in ours.get_outputs()] == ["out"]
    assert not isinstance(ours.get_inputs()[0].shape[0], int), "the batch axis is not dynamic"
    for batch in (1, 2, 7):
        x = inputs(name, batch, seed=batch)
        got = torch.from_numpy(ours.run(None, {"x": x.numpy()})[0])
        expected = torch.from_numpy(theirs.run(None, {"x": x.numpy()})[0])
        assert got.shape[0] == batch
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(expected, twin(x), rtol=1e-4, atol=1e-5)
    capsys.readouterr()  # the dynamo exporter reports its progress on stdout


@pytest.mark.parametrize("source, input_shape, output_shape", [
    ("linear(24)\npositional_embedding()\nlinear()", ("B", 10, 16), ("B", 10, 16)),
    ("positional_embedding(max_length=32)", ("B", 10, 16), ("B", 10, 16)),
    ("window_partition(4)", ("B", 8, 8, 8), ("B", 4, 16, 8)),
    ("window_partition((2, 3))\nwindow_merge((2, 3))\nconv(kernel_size=1)", ("B", 3, 5, 5), ("B", 3, 5, 5)),
    ("a, b = chunk(2)\nadd(a, b)", ("B", 8), ("B", 4)),
], ids=["positional_embedding", "positional_embedding-max_length", "window_partition", "window_merge", "chunk"])
def test_the_classic_onnx_exporter_traces_these_operators_without_hndl_warnings(source, input_shape, output_shape,
                                                                                tmp_path):
    """Each compared a traced size in Python (a TracerWarning: "the trace might not generalize"):
    positional_embedding its table's length, the window operators an unshifted axis's extent (a shifted
    window_partition, which learns the map size only from its input, still does), chunk its extent's
    divisibility."""
    model = network(source, input_shape=input_shape, output_shape=output_shape, device="cpu",
                    initialization_seed=0).eval()
    x = torch.randn(3, *input_shape[1:], generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _export(model, x, tmp_path / "model.onnx", "classic")
    assert hndl_warnings(caught) == []
    session = _session(tmp_path / "model.onnx")
    for batch in (1, 5):
        x = torch.randn(batch, *input_shape[1:], generator=torch.Generator().manual_seed(batch))
        got = torch.from_numpy(session.run(None, {"x": x.numpy()})[0])
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)
