"""Resolution: the input contract follows the checkpoint, output shapes come from a meta trace,
each documented output is selectable, and nothing is allocated or drawn."""

import pytest

import hndl
from hndl import HNDLError
from hndl.declaration import spec_of
from hndl.testing import check_declaration
from hndl_pretrained import OPERATORS, Pretrained


def _resolve(source, input_shape, output_shape, **kwargs):
    return hndl.resolve(source, input_shape=input_shape, output_shape=output_shape, **kwargs)


def _text(source, output_shape, t=8, **kwargs):
    kwargs.setdefault("input_dtype", "int64")
    return _resolve(source, ("B", t), output_shape, **kwargs)


def _fails(call):
    with pytest.raises(HNDLError) as error:
        call()
    return error.value


def test_the_declaration_is_complete():
    assert OPERATORS == (Pretrained,)
    spec = check_declaration(Pretrained)
    assert spec.qualified == "pretrained@1" and spec.outputs_from == "layers"
    assert spec.args["revision"].inferable and spec.positional_args[0] == "source"
    assert all(example.network for example in spec.examples)  # offline runs skip them
    assert spec.output_ports({"layers": ()}) == ("out",)
    assert spec.output_ports({"layers": ("a", "b")}) == ("out0", "out1")


# -- text ------------------------------------------------------------------------------------------------------------
def test_gpt2_features_and_logits(gpt2_dir):
    features = _text(f'pretrained("{gpt2_dir}")', ("B", 8, 32))
    node = features.nodes[0]
    assert node.input_shapes == {"x": ("B", 8)} and node.output_shapes == {"out": ("B", 8, 32)}
    assert node.args["output"] == "features" and node.provenance["revision"] == "inferred"
    logits = _text(f'pretrained("{gpt2_dir}", output="logits")', ("B", 8, 64))
    assert logits.nodes[0].output_shapes == {"out": ("B", 8, 64)}
    raw = _text(f'pretrained("{gpt2_dir}", output="last_hidden_state")', ("B", 8, 32))
    assert raw.nodes[0].output_shapes == features.nodes[0].output_shapes


def test_int32_token_ids_are_accepted(gpt2_dir):
    assert _text(f'pretrained("{gpt2_dir}")', ("B", 5, 32), t=5, input_dtype="int32").nodes[0].output_shapes == {
        "out": ("B", 5, 32)}


@pytest.mark.parametrize("dtype", [None, "bool"])
def test_a_text_model_rejects_a_non_integer_input(gpt2_dir, dtype):
    error = _fails(lambda: _resolve(f'pretrained("{gpt2_dir}")', ("B", 8), ("B", 8, 32), input_dtype=dtype))
    assert error.code == "E_DTYPE" and "token ids" in error.message


def test_a_text_model_rejects_more_tokens_than_positions(gpt2_dir):
    error = _fails(lambda: _text(f'pretrained("{gpt2_dir}")', ("B", 17, 32), t=17))
    assert error.code == "E_CONSTRAINT" and "16 tokens" in error.message


def test_a_text_model_needs_rank_two(gpt2_dir):
    error = _fails(lambda: _resolve(f'pretrained("{gpt2_dir}")', ("B", 4, 8), ("B", 4, 8, 32), input_dtype="int64"))
    assert error.code == "E_CONSTRAINT"


def test_an_output_the_model_lacks_lists_what_it_has(gpt2_dir, bert_dir):
    error = _fails(lambda: _text(f'pretrained("{gpt2_dir}", output="pooled")', ("B", 32)))
    assert error.code == "E_PRETRAINED" and "last_hidden_state" in error.message
    error = _fails(lambda: _text(f'pretrained("{bert_dir}", output="logits")', ("B", 8, 64)))
    assert error.code == "E_PRETRAINED" and "BertModel" in error.message


def test_bert_pooled(bert_dir):
    plan = _text(f'pretrained("{bert_dir}", output="pooled")', ("B", 32))
    assert plan.nodes[0].output_shapes == {"out": ("B", 32)}


def test_the_output_contract_must_agree(gpt2_dir):
    error = _fails(lambda: _text(f'pretrained("{gpt2_dir}")', ("B", 8, 33)))
    assert error.code == "E_CONSTRAINT"


# -- vision ----------------------------------------------------------------------------------------------------------
def test_vit_features_and_pooled_at_native_resolution(vit_dir):
    plan = _resolve(f'pretrained("{vit_dir}")', ("B", 3, 16, 16), ("B", 5, 32))
    assert plan.nodes[0].output_shapes == {"out": ("B", 5, 32)}
    pooled = _resolve(f'pretrained("{vit_dir}", output="pooled")', ("B", 3, 16, 16), ("B", 32))
    assert pooled.nodes[0].output_shapes == {"out": ("B", 32)}


@pytest.mark.parametrize("shape", [("B", 3, 32, 32), ("B", 1, 16, 16), ("B", 3, 16, 8)])
def test_a_vision_model_fixes_its_native_resolution(vit_dir, shape):
    error = _fails(lambda: _resolve(f'pretrained("{vit_dir}", output="pooled")', shape, ("B", 32)))
    assert error.code == "E_CONSTRAINT" and "[B, 3, 16, 16]" in error.message


def test_the_native_resolution_is_inferred_backwards(vit_dir):
    plan = _resolve(f'reshape(3, 16, 16)\npretrained("{vit_dir}", output="pooled")', ("B", 768), ("B", 32))
    assert plan.nodes[0].output_shapes == {"out": ("B", 3, 16, 16)}


def test_a_vision_model_rejects_integer_input(vit_dir):
    error = _fails(lambda: _resolve(f'pretrained("{vit_dir}")', ("B", 3, 16, 16), ("B", 5, 32), input_dtype="int64"))
    assert error.code == "E_DTYPE"


def test_clip_towers(clip_dir):
    vision = lambda output, shape: _resolve(  # noqa: E731
        f'pretrained("{clip_dir}", component="vision", output="{output}")', ("B", 3, 16, 16), shape)
    assert vision("features", ("B", 5, 32)).nodes[0].output_shapes == {"out": ("B", 5, 32)}
    assert vision("pooled", ("B", 32)).nodes[0].output_shapes == {"out": ("B", 32)}
    assert vision("embeds", ("B", 24)).nodes[0].output_shapes == {"out": ("B", 24)}
    text = _text(f'pretrained("{clip_dir}", component="text", output="embeds")', ("B", 24), t=7)
    assert text.nodes[0].input_shapes == {"x": ("B", 7)} and text.nodes[0].output_shapes == {"out": ("B", 24)}


def test_a_multimodal_checkpoint_needs_a_component(clip_dir):
    error = _fails(lambda: _resolve(f'pretrained("{clip_dir}")', ("B", 3, 16, 16), ("B", 5, 32)))
    assert error.code == "E_PRETRAINED" and "component" in error.message


def test_component_on_a_single_tower_model_fails(vit_dir, resnet_dir):
    error = _fails(lambda: _resolve(f'pretrained("{vit_dir}", component="text")', ("B", 3, 16, 16), ("B", 5, 32)))
    assert error.code == "E_PRETRAINED"
    error = _fails(lambda: _resolve(f'pretrained("{resnet_dir}", component="vision")', ("B", 3, 64, 64), ("B", 5)))
    assert error.code == "E_PRETRAINED"


def test_a_component_outside_the_choices_is_an_argument_error(clip_dir):
    error = _fails(lambda: _resolve(f'pretrained("{clip_dir}", component="audio")', ("B", 3, 16, 16), ("B", 24)))
    assert error.code == "E_ARGUMENT"


def test_timm_resnet_outputs(resnet_dir):
    source = f'pretrained("{resnet_dir}", output="%s")'
    assert _resolve(source % "features", ("B", 3, 64, 64), ("B", 512, 2, 2)).nodes[0].output_shapes == {
        "out": ("B", 512, 2, 2)}
    assert _resolve(source % "pooled", ("B", 3, 64, 64), ("B", 512)).nodes[0].output_shapes == {"out": ("B", 512)}
    assert _resolve(source % "logits", ("B", 3, 64, 64), ("B", 5)).nodes[0].output_shapes == {"out": ("B", 5)}
    error = _fails(lambda: _resolve(source % "embeds", ("B", 3, 64, 64), ("B", 5)))
    assert error.code == "E_PRETRAINED"
    error = _fails(lambda: _resolve(source % "logits", ("B", 3, 224, 224), ("B", 5)))
    assert error.code == "E_CONSTRAINT"


def test_timm_vit_outputs(timm_vit_dir):
    source = f'pretrained("{timm_vit_dir}", output="%s")'
    assert _resolve(source % "features", ("B", 3, 32, 32), ("B", 17, 32)).nodes[0].output_shapes == {
        "out": ("B", 17, 32)}
    assert _resolve(source % "pooled", ("B", 3, 32, 32), ("B", 32)).nodes[0].output_shapes == {"out": ("B", 32)}
    assert _resolve(source % "logits", ("B", 3, 32, 32), ("B", 3)).nodes[0].output_shapes == {"out": ("B", 3)}


def test_a_bare_safetensors_file_with_config(gpt2_dir):
    plan = _text(f'pretrained("{gpt2_dir / "model.safetensors"}", config="{gpt2_dir / "config.json"}")',
                 ("B", 8, 32))
    assert plan.nodes[0].output_shapes == {"out": ("B", 8, 32)}


# -- what resolution may and may not do -------------------------------------------------------------------------
@pytest.mark.parametrize("fixture, source, input_shape, output_shape, dtype", [
    ("gpt2_dir", 'pretrained("{}", output="logits")', ("B", 8), ("B", 8, 64), "int64"),
    ("vit_dir", 'pretrained("{}", output="pooled")', ("B", 3, 16, 16), ("B", 32), None),
    ("clip_dir", 'pretrained("{}", component="vision", output="embeds")', ("B", 3, 16, 16), ("B", 24), None),
    ("resnet_dir", 'pretrained("{}", output="logits")', ("B", 3, 64, 64), ("B", 5), None),
])
def test_resolution_allocates_nothing_and_draws_nothing(request, kit, fixture, source, input_shape, output_shape,
                                                        dtype):
    from hndl_pretrained import pretrained, tracing

    directory = request.getfixturevalue(fixture)
    _resolve(source.format(directory), input_shape, output_shape, input_dtype=dtype)  # warm imports
    tracing._TRACES.clear()
    pretrained._ADAPTERS.clear()
    with kit.NoEffects() as recorder:
        plan = _resolve(source.format(directory), input_shape, output_shape, input_dtype=dtype)
    assert recorder.operations > 0  # the architecture really was traced, on the meta device
    assert plan.nodes[0].output_shapes == {"out": output_shape}


def test_the_revision_is_in_the_semantic_digest(tmp_path, gpt2_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    source = f'pretrained("{copy}")'
    before = _text(source, ("B", 8, 32))
    (copy / "config.json").write_text((copy / "config.json").read_text().replace('"n_head": 2', '"n_head": 2 '))
    after = _text(source, ("B", 8, 32))
    assert before.nodes[0].args["revision"] != after.nodes[0].args["revision"]
    assert before.semantic_digest != after.semantic_digest


def test_an_explicit_revision_must_match(gpt2_dir):
    error = _fails(lambda: _text(f'pretrained("{gpt2_dir}", revision="sha256:0")', ("B", 8, 32)))
    assert error.code == "E_CONSTRAINT" and error.location.field == "revision"
    revision = _text(f'pretrained("{gpt2_dir}")', ("B", 8, 32)).nodes[0].args["revision"]
    plan = _text(f'pretrained("{gpt2_dir}", revision="{revision}")', ("B", 8, 32))
    assert plan.nodes[0].provenance["revision"] == "explicit"


def test_the_shape_table_lists_the_node(vit_dir):
    plan = _resolve(f'pretrained("{vit_dir}", output="pooled", name="backbone")\nlinear(10)', ("B", 3, 16, 16),
                    ("B", 10))
    text = str(plan)
    assert "backbone" in text and "pretrained" in text and "[B, 3, 16, 16]" in text


def test_the_plan_round_trips(vit_dir):
    plan = _resolve(f'pretrained("{vit_dir}", output="pooled")', ("B", 3, 16, 16), ("B", 32))
    restored = hndl.ResolvedPlan.from_json(plan.to_json())
    assert restored == plan and restored.semantic_digest == plan.semantic_digest


def test_the_batch_axis_pattern(vit_dir):
    plan = _resolve(
        f'both = concat(x, x, axis=0)\nfeatures = pretrained(both, "{vit_dir}", output="pooled")\n'
        'a, b = chunk(features, 2, dim=0)\nout = add(a, b)', ("B", 3, 16, 16), ("B", 32))
    node = next(node for node in plan.nodes if node.alias == "pretrained")
    assert node.input_shapes == {"x": ("2*B", 3, 16, 16)} and node.output_shapes == {"out": ("2*B", 32)}


def test_the_callable_frontend_resolves_identically(vit_dir):
    from hndl import ops

    source = f'pretrained("{vit_dir}", output="pooled")'
    configured = _resolve(source, ("B", 3, 16, 16), ("B", 32))

    def backbone(x):
        return ops.pretrained(x, str(vit_dir), output="pooled")

    captured = hndl.resolve_callable(backbone, input_shape=("B", 3, 16, 16), output_shape=("B", 32))
    assert captured.semantic_digest == configured.semantic_digest
    assert spec_of(Pretrained).args["output"].default == "features"
