"""FSDP2's large-model recipe over gloo (issue 28, item 3): meta build, ``fully_shard``, ``to_empty``,
``hndl.torch.initialize``.

Two worker processes (gloo, CPU, rendezvous on 127.0.0.1 and a free port) each build the network
on the meta device (nothing allocated), shard every node with parameters and then the whole
network with ``fully_shard`` over a CPU device mesh, allocate with ``to_empty(device="cpu")`` and
call ``initialize(model)``. Each reports its state (DTensor shards gathered with ``full_tensor``)
and its non-persistent buffers: exactly a direct build's with the same seed, the rotary
``inv_freq`` table included. Each then takes one SGD step on its half of a batch; the parameters
equal those the parent reaches with one single-process step on the combined batch.

Workers are spawned as in tests/reliability/test_distributed.py: rank 0 hosts the rendezvous
store and waits for the others' results before it leaves, and every rank leaves with
``os._exit(0)`` once its result file is written.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from hndl.torch import network


SOURCE = ("linear(32)\nattention(4, kv_heads=2, causal=True, bias=False, qkv='separate', rope_theta=10000.0)\n"
          "layer_norm()\nlinear(24, trainable=False)\ngelu()\nlinear()")
CONTRACT = {"input_shape": ["B", 6, 16], "output_shape": ["B", 6, 16]}
SEED = 7
LR = 0.1
WORLD = 2

WORKER = textwrap.dedent(
    """
    import json, os, sys, warnings
    sys.path[:0] = json.loads(os.environ["HNDL_TEST_SYS_PATH"])
    import torch
    import torch.distributed as dist
    from torch import nn
    from hndl.torch import initialize, network

    warnings.simplefilter("ignore")  # FSDP2 notes that a layer returned a view; the twin's would too
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    directory = sys.argv[1]
    with open(os.path.join(directory, "spec.json"), encoding="utf-8") as handle:
        spec = json.load(handle)
    model = network(spec["source"], **spec["contract"], device="meta", initialization_seed=spec["seed"])
    on_meta = all(tensor.is_meta for tensor in [*model.parameters(), *model.buffers()])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.nodes.values():
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    initialize(model)

    def gathered():
        return {key: (value.full_tensor() if hasattr(value, "full_tensor") else value).detach().clone()
                for key, value in model.state_dict().items()}

    initial = gathered()
    buffers = {key: value.detach().clone() for key, value in model.named_buffers()}
    sharded = sorted(key for key, value in model.state_dict().items() if hasattr(value, "full_tensor"))
    data = torch.load(os.path.join(directory, "batch.pt"), weights_only=True)
    x, y = data["x"].chunk(world)[rank], data["y"].chunk(world)[rank]
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=spec["lr"])
    optimizer.zero_grad()
    out = model(x)
    loss = nn.functional.mse_loss(out, y)
    loss.backward()
    optimizer.step()
    after = gathered()
    dist.barrier()
    dist.destroy_process_group()
    result = os.path.join(directory, f"rank{rank}.pt")
    torch.save({"on_meta": on_meta, "initial": initial, "buffers": buffers, "sharded": sharded,
                "out": out.detach(), "after": after, "type": type(model).__name__}, result + ".tmp")
    os.replace(result + ".tmp", result)
    if rank == 0:  # the store's host stays up until every other rank has finished its teardown
        import time
        deadline = time.monotonic() + 240
        others = [os.path.join(directory, f"rank{other}.pt") for other in range(1, world)]
        while not all(os.path.exists(path) for path in others) and time.monotonic() < deadline:
            time.sleep(0.05)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
    """
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _launch(tmp_path) -> list[dict]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    port = _free_port()
    processes = []
    for rank in range(WORLD):
        env = {
            **os.environ,
            "RANK": str(rank), "WORLD_SIZE": str(WORLD), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "HNDL_TEST_SYS_PATH": json.dumps(sys.path),
        }
        processes.append(subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=300)
            outputs.append((process.returncode, out, err))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for rank, (code, out, err) in enumerate(outputs):
        assert code == 0, f"rank {rank} failed ({code}):\n{out[-2000:]}\n{err[-4000:]}"
    return [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in range(WORLD)]


def test_fsdp2_meta_recipe_with_gloo_initializes_like_a_direct_build_and_trains_like_one_process(tmp_path):
    spec = {"source": SOURCE, "contract": CONTRACT, "seed": SEED, "lr": LR}
    (tmp_path / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 16, generator=generator)
    y = torch.randn(4, 6, 16, generator=generator)
    torch.save({"x": x, "y": y}, tmp_path / "batch.pt")

    ranks = _launch(tmp_path)

    # the twin: a direct build on cpu with the same seed, one step on the combined batch
    model = network(SOURCE, **CONTRACT, device="cpu", initialization_seed=SEED)
    initial = {key: value.detach().clone() for key, value in model.state_dict().items()}
    buffers = {key: value.detach().clone() for key, value in model.named_buffers()}
    outputs = [model(half).detach() for half in x.chunk(WORLD)]
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    expected = model.state_dict()

    assert "nodes.n_n1.inv_freq" in buffers and "nodes.n_n1.inv_freq" not in initial  # non-persistent table
    for rank, report in enumerate(ranks):
        assert report["on_meta"], f"rank {rank}: the meta build allocated"
        assert report["type"] == "FSDPNetwork"
        assert report["sharded"] == sorted(initial), f"rank {rank}: not every parameter was sharded"
        assert list(report["initial"]) == list(initial)
        for key, value in initial.items():
            assert torch.equal(report["initial"][key], value), (rank, key)
        for key, value in buffers.items():
            assert torch.equal(report["buffers"][key], value), (rank, key)
        torch.testing.assert_close(report["out"], outputs[rank], rtol=1e-5, atol=1e-6)
        for key, value in expected.items():
            torch.testing.assert_close(report["after"][key], value, rtol=1e-5, atol=1e-6,
                                       msg=lambda m, rank=rank, key=key: f"rank {rank} {key}: {m}")
        assert torch.equal(report["after"]["nodes.n_n3.weight"], initial["nodes.n_n3.weight"])  # frozen
        assert any(not torch.equal(report["after"][key], initial[key]) for key in initial)  # it did train
    for key in expected:
        assert torch.equal(ranks[0]["after"][key], ranks[1]["after"][key]), key
