"""Errors that name the fix, in both frontends: an unknown operator or argument suggests the closest
registered names and the installed pack that provides a missing alias; a file name passed to
resolve() points to resolve_file and network_file."""

from __future__ import annotations

import pytest

import hndl
from hndl import HNDLError, Registry
from hndl.frontends.config import worker

CONTRACT = dict(input_shape=("B", 16), output_shape=("B", 4))
IMAGE = dict(input_shape=("B", 3, 8, 8), output_shape=("B", 4))
CONV_HINT = ("The installed pack 'vision' provides 'conv': resolve with Registry.from_packs('basic', 'vision') "
             "(on the command line: --packs basic,vision).")


@pytest.fixture(scope="module")
def basic() -> Registry:
    return Registry.from_packs("basic")


@pytest.fixture(params=["process", "in-process"])
def isolation(request):
    """Both parser placements: the hint is computed in the host either way."""
    saved = worker._settings
    worker.configure(mode=request.param)
    yield request.param
    with worker._lock:
        if worker._worker is not None:
            worker._worker.close()
            worker._worker = None
    worker._settings = saved


def failure(call) -> HNDLError:
    with pytest.raises(HNDLError) as caught:
        call()
    return caught.value


# -- configuration text -------------------------------------------------------------------------
def test_a_misspelt_operator_suggests_the_registered_alias(isolation, basic):
    error = failure(lambda: hndl.resolve("lienar(8)\nrelu()\nlinear()", registry=basic, **CONTRACT))
    assert error.code == "E_OPERATOR" and error.message == "unknown operator 'lienar'"
    assert (error.location.line, error.location.column) == (1, 1)
    assert error.remedies == ("Did you mean linear?",
                              "Register an operator with alias 'lienar' before interpretation, or fix the spelling.")


def test_an_alias_of_an_installed_pack_the_registry_lacks_names_that_pack(isolation, basic):
    error = failure(lambda: hndl.resolve("conv(4, kernel_size=3)\nflatten()\nlinear()", registry=basic, **IMAGE))
    assert error.code == "E_OPERATOR" and error.message == "unknown operator 'conv'"
    assert error.remedies == (CONV_HINT,)


def test_the_pack_hint_keeps_the_file_location(isolation, basic, tmp_path):
    path = tmp_path / "net.hndl"
    path.write_text("linear(8)\nconv(4, kernel_size=3)\n", encoding="utf-8")
    error = failure(lambda: hndl.resolve_file(path, registry=basic, **CONTRACT))
    assert error.remedies == (CONV_HINT,)
    assert (error.location.file, error.location.line, error.location.column) == (str(path), 2, 1)


def test_a_misspelt_keyword_suggests_the_argument(basic):
    error = failure(lambda: hndl.resolve("linear(8, baias=False)\nlinear()", registry=basic, **CONTRACT))
    assert error.code == "E_ARGUMENT" and error.message == "linear has no argument 'baias'"
    assert error.location.field == "baias"
    assert error.remedies == ("Did you mean bias?", "Use one of: out_features, bias, in_features.")


def test_a_misspelt_metadata_keyword_suggests_it_too(basic):
    error = failure(lambda: hndl.resolve('linear(8, nmae="hidden")\nlinear()', registry=basic, **CONTRACT))
    assert error.remedies[0] == "Did you mean name?"


def test_an_unknown_keyword_nothing_resembles_lists_the_arguments(basic):
    error = failure(lambda: hndl.resolve("linear(8, qqq=1)\nlinear()", registry=basic, **CONTRACT))
    assert error.remedies == ("Use one of: out_features, bias, in_features.",)


# -- trusted callables --------------------------------------------------------------------------
def test_a_misspelt_ops_attribute_suggests_the_registered_alias(basic):
    error = failure(lambda: basic.ops.lienar)
    assert error.code == "E_OPERATOR" and error.message == "operator 'lienar' is not in this registry"
    assert error.remedies[0] == "Did you mean linear?"


def test_ops_of_a_registry_without_the_pack_names_the_pack(basic):
    error = failure(lambda: basic.ops.conv)
    assert error.remedies == (CONV_HINT,)


def test_a_default_ops_alias_the_capture_registry_lacks_names_the_pack(basic):
    def net(x):
        hndl.ops.conv(4, kernel_size=3)
        hndl.ops.flatten()
        return hndl.ops.linear()

    error = failure(lambda: hndl.resolve_callable(net, registry=basic, **IMAGE))
    assert error.code == "E_OPERATOR"
    assert error.remedies == ("Use registry.ops of the registry you pass to the capture API.", CONV_HINT)


def test_a_misspelt_keyword_in_a_callable_suggests_the_argument(basic):
    def net(x):
        basic.ops.linear(8, baias=False)
        return basic.ops.linear()

    error = failure(lambda: hndl.resolve_callable(net, registry=basic, **CONTRACT))
    assert error.code == "E_ARGUMENT" and error.remedies[0] == "Did you mean bias?"


# -- a file name where configuration text belongs ------------------------------------------------
@pytest.mark.parametrize("name", ["spec.hndl", "configs/mlp.py", "./net.txt", "model.yaml\n", "  a-b_c.hndl  "])
def test_a_file_name_passed_as_text_points_to_the_file_api(basic, name):
    error = failure(lambda: hndl.resolve(name, registry=basic, **CONTRACT))
    assert error.code == "E_SYNTAX"
    stripped = name.strip()
    assert error.message == f"resolve() takes configuration text, and {stripped!r} looks like a file name"
    assert error.remedies[0] == (f"Read the file with hndl.resolve_file({stripped!r}, ...), or build it with "
                                 f"hndl.torch.network_file({stripped!r}, ...).")


def test_network_gives_the_same_file_name_remedy(basic):
    from hndl.torch import network

    error = failure(lambda: network("spec.hndl", registry=basic, device="cpu", **CONTRACT))
    assert error.code == "E_SYNTAX" and "hndl.torch.network_file('spec.hndl', ...)" in error.remedies[0]


@pytest.mark.parametrize("source", ["spec.hndl(8)", "linear(8)\nspec.hndl", "x = spec.hndl"])
def test_text_that_is_more_than_a_file_name_keeps_its_syntax_error(basic, source):
    error = failure(lambda: hndl.resolve(source, registry=basic, **CONTRACT))
    assert error.code == "E_SYNTAX" and "looks like a file name" not in error.message
