"""Distributed use (issue 10, item 6): a host integration test, not an HNDL feature.

HNDL adds nothing distributed (§1 keeps distributed training out of scope); users who outgrow
one process train HNDL modules with PyTorch's own engine. This test proves that works:

* the parent resolves a plan and writes its JSON; the plan travels to two worker processes as
  that JSON text only (no pickled module, no callable);
* each worker (gloo backend, CPU, rendezvous on 127.0.0.1 and a free port) rebuilds the module
  from the JSON with ``hndl.torch.restore`` and the same ``initialization_seed``, and reports
  its state keys, its semantic digest and its initial parameters: identical on both ranks and
  to the parent's build;
* each worker wraps the module in ``torch.nn.parallel.DistributedDataParallel`` (or shards it
  with FSDP2's ``fully_shard`` over a CPU device mesh), takes one SGD step on its half of a
  batch, and reports the parameters (FSDP2's shards gathered with ``full_tensor``); they equal,
  on both ranks, the parameters the parent reaches with one plain single-process step on the
  combined batch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from torch import nn

import hndl
from hndl.torch import restore


SOURCE = "conv(4, kernel_size=3, padding=1)\nrelu()\nflatten()\nlinear(16)\ngelu()\nlayer_norm()\nlinear()"
CONTRACT = {"input_shape": ("B", 2, 6, 6), "output_shape": ("B", 3)}
PACKS = ("basic", "vision", "transformer")
SEED = 7
LR = 0.1
WORLD = 2

WORKER = textwrap.dedent(
    """
    import json, os, sys
    sys.path[:0] = json.loads(os.environ["HNDL_TEST_SYS_PATH"])
    import torch
    import torch.distributed as dist
    from torch import nn
    import hndl
    from hndl.torch import restore

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    directory = sys.argv[1]
    registry = hndl.Registry.from_packs(*json.loads(os.environ["HNDL_TEST_PACKS"]))
    with open(os.path.join(directory, "plan.json"), encoding="utf-8") as handle:
        text = handle.read()  # the plan arrives as JSON text and nothing else
    model = restore(text, device="cpu", registry=registry, initialization_seed=int(os.environ["HNDL_TEST_SEED"]),
                    like="build")
    initial = {key: value.detach().clone() for key, value in model.state_dict().items()}
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if os.environ["HNDL_TEST_ENGINE"] == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        wrapped = fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    else:
        wrapped = nn.parallel.DistributedDataParallel(model)
    data = torch.load(os.path.join(directory, "batch.pt"), weights_only=True)
    x, y = data["x"].chunk(world)[rank], data["y"].chunk(world)[rank]
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=float(os.environ["HNDL_TEST_LR"]))
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(wrapped(x=x)["output"], y)
    loss.backward()
    optimizer.step()
    after = {}
    for key, value in model.state_dict().items():
        value = value.full_tensor() if hasattr(value, "full_tensor") else value  # FSDP2 shards (DTensor)
        after[key] = value.detach().clone()
    dist.barrier()
    dist.destroy_process_group()
    result = os.path.join(directory, f"rank{rank}.pt")
    torch.save({
        "keys": list(model.state_dict()),
        "digest": model.plan.semantic_digest,
        "initial": initial,
        "after": after,
    }, result + ".tmp")
    os.replace(result + ".tmp", result)
    # Rank 0 hosts the rendezvous store: it stays up until every other rank has finished its
    # teardown (a client whose store vanished mid-teardown aborted in C++, about one run in ten
    # under load), and no rank runs interpreter finalization with torch's threads still alive.
    if rank == 0:
        import time
        deadline = time.monotonic() + 120
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


def _launch(tmp_path, engine):
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    port = _free_port()
    processes = []
    for rank in range(WORLD):
        env = {
            **os.environ,
            "RANK": str(rank), "WORLD_SIZE": str(WORLD), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
            "HNDL_TEST_SYS_PATH": json.dumps(sys.path), "HNDL_TEST_PACKS": json.dumps(PACKS),
            "HNDL_TEST_SEED": str(SEED), "HNDL_TEST_LR": repr(LR), "HNDL_TEST_ENGINE": engine,
        }
        processes.append(subprocess.Popen([sys.executable, str(script), str(tmp_path)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=120)
            outputs.append((process.returncode, out, err))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for rank, (code, out, err) in enumerate(outputs):
        assert code == 0, f"rank {rank} failed ({code}):\n{out[-2000:]}\n{err[-4000:]}"
    return [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in range(WORLD)]


def test_ddp_with_gloo_on_two_cpu_processes_equals_single_process_training(tmp_path):
    _check_engine(tmp_path, "ddp")


def test_fsdp2_fully_shard_with_gloo_on_two_cpu_processes_equals_single_process_training(tmp_path):
    _check_engine(tmp_path, "fsdp2")


def _check_engine(tmp_path, engine):
    start = time.perf_counter()
    registry = hndl.Registry.from_packs(*PACKS)
    plan = hndl.resolve(SOURCE, **CONTRACT, registry=registry)
    text = plan.to_json()
    (tmp_path / "plan.json").write_text(text, encoding="utf-8")
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(8, 2, 6, 6, generator=generator)
    y = torch.randn(8, 3, generator=generator)
    torch.save({"x": x, "y": y}, tmp_path / "batch.pt")

    ranks = _launch(tmp_path, engine)

    # single process, combined batch, same JSON, same seed
    model = restore(text, device="cpu", registry=registry, initialization_seed=SEED, like="build")
    initial = {key: value.detach().clone() for key, value in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x=x)["output"], y).backward()
    optimizer.step()
    expected = model.state_dict()

    for rank, report in enumerate(ranks):
        assert report["keys"] == list(expected), f"rank {rank} built other state keys"
        assert report["digest"] == plan.semantic_digest, f"rank {rank} rebuilt another plan"
        for key, value in initial.items():  # identical modules before DDP's own broadcast
            assert torch.equal(report["initial"][key], value), (rank, key)
        for key, value in expected.items():
            torch.testing.assert_close(report["after"][key], value, rtol=1e-5, atol=1e-6,
                                       msg=lambda m, rank=rank, key=key: f"rank {rank} {key}: {m}")
        assert any(not torch.equal(report["after"][key], initial[key]) for key in initial)  # it did train
    for key in expected:
        assert torch.equal(ranks[0]["after"][key], ranks[1]["after"][key]), key
    assert time.perf_counter() - start < 60
