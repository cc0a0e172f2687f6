"""A 2-layer GPT-style language model built only from catalog operators, against a handwritten
nanoGPT-style torch module from identical state: the resolved plan, forward logits, every
parameter gradient, one optimizer step, and causality of the whole model.

    embedding -> positional_embedding -> transformer_block x 2 (causal) -> layer_norm -> linear
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hndl
from hndl.torch import network

VOCAB, LENGTH, WIDTH, HEADS = 50, 12, 32, 4
SOURCE = f"""
embedding({VOCAB}, {WIDTH}, name="tokens")
positional_embedding(name="positions")
transformer_block({HEADS}, causal=True, name="block1")
transformer_block({HEADS}, causal=True, name="block2")
layer_norm(name="final_norm")
linear(name="head")
"""
CONTRACT = dict(input_shape=("B", LENGTH), output_shape=("B", LENGTH, VOCAB), input_dtype="int64")


# -- the handwritten model ----------------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(width // self.heads)
        future = torch.ones(length, length, dtype=torch.bool).triu(1)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class HandwrittenGPT(nn.Module):
    def __init__(self, vocab, length, width, heads, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(length, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def _pairs(model, hand):
    """(HNDL parameter, handwritten parameter) for every parameter of both models."""
    nodes = model.nodes
    pairs = [(nodes.n_tokens.weight, hand.wte.weight), (nodes.n_positions.weight, hand.wpe.weight)]
    for ours, theirs in zip((nodes.n_block1, nodes.n_block2), hand.blocks):
        pairs += [
            (ours.norm1.weight, theirs.ln_1.weight), (ours.norm1.bias, theirs.ln_1.bias),
            (ours.attention.in_proj_weight, theirs.attn.qkv.weight),
            (ours.attention.in_proj_bias, theirs.attn.qkv.bias),
            (ours.attention.out_proj.weight, theirs.attn.proj.weight),
            (ours.attention.out_proj.bias, theirs.attn.proj.bias),
            (ours.norm2.weight, theirs.ln_2.weight), (ours.norm2.bias, theirs.ln_2.bias),
            (ours.feed_forward.fc1.weight, theirs.mlp[0].weight), (ours.feed_forward.fc1.bias, theirs.mlp[0].bias),
            (ours.feed_forward.fc2.weight, theirs.mlp[2].weight), (ours.feed_forward.fc2.bias, theirs.mlp[2].bias),
        ]
    pairs += [(nodes.n_final_norm.weight, hand.ln_f.weight), (nodes.n_final_norm.bias, hand.ln_f.bias),
              (nodes.n_head.weight, hand.lm_head.weight), (nodes.n_head.bias, hand.lm_head.bias)]
    assert {id(a) for a, _ in pairs} == {id(p) for p in model.parameters()}
    assert {id(b) for _, b in pairs} == {id(p) for p in hand.parameters()}
    return pairs


@pytest.fixture
def models():
    torch.manual_seed(0)
    model = network(SOURCE, device="cpu", **CONTRACT)
    hand = HandwrittenGPT(VOCAB, LENGTH, WIDTH, HEADS)
    with torch.no_grad():
        for ours, theirs in _pairs(model, hand):
            ours.add_(0.05 * torch.randn_like(ours))  # non-trivial biases and norms
            theirs.copy_(ours)
    return model, hand


@pytest.fixture
def batch():
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (3, LENGTH), generator=generator)
    targets = torch.randint(0, VOCAB, (3, LENGTH), generator=generator)
    return ids, targets


def _loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


# -- the plan --------------------------------------------------------------------------------------------------
def test_the_plan_resolves_every_size_from_the_contract():
    plan = hndl.resolve(SOURCE, **CONTRACT)
    assert [(node.id, node.alias, node.output_shapes["out"]) for node in plan.nodes] == [
        ("tokens", "embedding", ("B", LENGTH, WIDTH)),
        ("positions", "positional_embedding", ("B", LENGTH, WIDTH)),
        ("block1", "transformer_block", ("B", LENGTH, WIDTH)),
        ("block2", "transformer_block", ("B", LENGTH, WIDTH)),
        ("final_norm", "layer_norm", ("B", LENGTH, WIDTH)),
        ("head", "linear", ("B", LENGTH, VOCAB)),
    ]
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["positions"].args == {"length": LENGTH, "embedding_dim": WIDTH, "max_length": None}
    assert nodes["head"].args["out_features"] == VOCAB and nodes["head"].provenance["out_features"] == "inferred"


def test_the_width_can_be_given_once_at_the_far_end():
    source = SOURCE.replace(f"embedding({VOCAB}, {WIDTH},", f"embedding({VOCAB},").replace(
        'linear(name="head")', f'linear(in_features={WIDTH}, name="head")')
    plan = hndl.resolve(source, **CONTRACT)
    nodes = {node.id: node for node in plan.nodes}
    assert nodes["tokens"].args["embedding_dim"] == WIDTH and nodes["tokens"].provenance["embedding_dim"] == "inferred"
    assert nodes["positions"].args["embedding_dim"] == WIDTH


def test_parameter_count_matches_the_handwritten_model(models):
    model, hand = models
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in hand.parameters())


# -- numerics ------------------------------------------------------------------------------------------------
def test_forward_logits_match_the_handwritten_model(models, batch):
    model, hand = models
    ids, _ = batch
    torch.testing.assert_close(model(ids), hand(ids))
    model.eval()
    hand.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hand(ids))


def test_every_parameter_gradient_matches_the_handwritten_model(models, batch):
    model, hand = models
    ids, targets = batch
    _loss(model(ids), targets).backward()
    _loss(hand(ids), targets).backward()
    for ours, theirs in _pairs(model, hand):
        assert ours.grad is not None and torch.count_nonzero(ours.grad) > 0
        torch.testing.assert_close(ours.grad, theirs.grad)


def test_one_training_step_gives_identical_parameters(models, batch):
    model, hand = models
    ids, targets = batch
    with torch.no_grad():
        initial_loss = _loss(model(ids), targets)
    pairs = _pairs(model, hand)
    before = [ours.detach().clone() for ours, _ in pairs]
    for module in (model, hand):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.5, momentum=0.9)
        optimizer.zero_grad()
        _loss(module(ids), targets).backward()
        optimizer.step()
    for (ours, theirs), old in zip(pairs, before):
        torch.testing.assert_close(ours, theirs)
        assert not torch.equal(ours, old)  # every parameter took part in the step
    with torch.no_grad():
        ours_logits, theirs_logits = model(ids), hand(ids)
    torch.testing.assert_close(ours_logits, theirs_logits)
    assert _loss(ours_logits, targets) < initial_loss


def test_later_tokens_never_change_earlier_logits(models, batch):
    model, _ = models
    ids, _ = batch
    with torch.no_grad():
        logits = model(ids)
        for position in (1, 5, LENGTH - 1):
            changed = ids.clone()
            changed[:, position:] = (changed[:, position:] + 1) % VOCAB
            after = model(changed)
            torch.testing.assert_close(after[:, :position], logits[:, :position], rtol=0, atol=1e-5)
            assert not torch.allclose(after[:, position], logits[:, position])
