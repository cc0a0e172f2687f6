"""Build: checkpoint weights reproduce the library's own forward; the node is frozen and stays in eval
mode; trainable=True unfreezes it; reduced precision; state bounds; the parameter probe reads no weights."""

import json

import pytest
import torch

import hndl
from hndl import HNDLError
from hndl.torch import build, network, parameter_counts


def _model(source, input_shape, output_shape, **kwargs):
    plan = hndl.resolve(source, input_shape=input_shape, output_shape=output_shape,
                        **{k: v for k, v in kwargs.items() if k in ("input_dtype", "dtype")})
    return plan, build(plan, device="cpu", **{k: v for k, v in kwargs.items() if k == "limits"})


def _ids(t=8, batch=3):
    return torch.randint(0, 64, (batch, t), generator=torch.Generator().manual_seed(1))


def _images(size, batch=3, dtype=torch.float32):
    return torch.randn(batch, *size, generator=torch.Generator().manual_seed(2)).to(dtype)


def _node(model):
    (module,) = [m for name, m in model.nodes.named_children()]
    return module


def _node_named(model, node_id):
    return model.nodes[f"n_{node_id}"]


def test_gpt2_features_and_logits_equal_transformers(gpt2_dir):
    from transformers import GPT2LMHeadModel, GPT2Model

    x = _ids()
    _, features = _model(f'pretrained("{gpt2_dir}")', ("B", 8), ("B", 8, 32), input_dtype="int64")
    expected = GPT2Model.from_pretrained(gpt2_dir).eval()(input_ids=x).last_hidden_state
    torch.testing.assert_close(features(x=x)["output"], expected)
    _, logits = _model(f'pretrained("{gpt2_dir}", output="logits")', ("B", 8), ("B", 8, 64), input_dtype="int64")
    torch.testing.assert_close(logits(x=x)["output"], GPT2LMHeadModel.from_pretrained(gpt2_dir).eval()(input_ids=x).logits)


def test_bert_pooled_equals_transformers(bert_dir):
    from transformers import BertModel

    x = _ids(t=6)
    _, model = _model(f'pretrained("{bert_dir}", output="pooled")', ("B", 6), ("B", 32), input_dtype="int64")
    torch.testing.assert_close(model(x=x)["output"], BertModel.from_pretrained(bert_dir).eval()(input_ids=x).pooler_output)


def test_vit_features_equal_transformers(vit_dir):
    from transformers import ViTModel

    x = _images((3, 16, 16))
    _, model = _model(f'pretrained("{vit_dir}")', ("B", 3, 16, 16), ("B", 5, 32))
    torch.testing.assert_close(model(x=x)["output"], ViTModel.from_pretrained(vit_dir).eval()(pixel_values=x).last_hidden_state)


def test_clip_towers_equal_transformers(clip_dir):
    from transformers import CLIPModel

    reference = CLIPModel.from_pretrained(clip_dir).eval()
    images, ids = _images((3, 16, 16)), _ids(t=7)
    _, vision = _model(f'pretrained("{clip_dir}", component="vision", output="embeds")', ("B", 3, 16, 16), ("B", 24))
    expected = reference.visual_projection(reference.vision_model(pixel_values=images).pooler_output)
    torch.testing.assert_close(vision(x=images)["output"], expected)
    _, pooled = _model(f'pretrained("{clip_dir}", component="text", output="pooled")', ("B", 7), ("B", 32),
                       input_dtype="int64")
    torch.testing.assert_close(pooled(x=ids)["output"], reference.text_model(input_ids=ids).pooler_output)
    assert _node(vision).model.text_model is None  # the unused tower is not kept


def test_timm_outputs_equal_timm(resnet_dir, timm_vit_dir):
    import timm
    from safetensors.torch import load_file

    reference = timm.create_model("resnet18", num_classes=5)
    reference.load_state_dict(load_file(resnet_dir / "model.safetensors"))
    reference.eval()
    x = _images((3, 64, 64), batch=2)
    _, logits = _model(f'pretrained("{resnet_dir}", output="logits")', ("B", 3, 64, 64), ("B", 5))
    torch.testing.assert_close(logits(x=x)["output"], reference(x))
    _, features = _model(f'pretrained("{resnet_dir}")', ("B", 3, 64, 64), ("B", 512, 2, 2))
    torch.testing.assert_close(features(x=x)["output"], reference.forward_features(x))
    _, vit = _model(f'pretrained("{timm_vit_dir}", output="pooled")', ("B", 3, 32, 32), ("B", 32))
    vit_reference = timm.create_model("vit_tiny_patch16_224", num_classes=3, img_size=32, patch_size=8,
                                      embed_dim=32, depth=1, num_heads=2)
    vit_reference.load_state_dict(load_file(timm_vit_dir / "model.safetensors"))
    vit_reference.eval()
    y = _images((3, 32, 32), batch=2)
    torch.testing.assert_close(vit(x=y)["output"], vit_reference.forward_head(vit_reference.forward_features(y),
                                                                            pre_logits=True))


def test_a_bare_safetensors_file_builds(gpt2_dir):
    from transformers import GPT2Model

    x = _ids()
    _, model = _model(f'pretrained("{gpt2_dir / "model.safetensors"}", config="{gpt2_dir / "config.json"}")',
                      ("B", 8), ("B", 8, 32), input_dtype="int64")
    torch.testing.assert_close(model(x=x)["output"], GPT2Model.from_pretrained(gpt2_dir).eval()(input_ids=x).last_hidden_state)


def test_the_hub_builds_the_recorded_commit(hub_cache, gpt2_dir, bert_dir, kit):
    from transformers import GPT2Model

    hub_cache.add("owner/tiny", kit.COMMIT_A, gpt2_dir)
    plan = hndl.resolve('pretrained("hf://owner/tiny")', input_shape=("B", 8), output_shape=("B", 8, 32),
                        input_dtype="int64")
    hub_cache.add("owner/tiny", kit.COMMIT_B, bert_dir)  # main moves on after resolution
    model = build(plan, device="cpu")
    x = _ids()
    torch.testing.assert_close(model(x=x)["output"], GPT2Model.from_pretrained(gpt2_dir).eval()(input_ids=x).last_hidden_state)


def test_hub_weights_missing_from_the_offline_cache_fail_at_build(hub_cache, gpt2_dir, kit):
    hub_cache.add("owner/tiny", kit.COMMIT_A, gpt2_dir, weights=False)
    plan = hndl.resolve('pretrained("hf://owner/tiny")', input_shape=("B", 8), output_shape=("B", 8, 32),
                        input_dtype="int64")  # resolution needed config.json alone
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu")
    assert error.value.code == "E_PRETRAINED" and "model.safetensors" in error.value.message


def test_frozen_and_kept_in_eval_mode_under_train(gpt2_dir):
    _, model = _model(f'pretrained("{gpt2_dir}")', ("B", 8), ("B", 8, 32), input_dtype="int64")
    inner = _node(model).model
    assert inner.config.resid_pdrop > 0  # the checkpoint has dropout that training mode would enable
    assert list(model.parameters()) and not any(p.requires_grad for p in model.parameters())
    model.train()
    assert model.training and not inner.training
    x = _ids()
    first, second = model(x=x)["output"], model(x=x)["output"]
    assert torch.equal(first, second) and not inner.training


def test_trainable_unfreezes_and_lets_train_mode_reach_it(gpt2_dir):
    plan, model = _model(f'pretrained("{gpt2_dir}", trainable=True)\nlinear(4)', ("B", 8), ("B", 8, 4),
                         input_dtype="int64")
    inner = _node_named(model, "n0").model
    assert all(p.requires_grad for p in inner.parameters())
    model.train()
    assert inner.training
    x = _ids()
    model(x=x)["output"].sum().backward()
    assert inner.wte.weight.grad is not None
    model.eval()
    assert not inner.training


def test_freshly_built_trainable_node_trains_on_first_forward(gpt2_dir):
    _, model = _model(f'pretrained("{gpt2_dir}", trainable=True)', ("B", 8), ("B", 8, 32), input_dtype="int64")
    assert model.training
    model(x=_ids())
    assert _node(model).model.training


def test_a_frozen_node_still_passes_gradients_to_its_input(vit_dir):
    _, model = _model(f'pretrained("{vit_dir}", output="pooled")', ("B", 3, 16, 16), ("B", 32))
    x = _images((3, 16, 16)).requires_grad_()
    model(x=x)["output"].sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_precision_builds(vit_dir, dtype):
    plan, model = _model(f'pretrained("{vit_dir}", output="pooled")', ("B", 3, 16, 16), ("B", 32), dtype=dtype)
    torch_dtype = getattr(torch, dtype)
    assert {p.dtype for p in model.parameters()} == {torch_dtype}
    _, reference = _model(f'pretrained("{vit_dir}", output="pooled")', ("B", 3, 16, 16), ("B", 32))
    x = _images((3, 16, 16))
    out = model(x=x.to(torch_dtype))["output"]
    assert out.dtype == torch_dtype
    torch.testing.assert_close(out.float(), reference(x=x)["output"], rtol=5e-2, atol=5e-2)


def test_weights_are_loaded_in_float32_then_cast(tmp_path, gpt2_dir):
    from transformers import GPT2Model

    half = tmp_path / "half"
    GPT2Model.from_pretrained(gpt2_dir, dtype=torch.float16).save_pretrained(half)
    _, model = _model(f'pretrained("{half}")', ("B", 8), ("B", 8, 32), input_dtype="int64")
    weight = _node(model).model.wte.weight
    assert weight.dtype == torch.float32
    expected = GPT2Model.from_pretrained(half, dtype=torch.float16).wte.weight.float()
    assert torch.equal(weight, expected)


def test_state_bytes_are_counted_and_bounded(gpt2_dir):
    plan, model = _model(f'pretrained("{gpt2_dir}")', ("B", 8), ("B", 8, 32), input_dtype="int64")
    counted = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    assert model.build_receipt["state_bytes"] == counted == model.build_receipt["estimated_state_bytes"]
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu", limits={"max_state_bytes": counted - 1})
    assert error.value.code == "E_RESOURCE"


def test_parameter_counts_never_open_the_weights(tmp_path, gpt2_dir, kit):
    from transformers import GPT2Model

    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    plan = hndl.resolve(f'pretrained("{copy}")', input_shape=("B", 8), output_shape=("B", 8, 32), input_dtype="int64")
    (copy / "model.safetensors").unlink()  # only config.json is left
    expected = sum(p.numel() for p in GPT2Model.from_pretrained(gpt2_dir).parameters())
    assert parameter_counts(plan) == {"n0": expected}


def test_a_checkpoint_changed_after_resolution_is_not_loaded(tmp_path, gpt2_dir, kit):
    copy = kit.copy_checkpoint(gpt2_dir, tmp_path / "gpt2")
    plan = hndl.resolve(f'pretrained("{copy}")', input_shape=("B", 8), output_shape=("B", 8, 32), input_dtype="int64")
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu")
    assert error.value.code == "E_PRETRAINED" and "changed" in error.value.message


def test_a_head_missing_from_the_checkpoint_is_never_initialised_at_random(tmp_path, bert_dir, kit):
    copy = kit.copy_checkpoint(bert_dir, tmp_path / "bert")
    config = kit.config_of(copy)
    config["architectures"] = ["BertForMaskedLM"]  # claims a head its weights do not hold
    (copy / "config.json").write_text(json.dumps(config))
    plan = hndl.resolve(f'pretrained("{copy}", output="logits")', input_shape=("B", 6), output_shape=("B", 6, 64),
                        input_dtype="int64")
    with pytest.raises(HNDLError) as error:
        build(plan, device="cpu")
    assert error.value.code == "E_PRETRAINED" and "cls.predictions" in error.value.message


def test_the_network_facade_and_printing(vit_dir):
    model = network(f'pretrained("{vit_dir}", output="pooled")\nlinear(10)', input_shape=("B", 3, 16, 16),
                    output_shape=("B", 10), device="cpu")
    assert "pretrained" in repr(model) and "[B, 3, 16, 16]" in repr(model)
    assert model(_images((3, 16, 16))).shape == (3, 10)


def test_building_draws_nothing_from_the_callers_rng(resnet_dir):
    plan = hndl.resolve(f'pretrained("{resnet_dir}", output="logits")', input_shape=("B", 3, 64, 64),
                        output_shape=("B", 5))
    state = torch.get_rng_state()
    build(plan, device="cpu")
    assert torch.equal(state, torch.get_rng_state())
