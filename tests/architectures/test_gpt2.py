"""A tiny GPT-2 written as HNDL configuration text with catalog operators only, against
transformers' ``GPT2LMHeadModel`` (``GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100,
n_positions=16, activation_function="gelu_new")``, eager attention, nothing downloaded) carrying
the same weights: the resolved plan, the exact parameter count, and eval-mode logits.

    embedding -> positional_embedding(max_length=16) -> transformer_block(causal, gelu_tanh) x 2
    -> layer_norm -> linear (no bias)

Weight tying. The reference ties ``lm_head.weight`` to ``transformer.wte.weight`` (one tensor).
HNDL keeps the head untied: weight tying between graph nodes is deferred and must fail when
requested (hndl-spec §4). So the tied reference's one tensor is copied into both HNDL parameters,
which makes the HNDL network have exactly the parameters of the same GPT-2 built with
``tie_word_embeddings=False``; that untied reference is compared as well, with its own head, and
for gradients (the tied reference sums two gradients into its one tensor, so only the untied one
can match per parameter). The ways a configuration could ask for tying (an argument naming the
embedding node, reusing its node id, an ``init=`` naming it) all fail, and the built head and
embedding stay independent tensors that a training step moves apart.

GPT-2's ``Conv1D`` stores ``[in, out]`` weights, the transposes of ours; ``c_attn`` holds query, key
and value side by side, which is the layout of ``in_proj_weight``.

Size of the description. The HNDL network is the 6 non-blank lines of ``SOURCE`` (one per layer).
The reference is what was read to learn what the model computes, counted with
``len(inspect.getsourcelines(obj)[0])`` (every line of the definition: code, docstrings, comments,
blank lines) on transformers 5.24.0: ``GPT2LMHeadModel`` 88, ``GPT2Model`` 144, ``GPT2Block`` 65,
``GPT2Attention`` 153, ``eager_attention_forward`` 19 and ``GPT2MLP`` 15
(transformers.models.gpt2.modeling_gpt2), ``Conv1D`` 27 (transformers.pytorch_utils): 511 lines in
all (415 without blank and comment-only lines). The module modeling_gpt2 itself is 1,135 lines.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging as transformers_logging

import hndl
from hndl import HNDLError
from hndl.torch import network

VOCAB, POSITIONS, WIDTH, HEADS, LAYERS = 100, 16, 32, 4, 2
SOURCE = """
embedding(100, 32, name="wte")
positional_embedding(max_length=16, name="wpe")
transformer_block(4, causal=True, activation="gelu_tanh", name="h0")
transformer_block(4, causal=True, activation="gelu_tanh", name="h1")
layer_norm(name="ln_f")
linear(bias=False, name="lm_head")
"""


def contract(length: int) -> dict:
    return dict(input_shape=("B", length), output_shape=("B", length, VOCAB), input_dtype="int64")


_SAME = lambda t: t  # noqa: E731
_T = lambda t: t.t()  # Conv1D [in, out] -> Linear [out, in]  # noqa: E731
_BLOCK = {
    "norm1.weight": ("ln_1.weight", _SAME), "norm1.bias": ("ln_1.bias", _SAME),
    "attention.in_proj_weight": ("attn.c_attn.weight", _T), "attention.in_proj_bias": ("attn.c_attn.bias", _SAME),
    "attention.out_proj.weight": ("attn.c_proj.weight", _T), "attention.out_proj.bias": ("attn.c_proj.bias", _SAME),
    "norm2.weight": ("ln_2.weight", _SAME), "norm2.bias": ("ln_2.bias", _SAME),
    "feed_forward.fc1.weight": ("mlp.c_fc.weight", _T), "feed_forward.fc1.bias": ("mlp.c_fc.bias", _SAME),
    "feed_forward.fc2.weight": ("mlp.c_proj.weight", _T), "feed_forward.fc2.bias": ("mlp.c_proj.bias", _SAME),
}
#: HNDL state-dict entry -> (transformers state-dict entry, how its tensor becomes ours)
MAPPING = {
    "nodes.n_wte.weight": ("transformer.wte.weight", _SAME),
    "nodes.n_wpe.weight": ("transformer.wpe.weight", _SAME),  # all 16 rows, whatever length the plan serves
    **{f"nodes.n_h{i}.{ours}": (f"transformer.h.{i}.{theirs}", convert)
       for i in range(LAYERS) for ours, (theirs, convert) in _BLOCK.items()},
    "nodes.n_ln_f.weight": ("transformer.ln_f.weight", _SAME),
    "nodes.n_ln_f.bias": ("transformer.ln_f.bias", _SAME),
    # the tied reference lists its one wte tensor again under lm_head.weight: both HNDL entries get it
    "nodes.n_lm_head.weight": ("lm_head.weight", _SAME),
}


def reference_gpt2(tied: bool) -> GPT2LMHeadModel:
    config = GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=HEADS, vocab_size=VOCAB, n_positions=POSITIONS,
                        activation_function="gelu_new", tie_word_embeddings=tied, bos_token_id=0,
                        eos_token_id=0, attn_implementation="eager")
    torch.manual_seed(0)
    reference = GPT2LMHeadModel(config).eval()
    assert reference.config._attn_implementation == "eager"
    assert (reference.lm_head.weight is reference.transformer.wte.weight) == tied
    with torch.no_grad():  # biases start at 0 and norms at 1: move every parameter
        for parameter in reference.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return reference


def hndl_gpt2(reference: GPT2LMHeadModel, length: int):
    model = network(SOURCE, device="cpu", **contract(length)).eval()
    theirs = reference.state_dict()
    assert set(MAPPING) == set(model.state_dict()) and {name for name, _ in MAPPING.values()} == set(theirs)
    model.load_state_dict({key: convert(theirs[name]) for key, (name, convert) in MAPPING.items()})
    return model


@pytest.fixture(scope="module", autouse=True)
def _quiet_transformers():
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    yield
    transformers_logging.set_verbosity(verbosity)


@pytest.fixture(scope="module", params=[True, False], ids=["tied_reference", "untied_reference"])
def reference(request):
    return reference_gpt2(tied=request.param)


def _ids(length: int, batch: int = 3, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


# -- the plan --------------------------------------------------------------------------------------------------
def test_the_plan_resolves_every_size_from_the_contract():
    plan = hndl.resolve(SOURCE, **contract(10))
    assert [(node.id, node.alias, node.output_shapes["out"]) for node in plan.nodes] == [
        ("wte", "embedding", ("B", 10, WIDTH)),
        ("wpe", "positional_embedding", ("B", 10, WIDTH)),
        ("h0", "transformer_block", ("B", 10, WIDTH)),
        ("h1", "transformer_block", ("B", 10, WIDTH)),
        ("ln_f", "layer_norm", ("B", 10, WIDTH)),
        ("lm_head", "linear", ("B", 10, VOCAB)),
    ]
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["wpe"].args == {"length": 10, "embedding_dim": WIDTH, "max_length": POSITIONS}
    assert nodes["h0"].args["activation"] == "gelu_tanh" and nodes["h0"].args["causal"] is True
    assert nodes["lm_head"].args == {"out_features": VOCAB, "bias": False, "in_features": WIDTH}


def test_a_sequence_longer_than_the_position_table_fails():
    with pytest.raises(HNDLError) as error:
        hndl.resolve(SOURCE, **contract(POSITIONS + 1))
    assert error.value.code == "E_CONSTRAINT"


def test_parameter_count_equals_the_untied_gpt2():
    model = network(SOURCE, device="cpu", **contract(POSITIONS))
    ours = sum(p.numel() for p in model.parameters())
    untied, tied = reference_gpt2(tied=False), reference_gpt2(tied=True)
    assert ours == sum(p.numel() for p in untied.parameters()) == 32_384
    # the tied GPT-2 counts its shared wte / lm_head tensor once
    assert ours == sum(p.numel() for p in tied.parameters()) + VOCAB * WIDTH


# -- numerics --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("length", [10, POSITIONS])
def test_eval_logits_match_transformers(reference, length):
    model = hndl_gpt2(reference, length)
    ids = _ids(length)
    with torch.no_grad():
        ours, theirs = model(ids), reference(input_ids=ids).logits
    assert ours.shape == (3, length, VOCAB)
    torch.testing.assert_close(ours, theirs)


def test_the_logits_are_causal_like_the_reference(reference):
    model = hndl_gpt2(reference, POSITIONS)
    ids = _ids(POSITIONS)
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(ids), model(changed)
        torch.testing.assert_close(after, reference(input_ids=changed).logits)
    torch.testing.assert_close(after[:, :7], before[:, :7], rtol=0, atol=1e-5)
    assert not torch.allclose(after[:, 7], before[:, 7])


def test_every_gradient_matches_the_untied_reference():
    reference = reference_gpt2(tied=False).train()  # dropout probabilities are 0.1: keep it off
    for module in reference.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model = hndl_gpt2(reference, 12).train()
    ids, targets = _ids(12), _ids(12, seed=2)
    F.cross_entropy(model(ids).reshape(-1, VOCAB), targets.reshape(-1)).backward()
    F.cross_entropy(reference(input_ids=ids).logits.reshape(-1, VOCAB), targets.reshape(-1)).backward()
    theirs = dict(reference.named_parameters())
    for key, parameter in model.named_parameters():
        name, convert = MAPPING[key]
        assert parameter.grad is not None and torch.count_nonzero(parameter.grad) > 0
        torch.testing.assert_close(parameter.grad, convert(theirs[name].grad))


# -- weight tying stays refused --------------------------------------------------------------------------------
_HEAD = 'linear(bias=False, name="lm_head")'


@pytest.mark.parametrize("head, code", [
    ('linear(bias=False, tied_to="wte", name="lm_head")', "E_ARGUMENT"),
    ('linear(bias=False, shared_with="wte", name="lm_head")', "E_ARGUMENT"),
    ('linear(bias=False, weight="wte", name="lm_head")', "E_ARGUMENT"),
    ('linear(bias=False, name="wte")', "E_NAME"),  # one node id for two layers
    ('linear(bias=False, init={"weight": "wte"}, name="lm_head")', "E_INITIALIZATION"),
    ('linear(bias=False, init={"weight": wte}, name="lm_head")', "E_SYNTAX"),
])
def test_asking_to_tie_the_head_to_the_embedding_fails(head, code):
    assert SOURCE.count(_HEAD) == 1
    with pytest.raises(HNDLError) as error:
        hndl.resolve(SOURCE.replace(_HEAD, head), **contract(10))
    assert error.value.code == code


def test_the_built_head_stays_untied_from_the_embedding():
    model = hndl_gpt2(reference_gpt2(tied=True), 10)
    embedding, head = model.nodes.n_wte.weight, model.nodes.n_lm_head.weight
    assert torch.equal(embedding, head)  # the same values, copied from the one tied tensor ...
    assert embedding is not head and embedding.untyped_storage().data_ptr() != head.untyped_storage().data_ptr()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ids, targets = _ids(10), _ids(10, seed=2)
    F.cross_entropy(model(ids).reshape(-1, VOCAB), targets.reshape(-1)).backward()
    assert not torch.equal(embedding.grad, head.grad)  # ... with their own gradients
    optimizer.step()
    assert not torch.equal(embedding, head)  # and a step moves them apart
