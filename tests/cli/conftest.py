"""Shared fixtures for the `hndl` command tests: every test runs the real command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

#: SPEC.md's worked generator resolution (§7).
GENERATOR = """\
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

MLP = "linear(64)\nrelu()\nlinear()\n"

#: The conditional GAN discriminator with named ports.
DISCRIMINATOR = """\
plane = linear(y, 784, name="label_projection")
label = reshape(plane, 1, 28, 28, name="label_plane")
concat(x, label, name="conditioned")
conv(64, policy="down2", name="stage1")
leaky_relu(0.2)
features = flatten(name="features")
logits = linear(1, name="logits")
"""

DISCRIMINATOR_CONTRACTS = (
    "--input-shape", "x=B,1,28,28", "--input-shape", "y=B,10",
    "--output-shape", "logits=B,1", "--output-shape", "features=B,12544",
)

#: A third-party pack outside the first-party plugins, installed by putting it on PYTHONPATH.
LAB_PACK = '''\
"""A third-party pack for the CLI tests: one operator, lab_swish."""
import torch
from torch import nn

from hndl import Example, operator
from hndl.packs import hookimpl


@operator(
    "lab_swish",
    identity="lab.swish",
    summary="Swish, x * sigmoid(x), applied elementwise.",
    shape="x[B, ...] -> out[B, ...]",
    category="activation",
    examples=(Example("linear()\\nlab_swish()", ("B", 8), ("B", 4)),),
)
class Swish(nn.Module):
    """A test operator from outside the first-party packs."""

    def forward(self, x):
        return x * torch.sigmoid(x)


@hookimpl
def hndl_register(registry):
    registry.add(Swish)
'''


def _run(command: list, args, *, input: str | None, env: dict | None, cwd) -> SimpleNamespace:
    environment = dict(os.environ)
    environment.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONNOUSERSITE": "1"})
    environment.update(env or {})
    done = subprocess.run(
        [*command, *map(str, args)], input=input, capture_output=True, text=True,
        env=environment, cwd=cwd, timeout=300,
    )
    return SimpleNamespace(rc=done.returncode, out=done.stdout, err=done.stderr)


@pytest.fixture(scope="session")
def run_cli():
    """``run_cli(*args, cwd, input=None, env=None)``: run ``python -m hndl.cli`` (any fixture scope)."""

    def run(*args, cwd, input=None, env=None):
        return _run([sys.executable, "-m", "hndl.cli"], args, input=input, env=env, cwd=cwd)

    return run


@pytest.fixture
def cli(run_cli, tmp_path):
    """``cli(*args, input=None, env=None)``: run ``python -m hndl.cli`` in ``tmp_path``."""

    def run(*args, input=None, env=None, cwd=None):
        return run_cli(*args, input=input, env=env, cwd=cwd or tmp_path)

    return run


@pytest.fixture
def installed_cli(tmp_path):
    """The console script pip installed beside this interpreter (``[project.scripts] hndl``)."""
    script = Path(sys.executable).parent / ("hndl.exe" if os.name == "nt" else "hndl")
    assert script.is_file(), f"the hndl console script is not installed at {script}; reinstall the project"

    def run(*args, input=None, env=None):
        return _run([str(script)], args, input=input, env=env, cwd=tmp_path)

    return run


@pytest.fixture
def specs(tmp_path) -> SimpleNamespace:
    """The example specs written as files in the test's directory."""
    paths = {}
    for name, text in (("generator", GENERATOR), ("mlp", MLP), ("discriminator", DISCRIMINATOR)):
        path = tmp_path / f"{name}.hndl"
        path.write_text(text, encoding="utf-8")
        paths[name] = path
    return SimpleNamespace(**paths)


@pytest.fixture
def lab_site(tmp_path) -> Path:
    """A site directory holding the installed third-party pack ``lab`` (module + dist-info)."""
    site = tmp_path / "lab_site"
    info = site / "lab_pack-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "lab_pack.py").write_text(LAB_PACK, encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-pack\nVersion: 0.1\n", encoding="utf-8")
    # The pack and the aliases it registers (read without importing it, for the "provides" remedy).
    (info / "entry_points.txt").write_text("[hndl.packs]\nlab = lab_pack\n\n[hndl.operators]\nlab_swish = lab_pack\n",
                                           encoding="utf-8")
    return site


@pytest.fixture
def broken_site(tmp_path) -> Path:
    """A site directory declaring a pack whose module cannot be imported."""
    site = tmp_path / "broken_site"
    info = site / "broken_pack-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-pack\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(
        textwrap.dedent("[hndl.packs]\nbroken = hndl_cli_test_no_such_module\n"), encoding="utf-8")
    return site


def pythonpath(site: Path) -> dict:
    """Environment that puts ``site`` in front of the interpreter's path."""
    existing = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(site) + (os.pathsep + existing if existing else "")}


@pytest.fixture
def on_path():
    return pythonpath


@pytest.fixture(scope="session")
def examples() -> SimpleNamespace:
    return SimpleNamespace(generator=GENERATOR, mlp=MLP, discriminator=DISCRIMINATOR,
                           discriminator_contracts=DISCRIMINATOR_CONTRACTS)
