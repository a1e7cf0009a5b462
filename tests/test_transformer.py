"""Tests of coursepkg.transformer: parity of the encoder and decoder layers with
torch.nn.TransformerEncoderLayer / TransformerDecoderLayer via from_torch (post-norm and pre-norm,
relu and gelu, causal, padding and per-batch masks, outputs and the gradients of the inputs and of
every parameter, float64 and float32); the feed-forward network; gradient checks; dropout;
TransformerLM (causal for every positional encoding, lengths beyond block_size, what each encoding
feeds the layers, the relative bias's direction, the fused path equals the explicit one, weight
tying, overfitting one batch, errors, TransformerConfig and the keywords build the same model);
attention maps come from record_attention and no module keeps them; the encoder-decoder
Transformer (shapes, source padding never matters, greedy translation and its attention, the loss,
overfitting one batch, learning to reverse sequences, errors)."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.func import functional_call

from coursepkg.data import SeqCodec, reverse_task
from coursepkg.multihead import record_attention
from coursepkg.positional import Rotary, sinusoidal_encoding
from coursepkg.self_attention import causal_mask
from coursepkg.transformer import (
    FeedForward,
    KVCache,
    Transformer,
    TransformerConfig,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
    TransformerLM,
)

SMALL = settings(max_examples=15, deadline=None, derandomize=True)
F64 = torch.float64
POSITIONS = ["learned", "sinusoidal", "rope", "relative", "none"]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


def random_mask(shape, seed: int) -> torch.Tensor:
    """A boolean mask (True = may attend), about half True, key 0 always allowed."""
    mask = torch.rand(shape, generator=gen(seed)) < 0.5
    mask[..., 0] = True
    return mask


def random_padding(B: int, S: int, seed: int) -> torch.Tensor:
    """torch's key_padding_mask (B, S), True = padding, never key 0, at least one per row."""
    pad = torch.rand(B, S, generator=gen(seed)) < 0.4
    pad[:, 0] = False
    pad[torch.arange(B), torch.randint(1, S, (B,), generator=gen(seed + 1))] = True
    return pad


def loss_of(out: torch.Tensor, seed: int = 50) -> torch.Tensor:
    """A random weighting of the output, so that every entry gets its own gradient."""
    return (out * randn(*out.shape, seed=seed, dtype=out.dtype)).sum()


def param_grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad for name, p in module.named_parameters()}


def assert_grads_close(ours: dict, theirs: dict, **tol) -> None:
    assert ours.keys() == theirs.keys()
    for name in theirs:
        assert ours[name] is not None and theirs[name] is not None, name
        torch.testing.assert_close(ours[name], theirs[name], **tol,
                                   msg=lambda m, name=name: f"gradient of {name}: {m}")


# ----------------------------------------------------------------------------- parity helpers
def torch_name(name: str) -> str:
    """Our parameter name -> torch's: the feed-forward network lives in ``ff``, cross-attention
    is called ``cross_attn`` (torch: ``multihead_attn``)."""
    return name.replace("ff.linear", "linear").replace("cross_attn.", "multihead_attn.")


def randomise_(module: nn.Module, seed: int) -> None:
    """torch starts biases at 0 and layer norms at (1, 0): random ones, so that the parity
    tests see every bias and tell the norms apart."""
    with torch.no_grad():
        for i, (name, p) in enumerate(module.named_parameters()):
            noise = 0.5 * randn(*p.shape, seed=seed + 1000 + i, dtype=p.dtype)
            if name.endswith("bias"):
                p.copy_(noise)
            elif name.startswith("norm"):
                p.copy_(1 + noise)


def make_encoder_pair(D=8, H=2, F_=16, *, norm_first, activation="relu", seed=0, dtype=F64,
                      eps=1e-5):
    """torch's layer (train mode, dropout 0: no fast path) and ours made by from_torch."""
    torch.manual_seed(seed)
    ref = nn.TransformerEncoderLayer(D, H, F_, dropout=0.0, activation=activation,
                                     layer_norm_eps=eps, batch_first=True,
                                     norm_first=norm_first, dtype=dtype)
    ref.train()
    randomise_(ref, seed)
    return ref, TransformerEncoderLayer.from_torch(ref)


def make_decoder_pair(D=8, H=2, F_=16, *, norm_first, activation="relu", seed=0, dtype=F64,
                      eps=1e-5):
    torch.manual_seed(seed)
    ref = nn.TransformerDecoderLayer(D, H, F_, dropout=0.0, activation=activation,
                                     layer_norm_eps=eps, batch_first=True,
                                     norm_first=norm_first, dtype=dtype)
    ref.train()
    randomise_(ref, seed)
    return ref, TransformerDecoderLayer.from_torch(ref)


def attention_masks(kind: str, B: int, H: int, T: int, S: int, seed: int):
    """torch's (attn_mask, key_padding_mask), True = NOT allowed, and the same as our one mask
    (True = may attend)."""
    if kind == "none":
        return None, None, None
    if kind == "causal":
        return ~causal_mask(T), None, causal_mask(T)  # (T, T)
    if kind == "TS":
        allowed = random_mask((T, S), seed)  # (T, S)
        return ~allowed, None, allowed
    if kind == "per-batch":  # ours (B, T, S) for every head; torch's 3-D mask is (B * H, T, S)
        allowed = random_mask((B, T, S), seed)
        return (~allowed).repeat_interleave(H, dim=0), None, allowed
    pad = random_padding(B, S, seed)  # (B, S)
    if kind == "padding":
        return None, pad, ~pad[:, None, None, :]  # (B, 1, 1, S)
    if kind == "causal+padding":
        return ~causal_mask(T), pad, causal_mask(T) & ~pad[:, None, None, :]
    assert kind == "TS+padding"
    allowed = random_mask((T, S), seed + 7)
    return ~allowed, pad, allowed & ~pad[:, None, None, :]


def run_pair(ref, ours, inputs, torch_kwargs, our_args):
    """Outputs and gradients (w.r.t. the inputs and every parameter, under torch's names) of
    torch's layer and of ours."""
    results = []
    for module in (ref, ours):
        module.zero_grad(set_to_none=True)
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        out = module(*leaves, **torch_kwargs) if module is ref else module(*leaves, *our_args)
        loss_of(out).backward()
        grads = {f"input{i}": t.grad for i, t in enumerate(leaves)}
        grads.update({name if module is ref else torch_name(name): p.grad
                      for name, p in module.named_parameters()})
        results.append((out, grads))
    return results


def assert_same(results, **tol):
    (out_ref, grads_ref), (out, grads) = results
    assert out.shape == out_ref.shape and out.dtype == out_ref.dtype
    torch.testing.assert_close(out, out_ref, **tol)
    assert_grads_close(grads, grads_ref, **tol)


# ----------------------------------------------------------------------------- parity, float64
ENCODER_MASKS = ["none", "causal", "TS", "per-batch", "padding", "causal+padding"]
DECODER_MASKS = [  # (self-attention mask, memory mask)
    ("none", "none"),
    ("causal", "none"),
    ("causal", "padding"),
    ("causal+padding", "padding"),
    ("causal", "TS+padding"),
    ("per-batch", "per-batch"),
    ("TS", "TS"),
]


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masked", ENCODER_MASKS)
def test_encoder_layer_equals_torch(norm_first, activation, masked):
    B, T, D, H = 3, 5, 8, 2
    ref, ours = make_encoder_pair(D, H, 16, norm_first=norm_first, activation=activation,
                                  seed=len(masked))
    attn_mask, padding, mask = attention_masks(masked, B, H, T, T, seed=3)
    x = randn(B, T, D, seed=1)
    with record_attention(ours) as maps:
        results = run_pair(ref, ours, [x],
                           {"src_mask": attn_mask, "src_key_padding_mask": padding}, [mask])
    assert results[1][0].shape == (B, T, D)
    assert_same(results)
    # the recorder has the weights of the forward, detached, zero where masked
    weights = maps["self_attn"]
    assert weights.shape == (B, H, T, T) and not weights.requires_grad
    if mask is not None:
        full = (mask[:, None] if mask.dim() == 3 else mask).expand(B, H, T, T)
        assert not full.all() and (weights[~full] == 0).all()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("self_masked, memory_masked", DECODER_MASKS, ids=str)
def test_decoder_layer_equals_torch(norm_first, activation, self_masked, memory_masked):
    B, T, S, D, H = 3, 4, 6, 8, 2
    ref, ours = make_decoder_pair(D, H, 16, norm_first=norm_first, activation=activation,
                                  seed=len(self_masked) + len(memory_masked))
    tgt_mask, tgt_padding, self_mask = attention_masks(self_masked, B, H, T, T, seed=4)
    memory_mask, memory_padding, cross_mask = attention_masks(memory_masked, B, H, T, S, seed=5)
    x, memory = randn(B, T, D, seed=1), randn(B, S, D, seed=2)
    torch_kwargs = {"tgt_mask": tgt_mask, "memory_mask": memory_mask,
                    "tgt_key_padding_mask": tgt_padding,
                    "memory_key_padding_mask": memory_padding}
    with record_attention(ours) as maps:
        results = run_pair(ref, ours, [x, memory], torch_kwargs, [self_mask, cross_mask])
    out, grads = results[1]
    assert out.shape == (B, T, D) and grads["input1"].shape == (B, S, D)
    assert_same(results)
    assert list(maps) == ["self_attn", "cross_attn"]
    assert maps["self_attn"].shape == (B, H, T, T)
    assert maps["cross_attn"].shape == (B, H, T, S)
    torch.testing.assert_close(maps["cross_attn"].sum(-1), torch.ones(B, H, T, dtype=F64))
    if cross_mask is not None:
        full = (cross_mask[:, None] if cross_mask.dim() == 3 else cross_mask).expand(B, H, T, S)
        assert (maps["cross_attn"][~full] == 0).all()


def test_the_masks_in_the_parity_tests_really_mask():
    """Guard for the tests above: every kind of mask hides some keys and keeps one per query."""
    B, H, T, S = 3, 2, 4, 6
    for kind in ["causal", "TS", "per-batch", "padding", "causal+padding", "TS+padding"]:
        S_ = T if "causal" in kind else S
        _, _, mask = attention_masks(kind, B, H, T, S_, seed=3)
        full = (mask[:, None] if mask.dim() == 3 else mask).expand(B, H, T, S_)
        assert not full.all() and full.any(dim=-1).all(), kind


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_parity_float32_default_tolerances_and_another_size(norm_first):
    B, T, S, D, H, F_ = 2, 5, 7, 12, 3, 20
    for dtype in (torch.float32, F64):
        ref, ours = make_encoder_pair(D, H, F_, norm_first=norm_first, seed=21, dtype=dtype)
        attn_mask, padding, mask = attention_masks("causal+padding", B, H, T, T, seed=6)
        results = run_pair(ref, ours, [randn(B, T, D, seed=7, dtype=dtype)],
                           {"src_mask": attn_mask, "src_key_padding_mask": padding}, [mask])
        assert results[1][0].dtype == dtype
        assert_same(results)
        ref, ours = make_decoder_pair(D, H, F_, norm_first=norm_first, seed=22, dtype=dtype)
        memory_mask, memory_padding, cross_mask = attention_masks("padding", B, H, T, S, seed=8)
        results = run_pair(
            ref, ours, [randn(B, T, D, seed=9, dtype=dtype), randn(B, S, D, seed=10, dtype=dtype)],
            {"tgt_mask": ~causal_mask(T), "memory_key_padding_mask": memory_padding},
            [causal_mask(T), cross_mask])
        assert_same(results)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_layer_norm_eps_is_copied(norm_first):
    """A large epsilon changes the output visibly: it must come from torch's layer."""
    B, T, S, D = 2, 3, 4, 8
    x, memory = 0.1 * randn(B, T, D, seed=1), randn(B, S, D, seed=2)
    ref, ours = make_encoder_pair(norm_first=norm_first, seed=3, eps=0.5)
    assert ours.norm1.eps == ours.norm2.eps == 0.5
    assert_same(run_pair(ref, ours, [x], {}, []))
    ref, ours = make_decoder_pair(norm_first=norm_first, seed=4, eps=0.5)
    assert ours.norm3.eps == 0.5
    assert_same(run_pair(ref, ours, [x, memory], {}, []))


# ----------------------------------------------------------------------------- from_torch
@pytest.mark.parametrize("kind", ["encoder", "decoder"])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("training", [True, False])
def test_from_torch_copies_weights_configuration_dtype_and_mode(kind, dtype, training):
    torch.manual_seed(0)
    cls = nn.TransformerEncoderLayer if kind == "encoder" else nn.TransformerDecoderLayer
    ref = cls(12, 3, 20, dropout=0.25, activation="gelu", batch_first=True, norm_first=True,
              dtype=dtype)
    ref.train(training)
    ours = (TransformerEncoderLayer if kind == "encoder" else TransformerDecoderLayer).from_torch(
        ref)
    assert ours.training == training and ours.norm_first
    assert ours.ff.activation == "gelu"
    assert (ours.self_attn.d_model, ours.self_attn.n_heads, ours.ff.linear1.out_features) == (
        12, 3, 20)
    assert ours.self_attn.dropout == 0.25 and ours.ff.dropout.p == 0.25
    assert ours.dropout1.p == 0.25 and ours.dropout2.p == 0.25
    ref_params = dict(ref.named_parameters())
    assert {torch_name(n) for n, _ in ours.named_parameters()} == set(ref_params)
    for name, p in ours.named_parameters():
        theirs = ref_params[torch_name(name)]
        assert p.dtype == dtype and torch.equal(p, theirs), name
        assert p.data_ptr() != theirs.data_ptr(), f"{name} is shared, not copied"


def test_from_torch_default_relu_and_post_norm():
    ours = TransformerEncoderLayer.from_torch(nn.TransformerEncoderLayer(8, 2, batch_first=True))
    assert ours.ff.activation == "relu" and not ours.norm_first
    assert ours.ff.linear1.out_features == 2048  # torch's default width


@pytest.mark.parametrize("cls", [TransformerEncoderLayer, TransformerDecoderLayer])
def test_from_torch_refuses_what_it_cannot_copy(cls):
    ref_cls = nn.TransformerEncoderLayer if cls is TransformerEncoderLayer else (
        nn.TransformerDecoderLayer)
    with pytest.raises(ValueError, match="batch_first=True"):
        cls.from_torch(ref_cls(8, 2, 16))
    with pytest.raises(ValueError, match=r"relu and \(exact\) gelu"):
        cls.from_torch(ref_cls(8, 2, 16, activation=nn.GELU(approximate="tanh"),
                               batch_first=True))
    with pytest.raises(ValueError, match=r"relu and \(exact\) gelu"):
        cls.from_torch(ref_cls(8, 2, 16, activation=torch.tanh, batch_first=True))
    other = nn.TransformerDecoderLayer if ref_cls is nn.TransformerEncoderLayer else (
        nn.TransformerEncoderLayer)
    with pytest.raises(ValueError, match=rf"expected a torch.nn.{ref_cls.__name__}, got "
                                         rf"{other.__name__}"):
        cls.from_torch(other(8, 2, 16, batch_first=True))


@pytest.mark.parametrize("cls", [TransformerEncoderLayer, TransformerDecoderLayer])
def test_from_torch_refuses_a_layer_without_biases_clearly(cls):
    ref_cls = nn.TransformerEncoderLayer if cls is TransformerEncoderLayer else (
        nn.TransformerDecoderLayer)
    with pytest.raises(ValueError, match="bias"):
        cls.from_torch(ref_cls(8, 2, 16, batch_first=True, bias=False))


# ----------------------------------------------------------------------------- feed-forward
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_is_the_formula_applied_at_every_position(activation):
    torch.manual_seed(0)
    ff = FeedForward(6, 10, activation=activation).double()
    x = randn(2, 3, 4, 6, seed=1)  # any leading dimensions
    w1, b1, w2, b2 = ff.linear1.weight, ff.linear1.bias, ff.linear2.weight, ff.linear2.bias
    h = x @ w1.T + b1
    act = h.clamp(min=0) if activation == "relu" else 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    expected = act @ w2.T + b2
    out = ff(x)
    assert out.shape == x.shape
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(ff(x[1, 2, 3]), out[1, 2, 3])  # one position alone
    assert ff.linear1.weight.shape == (10, 6) and ff.linear2.weight.shape == (6, 10)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_gradcheck_feed_forward(activation):
    torch.manual_seed(1)
    ff = FeedForward(3, 5, activation=activation).double()
    names = [n for n, _ in ff.named_parameters()]
    params = [p.detach().clone().requires_grad_() for _, p in ff.named_parameters()]
    x = randn(2, 4, 3, seed=2).requires_grad_()

    def fn(x, *ps):
        return functional_call(ff, dict(zip(names, ps, strict=True)), (x,))

    assert torch.autograd.gradcheck(fn, (x, *params))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_gradcheck_tiny_layer_inputs_and_parameters(norm_first, kind):
    torch.manual_seed(2)
    if kind == "encoder":
        layer = TransformerEncoderLayer(4, 2, 6, norm_first=norm_first, activation="gelu")
        inputs = [randn(2, 3, 4, seed=3)]
        masks = (random_mask((2, 1, 3, 3), seed=4),)
    else:
        layer = TransformerDecoderLayer(4, 2, 6, norm_first=norm_first, activation="gelu")
        inputs = [randn(2, 3, 4, seed=3), randn(2, 5, 4, seed=5)]
        masks = (causal_mask(3), random_mask((2, 1, 1, 5), seed=6))
    layer = layer.double()
    randomise_(layer, 7)
    names = [n for n, _ in layer.named_parameters()]
    params = [p.detach().clone().requires_grad_() for _, p in layer.named_parameters()]
    inputs = [t.requires_grad_() for t in inputs]
    n = len(inputs)

    def fn(*args):
        state = dict(zip(names, args[n:], strict=True))
        return functional_call(layer, state, (*args[:n], *masks))

    assert torch.autograd.gradcheck(fn, (*inputs, *params))


# ----------------------------------------------------------------------------- dropout
def twins(build, **dropout_kwargs):
    """The same module built with dropout > 0 and with dropout 0, the same weights."""
    torch.manual_seed(0)
    with_dropout = build(dropout=0.3, **dropout_kwargs).double()
    without = build(dropout=0.0, **dropout_kwargs).double()
    without.load_state_dict(with_dropout.state_dict())
    return with_dropout, without


@pytest.mark.parametrize("name", ["encoder", "decoder", "lm", "seq2seq"])
def test_dropout_is_off_in_eval_mode_and_on_in_training(name):
    x, memory = randn(2, 5, 8, seed=1), randn(2, 6, 8, seed=2)
    idx = torch.randint(1, 11, (2, 5), generator=gen(3))
    src = torch.randint(1, 11, (2, 6), generator=gen(4))
    builds = {
        "encoder": (lambda **kw: TransformerEncoderLayer(8, 2, 16, **kw), (x, causal_mask(5))),
        "decoder": (lambda **kw: TransformerDecoderLayer(8, 2, 16, **kw), (x, memory)),
        "lm": (lambda **kw: TransformerLM(11, 8, 8, 2, 2, **kw), (idx,)),
        "seq2seq": (lambda **kw: Transformer(11, 11, 8, 2, 2, **kw), (src, idx)),
    }
    build, args = builds[name]
    for norm_first in (False, True):
        with_dropout, without = twins(build, norm_first=norm_first)
        with torch.no_grad():
            with_dropout.eval()
            out = with_dropout(*args)
            torch.testing.assert_close(with_dropout(*args), out, rtol=0, atol=0)
            torch.testing.assert_close(without.eval()(*args), out, rtol=0, atol=0)
            torch.testing.assert_close(without.train()(*args), out, rtol=0, atol=0)
            torch.manual_seed(1)
            assert not torch.allclose(with_dropout.train()(*args), out)


# ----------------------------------------------------------------------------- TransformerLM
V, BLOCK, D_LM, H_LM = 11, 8, 16, 2


def make_lm(pos: str, seed: int = 0, n_layers: int = 2, **kwargs) -> TransformerLM:
    """A tiny float64 LM; for "relative" the biases (initialised to 0) are made random."""
    torch.manual_seed(seed)
    lm = TransformerLM(V, BLOCK, D_LM, H_LM, n_layers, pos=pos, **kwargs).double()
    if lm.relative is not None:
        with torch.no_grad():
            for i, rel in enumerate(lm.relative):
                rel.bias.copy_(randn(*rel.bias.shape, seed=seed + 100 + i))
    return lm.eval()


def tokens(B: int, T: int, seed: int) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=gen(seed))


@pytest.mark.parametrize("pos", POSITIONS)
def test_lm_shapes_and_dtypes(pos):
    for dtype in (torch.float32, F64):
        torch.manual_seed(0)
        lm = TransformerLM(V, BLOCK, D_LM, H_LM, 2, pos=pos).to(dtype)
        for T in (1, 3, BLOCK):
            with record_attention(lm) as maps:
                logits = lm(tokens(2, T, seed=T))
            assert logits.shape == (2, T, V) and logits.dtype == dtype
            assert torch.isfinite(logits).all()
            assert list(maps) == ["layers.0.self_attn", "layers.1.self_attn"]
            assert all(w.shape == (2, H_LM, T, T) and w.dtype == dtype for w in maps.values())
    assert f"pos={pos!r}" in repr(lm)


@pytest.mark.parametrize("pos", POSITIONS)
@SMALL
@given(st.integers(1, BLOCK), st.data())
def test_lm_is_causal_for_every_position_encoding(pos, T, data):
    """Changing tokens after t never changes the logits at or before t; changing token t
    changes the logits at t."""
    t = data.draw(st.integers(0, T - 1), label="t")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    lm = make_lm(pos, seed=seed % 7)
    idx = tokens(2, T, seed)
    later = idx.clone()
    later[:, t + 1:] = (later[:, t + 1:] + 1 + tokens(2, T - t - 1, seed + 1) % (V - 1)) % V
    now = idx.clone()
    now[:, t] = (now[:, t] + 1) % V
    with torch.no_grad():
        logits, logits_later, logits_now = lm(idx), lm(later), lm(now)
    if t + 1 < T:
        assert (later[:, t + 1:] != idx[:, t + 1:]).all()
    torch.testing.assert_close(logits_later[:, : t + 1], logits[:, : t + 1], rtol=0, atol=0)
    torch.testing.assert_close(logits_now[:, :t], logits[:, :t], rtol=0, atol=0)
    assert not torch.allclose(logits_now[:, t], logits[:, t])


@pytest.mark.parametrize("pos", [p for p in POSITIONS if p != "learned"])
def test_lm_runs_beyond_block_size_except_learned(pos):
    lm = make_lm(pos, seed=1)
    idx = tokens(2, 3 * BLOCK + 1, seed=2)
    with torch.no_grad():
        logits = lm(idx)
        prefix = lm(idx[:, :BLOCK])
    assert logits.shape == (2, 3 * BLOCK + 1, V) and torch.isfinite(logits).all()
    torch.testing.assert_close(logits[:, :BLOCK], prefix)  # causal: the prefix is unchanged
    # and a long run does not change what a short one gives afterwards (no state kept)
    with torch.no_grad():
        torch.testing.assert_close(lm(idx[:, :BLOCK]), prefix, rtol=0, atol=0)


def test_learned_positions_refuse_a_sequence_longer_than_block_size():
    lm = make_lm("learned")
    lm(tokens(1, BLOCK, seed=0))  # exactly block_size is fine
    with pytest.raises(ValueError, match=rf"max_len={BLOCK}, got a sequence of length {BLOCK + 1}"):
        lm(tokens(1, BLOCK + 1, seed=0))


def record_layers(layers, run):
    """Call ``run()`` and record, for every layer, in call order, its positional arguments,
    its keyword arguments and its output."""
    calls = []

    def before(module, args, kwargs):
        calls.append({"args": args, "kwargs": kwargs})

    def after(module, args, output):
        calls[-1]["out"] = output

    handles = [h for layer in layers
               for h in (layer.register_forward_pre_hook(before, with_kwargs=True),
                         layer.register_forward_hook(after))]
    try:
        with torch.no_grad():
            result = run()
    finally:
        for h in handles:
            h.remove()
    return calls, result


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_what_each_position_encoding_feeds_the_layers(pos, norm_first):
    """Tokens scaled by sqrt(D); absolute encodings added to them; RoPE and the relative bias
    act inside every layer's attention instead; every layer gets the causal mask and the
    previous layer's output; the head reads the last layer's output through the final layer
    norm (pre-norm) or directly (post-norm)."""
    lm = make_lm(pos, seed=3, norm_first=norm_first)
    T = 6
    idx = tokens(2, T, seed=4)
    calls, logits = record_layers(lm.layers, lambda: lm(idx))
    assert len(calls) == 2
    x0 = lm.token_embed.weight[idx] * math.sqrt(D_LM)  # (B, T, D)
    if pos == "learned":
        x0 = x0 + lm.positions.weight[:T]
    elif pos == "sinusoidal":
        x0 = x0 + sinusoidal_encoding(T, D_LM, dtype=F64)
    # (the sinusoidal table's precision has its own test below)
    tol = 1e-6 if pos == "sinusoidal" else 1e-12
    torch.testing.assert_close(calls[0]["args"][0], x0, rtol=tol, atol=tol)
    for i, call in enumerate(calls):
        mask = call["args"][1] if len(call["args"]) > 1 else call["kwargs"]["mask"]
        assert torch.equal(mask, causal_mask(T)), i
        score_bias = call["kwargs"].get("score_bias")
        if pos == "relative":  # the layer's own table, per head: (1, H, T, T)
            torch.testing.assert_close(score_bias, lm.relative[i](T)[None], rtol=0, atol=0)
            assert score_bias.shape == (1, H_LM, T, T)
        else:
            assert score_bias is None
        rotate = call["kwargs"].get("rotate")
        if pos == "rope":  # one Rotary, passed to every layer
            assert isinstance(rotate, Rotary) and rotate.base == 10000.0 and rotate is lm.rotary
        else:
            assert rotate is None and lm.rotary is None
        assert lm.layers[i].norm_first == norm_first
    torch.testing.assert_close(calls[1]["args"][0], calls[0]["out"], rtol=0, atol=0)
    last = calls[-1]["out"]
    expected = lm.head(F.layer_norm(last, (D_LM,), lm.norm.weight, lm.norm.bias)
                       if norm_first else last)
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)


def test_sinusoidal_positions_have_the_model_s_dtype():
    lm = make_lm("sinusoidal")
    seq2seq = make_seq2seq()
    for positions in (lm.positions, seq2seq.positions):
        for T in (1, 5, 40):
            table = positions(T)
            assert table.dtype == F64, T
            torch.testing.assert_close(table, sinusoidal_encoding(T, D_LM, dtype=F64),
                                       rtol=0, atol=1e-15)


@pytest.mark.parametrize("pos", POSITIONS)
def test_scores_of_equal_tokens_depend_on_the_offset_only_without_absolute_positions(pos):
    """Feed one token T times. Without an absolute encoding every position of the first layer
    holds the same vector, so its scores can differ only through RoPE or the relative bias,
    which depend on the offset t - s alone: log w[t, s] - log w[t, t] is a function of t - s.
    Without any encoding the causal weights are uniform, 1 / (t + 1). Absolute encodings break
    the pattern."""
    lm = make_lm(pos, seed=5)
    T = BLOCK
    with torch.no_grad(), record_attention(lm) as maps:
        lm(torch.full((1, T), 4))
    weights = maps["layers.0.self_attn"][0]  # (H, T, T) of the first layer
    logw = weights.log()
    diffs = {}  # offset d -> log w[t, t - d] - log w[t, t] for every t >= d
    for d in range(1, T):
        t = torch.arange(d, T)
        diffs[d] = logw[:, t, t - d] - logw[:, t, t]  # (H, T - d)
    if pos == "none":
        expected = 1 / torch.arange(1, T + 1, dtype=F64)
        torch.testing.assert_close(weights, causal_mask(T) * expected[:, None].expand(T, T)
                                   .expand(H_LM, T, T))
    if pos in ("rope", "relative", "none"):
        for d, diff in diffs.items():
            torch.testing.assert_close(diff, diff[:, :1].expand_as(diff), rtol=0, atol=1e-10,
                                       msg=lambda m, d=d: f"offset {d}: {m}")
        if pos != "none":  # and the offset does matter
            assert not torch.allclose(diffs[1][:, 0], diffs[2][:, 0])
    else:
        assert not torch.allclose(diffs[1], diffs[1][:, :1].expand_as(diffs[1]))


@pytest.mark.parametrize("pos", POSITIONS)
def test_a_repeated_first_token_cannot_be_counted_without_absolute_positions(pos):
    """"a", "a a", "a a a": the values are all the same vector, so whatever the weights (RoPE
    and the relative bias change only the weights), attention returns that vector, and the
    logits at the end of each run are equal. Absolute positions tell the runs apart."""
    lm = make_lm(pos, seed=12)
    with torch.no_grad():
        logits = lm(torch.full((1, 5), 3))[0]  # (T, V)
    if pos in ("learned", "sinusoidal"):
        assert not torch.allclose(logits[1:], logits[:1].expand(4, V))
    else:
        torch.testing.assert_close(logits[1:], logits[:1].expand(4, V), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pos", POSITIONS)
def test_one_layer_without_positions_ignores_the_order_of_the_prefix(pos):
    """With one layer and no encoding, the output at t sees its own token and the set of tokens
    before it: permuting the prefix changes nothing. Every encoding makes order matter."""
    lm = make_lm(pos, seed=6, n_layers=1)
    idx = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
    permuted = torch.tensor([[6, 4, 1, 5, 3, 2, 7]])  # the last token stays in place
    with torch.no_grad():
        a, b = lm(idx)[0, -1], lm(permuted)[0, -1]
    if pos == "none":
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    else:
        assert not torch.allclose(b, a, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("offset, looks_at", [(-1, "previous"), (0, "itself"), (1, "next")])
def test_relative_bias_is_indexed_by_key_minus_query(offset, looks_at):
    """Put a large bias on one offset s - t: with offset -1 every query looks at the token
    before it, with 0 at itself; offset +1 points into the future, which the causal mask
    hides, so it changes nothing at all."""
    lm = make_lm("relative", seed=7)
    M = lm.relative[0].max_distance
    assert M == BLOCK
    idx = tokens(2, BLOCK, seed=8)
    with torch.no_grad():
        for rel in lm.relative:
            rel.bias.zero_()
        with record_attention(lm) as maps_zero:
            logits_zero = lm(idx)
        for rel in lm.relative:
            rel.bias[:, M + offset] = 50.0
        with record_attention(lm) as maps:
            logits = lm(idx)
    t = torch.arange(1, BLOCK)
    for weights, zero in zip(maps.values(), maps_zero.values(), strict=True):  # (B, H, T, T)
        assert (weights[..., ~causal_mask(BLOCK)] == 0).all()  # never the future
        assert (weights[..., 0, 0] == 1).all()
        if looks_at == "previous":
            assert (weights[..., t, t - 1] > 0.999).all()
        elif looks_at == "itself":
            assert (weights.diagonal(dim1=-2, dim2=-1) > 0.999).all()
        else:
            torch.testing.assert_close(weights, zero, rtol=0, atol=0)
    if looks_at == "next":
        torch.testing.assert_close(logits, logits_zero, rtol=0, atol=0)


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_lm_fused_attention_equals_the_explicit_path(pos, norm_first):
    """Outputs and the gradient of every parameter (the relative biases included) agree."""
    explicit = make_lm(pos, seed=9, norm_first=norm_first)
    torch.manual_seed(0)
    fused = TransformerLM(V, BLOCK, D_LM, H_LM, 2, pos=pos, norm_first=norm_first,
                          fused=True).double()
    fused.load_state_dict(explicit.state_dict())
    assert all(layer.fused for layer in fused.layers) and fused.config.fused
    assert not any(layer.fused for layer in explicit.layers)
    idx = tokens(3, BLOCK, seed=10)
    outs = []
    for lm in (explicit, fused):
        lm.train()
        lm.zero_grad(set_to_none=True)
        with record_attention(lm) as maps:
            logits = lm(idx)
        loss_of(logits).backward()
        outs.append((logits, param_grads(lm), maps))
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-10, atol=1e-10)
    assert_grads_close(outs[1][1], outs[0][1], rtol=1e-9, atol=1e-10)
    assert outs[1][2] == {}  # the fused kernel computes no weights to record
    assert len(outs[0][2]) == 2


def test_weight_tying_shares_the_embedding_and_still_trains():
    torch.manual_seed(0)
    tied = TransformerLM(V, BLOCK, D_LM, H_LM, 1, tie_weights=True)
    torch.manual_seed(0)
    untied = TransformerLM(V, BLOCK, D_LM, H_LM, 1)
    assert tied.head.weight is tied.token_embed.weight
    assert tied.head.weight.data_ptr() == tied.token_embed.weight.data_ptr()
    assert tied.head.bias is None and untied.head.bias is not None
    assert untied.head.weight is not untied.token_embed.weight
    count = sum(p.numel() for p in tied.parameters())
    assert count == sum(p.numel() for p in untied.parameters()) - V * D_LM - V
    # both uses of the matrix feed its one gradient
    tied(tokens(2, 5, seed=1)).sum().backward()
    assert tied.token_embed.weight.grad is not None
    assert tied.token_embed.weight.grad[tokens(2, 5, seed=1).unique()].abs().sum() > 0
    # it still learns, and stays tied
    torch.manual_seed(0)
    tied = TransformerLM(V, 12, D_LM, H_LM, 1, tie_weights=True)
    x, y = overfit_batch()
    first, final, pred = overfit(tied, x, y, steps=60, lr=1e-2)
    assert tied.head.weight is tied.token_embed.weight
    assert first > 0.8 * math.log(V) and final < 0.05 and torch.equal(pred, y)


def overfit_batch():
    """(x, y) (4, 12) where every target is predictable from its prefix, even without absolute
    positions: distinct first tokens, and no sequence starts with a repeated token (a run
    "a a" reads exactly like "a" to RoPE, a relative bias or no encoding)."""
    ids = tokens(4, 13, seed=11)
    ids[:, 0] = torch.arange(4)
    ids[:, 1] = (ids[:, 0] + 1 + ids[:, 1] % (V - 1)) % V
    return ids[:, :-1], ids[:, 1:]


def overfit(model, x, y, steps, lr, loss_fn=None):
    """Adam on one batch; the first loss, the final loss and the final predictions."""
    if loss_fn is None:
        def loss_fn(model):
            logits = model(x)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    first = None
    model.train()
    for _ in range(steps):
        loss = loss_fn(model)
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        final = loss_fn(model).item()
        pred = model(x).argmax(-1) if isinstance(model, TransformerLM) else None
    return first, final, pred


@pytest.mark.parametrize("pos", ["learned", "rope", "relative"])
def test_lm_overfits_one_batch(pos):
    torch.manual_seed(0)
    lm = TransformerLM(V, 12, 32, 4, 2, pos=pos)
    x, y = overfit_batch()
    first, final, pred = overfit(lm, x, y, steps=60, lr=1e-2)  # measured: see the report
    assert first > 0.8 * math.log(V)
    assert final < 0.05
    assert torch.equal(pred, y)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"pos": "alibi"}, r"pos must be one of 'learned', 'sinusoidal', 'rope', 'relative', "
                           r"'none'; got 'alibi'"),
        ({"pos": "rope", "d_model": 12, "n_heads": 4}, r"head width 3 must be even"),
        ({"d_model": 10, "n_heads": 4}, r"d_model=10 is not divisible by n_heads=4"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
        ({"dropout": -0.1}, r"dropout.*-0.1"),
        ({"vocab_size": 0}, "vocab_size must be a positive int"),
        ({"block_size": 0}, "block_size must be a positive int"),
        ({"n_layers": 0}, "n_layers must be a positive int"),
        ({"d_model": 8.0}, "d_model must be a positive int"),
        ({"activation": "tanh"}, r'activation must be "relu" or "gelu"'),
    ],
    ids=lambda v: str(v) if isinstance(v, dict) else "",
)
def test_lm_bad_arguments_are_rejected(kwargs, match):
    args = {"vocab_size": V, "block_size": BLOCK, "d_model": 8, "n_heads": 2, "n_layers": 1,
            **kwargs}
    with pytest.raises(ValueError, match=match):
        TransformerLM(**args)


CONFIG_CASES = [
    dict(pos="learned"),
    dict(pos="rope", d_ff=24, dropout=0.1, norm_first=False),
    dict(pos="relative", max_distance=3, tie_weights=True, activation="relu"),
    dict(pos="sinusoidal", fused=True),
    dict(pos="none"),
]


@pytest.mark.parametrize("kwargs", CONFIG_CASES, ids=lambda kw: kw["pos"])
def test_a_config_and_the_keywords_build_the_same_model(kwargs):
    """TransformerLM(TransformerConfig(...)) and TransformerLM(...) with the same arguments:
    the same config, state_dict keys and shapes, and (same seed) the same weights and logits."""
    config = TransformerConfig(V, BLOCK, D_LM, H_LM, 2, **kwargs)
    torch.manual_seed(0)
    from_config = TransformerLM(config)
    torch.manual_seed(0)
    from_keywords = TransformerLM(V, BLOCK, D_LM, H_LM, 2, **kwargs)
    torch.manual_seed(0)
    all_keywords = TransformerLM(vocab_size=V, block_size=BLOCK, d_model=D_LM, n_heads=H_LM,
                                 n_layers=2, **kwargs)
    assert from_config.config == from_keywords.config == all_keywords.config == config
    idx = tokens(2, 6, seed=13)
    logits = from_config.eval()(idx)
    for other in (from_keywords, all_keywords):
        a, b = from_config.state_dict(), other.state_dict()
        assert list(a) == list(b) and all(a[k].shape == b[k].shape for k in a)
        assert all(torch.equal(a[k], b[k]) for k in a)
        torch.testing.assert_close(other.eval()(idx), logits, rtol=0, atol=0)
    assert repr(from_config) == repr(from_keywords)


def test_the_config_holds_the_real_sizes_and_is_frozen():
    config = TransformerConfig(V, BLOCK, D_LM, H_LM, 2)
    assert config.d_ff == 4 * D_LM and config.max_distance == BLOCK  # None: the defaults
    assert config == TransformerConfig(V, BLOCK, D_LM, H_LM, 2, d_ff=4 * D_LM,
                                       max_distance=BLOCK)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.pos = "rope"
    with pytest.raises(TypeError):  # the fields after norm_first are keyword-only
        TransformerConfig(V, BLOCK, D_LM, H_LM, 2, None, 0.0, "learned", True, True)
    lm = TransformerLM(config)
    assert lm.config is config
    assert (lm.vocab_size, lm.block_size, lm.d_model, lm.pos) == (V, BLOCK, D_LM, "learned")
    assert lm.layers[0].ff.linear1.out_features == 4 * D_LM


def test_a_config_with_changed_fields():
    """TransformerLM(config, fused=True) is the config with that field replaced; positional
    arguments after a config are refused."""
    config = TransformerConfig(V, BLOCK, D_LM, H_LM, 2, pos="rope")
    fused = TransformerLM(config, fused=True)
    assert fused.config == dataclasses.replace(config, fused=True) and not config.fused
    assert all(layer.fused for layer in fused.layers)
    with pytest.raises(TypeError, match="keyword"):
        TransformerLM(config, 8)
    with pytest.raises(ValueError, match="pos must be one of"):
        TransformerLM(config, pos="alibi")


@pytest.mark.parametrize("kwargs, match", [
    ({"pos": "rope", "d_model": 12, "n_heads": 4}, r"head width 3 must be even"),
    ({"n_heads": 0}, "n_heads must be a positive int"),
    ({"d_ff": 0}, "d_ff must be a positive int"),
    ({"max_distance": 0}, "max_distance must be a positive int"),
    ({"pos": "sinusoidal", "d_model": 9, "n_heads": 3}, "sinusoidal table needs an even"),
], ids=str)
def test_a_bad_config_is_refused_when_it_is_made(kwargs, match):
    args = {"vocab_size": V, "block_size": BLOCK, "d_model": 8, "n_heads": 2, "n_layers": 1,
            **kwargs}
    with pytest.raises(ValueError, match=match):
        TransformerConfig(**args)


def module_state(model: nn.Module) -> dict[str, set[str]]:
    """The attribute names of every submodule (parameters and buffers are kept apart by
    nn.Module, so a new entry here is a plain attribute set by forward)."""
    return {name: set(vars(m)) for name, m in model.named_modules()}


@pytest.mark.parametrize("fused", [False, True])
def test_no_module_keeps_attention_weights_after_forward(fused):
    """No results are stored on modules: forward leaves every submodule's attributes as they
    were, and no attribute of any module is named like attention weights."""
    models = [make_lm(pos, fused=fused) for pos in POSITIONS] + [make_seq2seq()]
    idx = tokens(2, 6, seed=14)
    for model in models:
        before = module_state(model)
        with torch.no_grad():
            if isinstance(model, Transformer):
                model(idx, idx)
                model.translate(idx, 3, bos=1)
            else:
                model(idx)
        assert module_state(model) == before
        for name, m in model.named_modules():
            attributes = set(vars(m)) | set(m._buffers) | {
                a for a in dir(type(m)) if isinstance(getattr(type(m), a), property)}
            assert not {a for a in attributes if "attn_weights" in a}, name


def test_an_odd_head_width_is_fine_without_rope():
    for pos in ("learned", "relative", "none"):
        assert TransformerLM(V, BLOCK, 12, 4, 1, pos=pos)(tokens(1, 3, 0)).shape == (1, 3, V)
    with pytest.raises(ValueError, match="sinusoid|even"):  # the table needs an even D
        TransformerLM(V, BLOCK, 9, 3, 1, pos="sinusoidal")(tokens(1, 3, 0))


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), ()], ids=str)
def test_lm_rejects_idx_of_the_wrong_rank(shape):
    lm = TransformerLM(V, BLOCK, 8, 2, 1)
    with pytest.raises(ValueError, match=r"expected idx of shape \(B, T\), got"):
        lm(torch.zeros(shape, dtype=torch.long))


@pytest.mark.parametrize("cls", [TransformerEncoderLayer, TransformerDecoderLayer])
def test_layer_bad_arguments_and_inputs_are_rejected(cls):
    with pytest.raises(ValueError, match="not divisible"):
        cls(10, 4, 16)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        cls(8, 2, 16, dropout=1.5)
    with pytest.raises(ValueError, match=r'activation must be "relu" or "gelu"'):
        cls(8, 2, 16, activation="swish")
    with pytest.raises(ValueError, match="d_ff must be a positive int"):
        cls(8, 2, 0)
    for norm_first in (False, True):
        layer = cls(8, 2, 16, norm_first=norm_first)
        args = (torch.randn(5, 8),) if cls is TransformerEncoderLayer else (
            torch.randn(5, 8), torch.randn(2, 5, 8))
        with pytest.raises(ValueError, match=r"expected x of shape \(B, length, 8\)"):
            layer(*args)
        with pytest.raises(ValueError, match=r"expected x of shape \(B, length, 8\)"):
            layer(torch.randn(1, 2, 5, 8), *args[1:])
        with pytest.raises(ValueError, match=r"expected x of shape \(B, length, 8\), got "
                                             r"\(2, 5, 6\)"):  # the wrong width, either norm
            layer(torch.randn(2, 5, 6), *args[1:])
        if cls is TransformerDecoderLayer:
            with pytest.raises(ValueError, match=r"expected memory of shape \(B, length, 8\)"):
                layer(torch.randn(2, 5, 8), torch.randn(5, 8))


def test_feed_forward_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match='activation must be "relu" or "gelu", got \'tanh\''):
        FeedForward(8, 16, activation="tanh")
    for kwargs, match in [({"d_model": 0}, "d_model"), ({"d_ff": -1}, "d_ff"),
                          ({"dropout": 1.0}, "dropout")]:
        with pytest.raises(ValueError, match=match):
            FeedForward(**{"d_model": 8, "d_ff": 16, **kwargs})


# ----------------------------------------------------------------------------- encoder-decoder
SRC_V, TGT_V, PAD = 13, 11, 0


def make_seq2seq(norm_first=True, seed=0, **kwargs) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(SRC_V, TGT_V, 16, 2, 2, norm_first=norm_first, **kwargs).double()
    return model.eval()


def source(B, S, seed, lengths=None):
    """Source ids 1.. (0 is padding), right-padded to the given lengths."""
    src = torch.randint(1, SRC_V, (B, S), generator=gen(seed))
    if lengths is not None:
        src[torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]] = PAD
    return src


def target(B, T, seed):
    return torch.randint(1, TGT_V, (B, T), generator=gen(seed))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_seq2seq_shapes(norm_first):
    model = make_seq2seq(norm_first)
    src, tgt = source(3, 7, seed=1, lengths=[7, 4, 2]), target(3, 5, seed=2)
    logits = model(src, tgt)
    assert logits.shape == (3, 5, TGT_V) and logits.dtype == F64
    assert model.encode(src).shape == (3, 7, 16)
    assert isinstance(model.encoder_norm, nn.LayerNorm if norm_first else nn.Identity)
    assert len(model.encoder) == len(model.decoder) == 2
    assert model.source_mask(src).shape == (3, 1, 1, 7)
    assert model.source_mask(src).sum().item() == 7 + 4 + 2
    with record_attention(model) as maps:
        model(src, tgt)
    assert list(maps) == ["encoder.0.self_attn", "encoder.1.self_attn",
                          "decoder.0.self_attn", "decoder.0.cross_attn",
                          "decoder.1.self_attn", "decoder.1.cross_attn"]
    for i in range(2):
        assert maps[f"encoder.{i}.self_attn"].shape == (3, 2, 7, 7)
        assert maps[f"decoder.{i}.self_attn"].shape == (3, 2, 5, 5)
        assert maps[f"decoder.{i}.cross_attn"].shape == (3, 2, 5, 7)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_seq2seq_feeds_the_layers_what_the_paper_says(norm_first):
    """Embeddings times sqrt(D) plus the sinusoidal table; the encoder's layers hide the source
    padding; the decoder's layers get the causal mask, the encoder's (final-normed) output as
    memory and the padding mask for it; each layer reads the previous one's output."""
    model = make_seq2seq(norm_first, seed=1)
    S, T, D = 7, 5, 16
    src, tgt = source(2, S, seed=3, lengths=[7, 3]), target(2, T, seed=4)
    enc_calls, memory = record_layers(model.encoder, lambda: model.encode(src))
    dec_calls, logits = record_layers(model.decoder, lambda: model.decode(tgt, memory, src))
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt), logits, rtol=0, atol=0)
    padding = (src != PAD)[:, None, None, :]
    torch.testing.assert_close(
        enc_calls[0]["args"][0],
        model.src_embed.weight[src] * math.sqrt(D) + sinusoidal_encoding(S, D, dtype=F64))
    torch.testing.assert_close(
        dec_calls[0]["args"][0],
        model.tgt_embed.weight[tgt] * math.sqrt(D) + sinusoidal_encoding(T, D, dtype=F64))
    for calls in (enc_calls, dec_calls):
        assert len(calls) == 2
        torch.testing.assert_close(calls[1]["args"][0], calls[0]["out"], rtol=0, atol=0)
    for call in enc_calls:
        assert torch.equal(call["args"][1], padding)
    for call in dec_calls:
        _, memory_seen, self_mask, memory_mask = call["args"]
        torch.testing.assert_close(memory_seen, memory, rtol=0, atol=0)
        assert torch.equal(self_mask, causal_mask(T))
        assert torch.equal(memory_mask, padding)

    def final_norm(x, norm):
        return F.layer_norm(x, (D,), norm.weight, norm.bias) if norm_first else x

    torch.testing.assert_close(memory, final_norm(enc_calls[-1]["out"], model.encoder_norm),
                               rtol=0, atol=0)
    torch.testing.assert_close(
        logits, model.head(final_norm(dec_calls[-1]["out"], model.decoder_norm)), rtol=0, atol=0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_seq2seq_decoder_is_causal_and_reads_the_source(norm_first):
    model = make_seq2seq(norm_first, seed=2)
    src, tgt = source(2, 6, seed=5), target(2, 6, seed=6)
    with torch.no_grad():
        logits = model(src, tgt)
        for t in range(6):
            changed = tgt.clone()
            changed[:, t] = changed[:, t] % (TGT_V - 1) + 1
            out = model(src, changed)
            torch.testing.assert_close(out[:, :t], logits[:, :t], rtol=0, atol=0)
            assert not torch.allclose(out[:, t], logits[:, t])
        other_src = src.clone()
        other_src[:, 3] = other_src[:, 3] % (SRC_V - 1) + 1
        assert not torch.allclose(model(other_src, tgt), logits)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_extra_source_padding_never_changes_the_logits(norm_first):
    model = make_seq2seq(norm_first, seed=3)
    src, tgt = source(3, 6, seed=7, lengths=[6, 4, 1]), target(3, 5, seed=8)
    with torch.no_grad():
        logits = model(src, tgt)
        padded = torch.cat([src, torch.full((3, 5), PAD)], dim=1)
        torch.testing.assert_close(model(padded, tgt), logits, rtol=1e-12, atol=1e-12)
        # each row alone, without the padding its batch needed, gives the same logits
        for b, length in enumerate([6, 4, 1]):
            alone = model(src[b : b + 1, :length], tgt[b : b + 1])
            torch.testing.assert_close(alone, logits[b : b + 1], rtol=1e-12, atol=1e-12)
        # and padding really is hidden: the memory at padded positions is not read at all
        memory = model.encode(src)
        garbage = memory.clone()
        garbage[src == PAD] = 1e3 * randn(int((src == PAD).sum()), 16, seed=9)
        torch.testing.assert_close(model.decode(tgt, garbage, src), logits, rtol=0, atol=0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_translate_is_greedy_decoding_with_the_last_layer_s_attention(norm_first):
    model = make_seq2seq(norm_first, seed=4)
    bos, T = 1, 6
    src = source(3, 7, seed=10, lengths=[7, 5, 2])
    model.train()
    tokens_, weights = model.translate(src, T, bos)
    assert model.training  # the mode is restored
    assert tokens_.shape == (3, T) and tokens_.dtype == torch.long
    assert weights.shape == (3, T, 7) and not weights.requires_grad
    # greedy: each token is the argmax of the logits given the tokens before it
    model.eval()
    with torch.no_grad(), record_attention(model.decoder[-1]) as maps:
        tgt_in = torch.cat([torch.full((3, 1), bos), tokens_[:, :-1]], dim=1)
        logits = model(src, tgt_in)
        assert torch.equal(logits.argmax(-1), tokens_)
        teacher = maps["cross_attn"].mean(dim=1)  # (B, T, S)
    torch.testing.assert_close(weights, teacher, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, T, dtype=F64))
    assert (weights[(src == PAD)[:, None, :].expand(3, T, 7)] == 0).all()
    assert (weights[:, :, 1] > 0).all()
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        model.translate(src, 0, bos)


def test_seq2seq_loss_is_teacher_forced_cross_entropy_ignoring_padding():
    model = make_seq2seq(seed=5)
    bos = 1
    src = source(2, 5, seed=11, lengths=[5, 3])
    tgt = target(2, 4, seed=12)
    tgt[1, 2:] = PAD  # the second target is shorter
    tgt_in = torch.cat([torch.full((2, 1), bos), tgt[:, :-1]], dim=1)
    logp = torch.log_softmax(model(src, tgt_in), dim=-1)
    picked = [-logp[b, t, tgt[b, t]] for b in range(2) for t in range(4) if tgt[b, t] != PAD]
    assert len(picked) == 6
    torch.testing.assert_close(model.loss(src, tgt, bos), torch.stack(picked).mean())


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_seq2seq_overfits_one_batch(norm_first):
    torch.manual_seed(0)
    model = Transformer(SRC_V, TGT_V, 32, 4, 2, norm_first=norm_first)
    src = source(8, 6, seed=13, lengths=[6, 5, 4, 6, 3, 6, 2, 5])
    tgt = target(8, 5, seed=14)
    bos = 1

    def loss_fn(model):
        return model.loss(src, tgt, bos)

    first, final, _ = overfit(model, src, tgt, steps=60, lr=3e-3, loss_fn=loss_fn)
    assert first > 0.8 * math.log(TGT_V)
    assert final < 0.05
    tokens_, _ = model.translate(src, 5, bos)
    assert torch.equal(tokens_, tgt)


def test_seq2seq_learns_to_reverse_held_out_sequences():
    """The encoder-decoder reverses sequences it has never seen, all of them exactly, after a
    short run: 300 steps of Adam with a linearly decaying learning rate (measured with seeds
    0-5: 100% exact match on 500 held-out sequences by step 200 for every seed; ~10 s on one
    thread)."""
    codec = SeqCodec("0123456789")  # ids 3..12 are the digits, 0 is padding, 1 BOS
    length, steps, bos = 6, 300, SeqCodec.BOS
    torch.manual_seed(0)
    model = Transformer(codec.vocab_size, codec.vocab_size, d_model=32, n_heads=4, n_layers=2,
                        d_ff=64)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 - step / steps)
    g = gen(0)
    trained = set()
    for _ in range(steps):
        x, y = reverse_task(64, length, generator=g)
        trained.update(map(tuple, x.tolist()))
        loss = model.loss(x + 3, y + 3, bos)
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
    x, y = reverse_task(600, length, generator=gen(12345))
    unseen = torch.tensor([tuple(row) not in trained for row in x.tolist()])
    x, y = x[unseen][:500], y[unseen][:500]
    assert len(x) == 500
    tokens_, weights = model.translate(x + 3, length, bos)
    exact = (tokens_ == y + 3).all(dim=1).float().mean().item()
    assert exact == 1.0
    assert [codec.decode(row) for row in tokens_[:2]] == [
        codec.decode(row) for row in (y[:2] + 3)]


def test_seq2seq_bad_arguments_and_inputs_are_rejected():
    with pytest.raises(ValueError, match="src_vocab must be a positive int"):
        Transformer(0, TGT_V)
    with pytest.raises(ValueError, match="n_layers must be a positive int"):
        Transformer(SRC_V, TGT_V, n_layers=0)
    with pytest.raises(ValueError, match=r"d_model=10 is not divisible by n_heads=4"):
        Transformer(SRC_V, TGT_V, d_model=10, n_heads=4)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        Transformer(SRC_V, TGT_V, dropout=1.0)
    model = make_seq2seq()
    src, tgt = source(2, 5, seed=0), target(2, 4, seed=1)
    with pytest.raises(ValueError, match=r"expected src of shape \(B, S\), got \(5,\)"):
        model(src[0], tgt)
    with pytest.raises(ValueError, match=r"expected tgt of shape \(B, T\), got \(2, 4, 1\)"):
        model(src, tgt[..., None])


# ----------------------------------------------------------------------------- cached decoding
def lm_in_chunks(lm, idx, cuts):
    """decode_step over idx (B, T) cut at ``cuts``: the logits and the caches, chunk by chunk."""
    logits, caches, cache = [], [], None
    for a, b in zip([0, *cuts], [*cuts, idx.shape[1]], strict=True):
        out, cache = lm.decode_step(idx[:, a:b], cache)
        logits.append(out)
        caches.append(cache)
    return torch.cat(logits, dim=1), caches


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
@pytest.mark.parametrize("cuts", [[1, 2, 3, 4, 5, 6, 7], [3], [2, 7]], ids=str)
def test_lm_decode_step_equals_forward_for_every_position_encoding(pos, norm_first, cuts):
    lm = make_lm(pos, seed=0, norm_first=norm_first).eval()
    idx = tokens(3, BLOCK, seed=4)
    with record_attention(lm) as full_maps:
        full = lm(idx)
    with record_attention(lm) as maps:
        logits, caches = lm_in_chunks(lm, idx, cuts)
    torch.testing.assert_close(logits, full, rtol=0, atol=1e-10)
    # the last step's attention: its queries' rows of the full weights, over every key so far
    first = cuts[-1]
    for name, weights in maps.items():
        torch.testing.assert_close(weights, full_maps[name][:, :, first:], rtol=0, atol=1e-10)
    # the cache holds what each layer's attention read: LN1 of the layer's input (pre-norm)
    inputs = []
    hooks = [layer.register_forward_pre_hook(lambda m, args: inputs.append(args[0]))
             for layer in lm.layers]
    lm(idx)
    for hook in hooks:
        hook.remove()
    final = caches[-1]
    assert isinstance(final, KVCache) and final.length == BLOCK and len(final.inputs) == 2
    for layer, x, cached in zip(lm.layers, inputs, final.inputs, strict=True):
        expected = layer.norm1(x) if norm_first else x
        torch.testing.assert_close(cached, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("pos", POSITIONS)
def test_lm_decode_step_fused_equals_forward(pos):
    lm = make_lm(pos, seed=1, fused=True).eval()
    idx = tokens(2, BLOCK, seed=5)
    logits, _ = lm_in_chunks(lm, idx, [4, 5, 6])
    torch.testing.assert_close(logits, lm(idx), rtol=0, atol=1e-10)


def test_a_cache_is_never_changed_and_select_takes_rows():
    lm = make_lm("rope", seed=2)
    idx = tokens(3, 5, seed=6)
    _, cache = lm.decode_step(idx[:, :4])
    before = [x.clone() for x in cache.inputs]
    out, longer = lm.decode_step(idx[:, 4:], cache)
    assert longer.length == 5 and cache.length == 4
    assert all(torch.equal(a, b) for a, b in zip(before, cache.inputs, strict=True))
    rows = torch.tensor([2, 2, 0])
    picked = cache.select(rows)
    out_picked, _ = lm.decode_step(idx[rows, 4:], picked)
    torch.testing.assert_close(out_picked, out[rows], rtol=0, atol=1e-12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cache.inputs = ()


def test_decode_step_refuses_what_does_not_fit():
    lm = make_lm("learned", seed=0)
    _, cache = lm.decode_step(tokens(2, BLOCK, seed=0))
    with pytest.raises(ValueError, match=f"max_len={BLOCK}"):  # no vector for position BLOCK
        lm.decode_step(tokens(2, 1, seed=1), cache)
    _, cache = lm.decode_step(tokens(2, 3, seed=0))
    with pytest.raises(ValueError, match="the cache holds 2 sequences, the batch has 3"):
        lm.decode_step(tokens(3, 1, seed=1), cache)
    with pytest.raises(ValueError, match="one tensor per layer"):
        lm.decode_step(tokens(2, 1, seed=1), KVCache(cache.inputs[:1]))
    with pytest.raises(ValueError, match=r"expected idx of shape \(B, T\), T >= 1"):
        lm.decode_step(torch.zeros(2, 0, dtype=torch.long), cache)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_seq2seq_decode_step_equals_decode(norm_first):
    model = make_seq2seq(norm_first, seed=3)
    src, tgt = source(3, 7, seed=1, lengths=[7, 4, 2]), target(3, 6, seed=2)
    memory = model.encode(src)
    full = model.decode(tgt, memory, src)
    cache, logits = None, []
    for a, b in [(0, 2), (2, 3), (3, 4), (4, 6)]:
        out, cache = model.decode_step(tgt[:, a:b], memory, src, cache)
        logits.append(out)
    torch.testing.assert_close(torch.cat(logits, dim=1), full, rtol=0, atol=1e-10)
    assert cache.length == 6 and len(cache.inputs) == 2


# ----------------------------------------------------------------------------- beam translation
def teacher_forced_logprob(model, src, tokens_, bos):
    """(B,) the sum of log p of each row of tokens_ given src, teacher-forced."""
    tgt_in = torch.cat([torch.full_like(tokens_[:, :1], bos), tokens_[:, :-1]], dim=1)
    with torch.no_grad():
        logp = torch.log_softmax(model(src, tgt_in), dim=-1)  # (B, T, V)
    return logp.gather(-1, tokens_[..., None])[..., 0].sum(dim=1)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_translate_with_a_beam(norm_first):
    model = make_seq2seq(norm_first, seed=4)
    bos, T = 1, 5
    src = source(4, 7, seed=10, lengths=[7, 5, 2, 6])
    greedy, greedy_weights = model.translate(src, T, bos)
    same, same_weights = model.translate(src, T, bos, beam_size=1)
    assert torch.equal(same, greedy) and torch.equal(same_weights, greedy_weights)
    model.train()
    beam, weights = model.translate(src, T, bos, beam_size=4)
    assert model.training
    model.eval()
    assert beam.shape == (4, T) and weights.shape == (4, T, 7)
    # the beam's choice is at least as likely as greedy's, and better somewhere on this model
    beam_lp = teacher_forced_logprob(model, src, beam, bos)
    greedy_lp = teacher_forced_logprob(model, src, greedy, bos)
    assert (beam_lp >= greedy_lp - 1e-12).all() and (beam_lp > greedy_lp + 1e-6).any()
    # the weights are the cross-attention as each chosen token was predicted
    tgt_in = torch.cat([torch.full((4, 1), bos), beam[:, :-1]], dim=1)
    with torch.no_grad(), record_attention(model.decoder[-1]) as maps:
        model(src, tgt_in)
    torch.testing.assert_close(weights, maps["cross_attn"].mean(dim=1), rtol=0, atol=1e-12)


def test_translate_with_a_wide_beam_finds_the_most_likely_short_target():
    """Two tokens from 11: a beam of 121 keeps every target, so it returns the best."""
    model = make_seq2seq(seed=5)
    bos = 1
    src = source(2, 6, seed=3, lengths=[6, 3])
    beam, _ = model.translate(src, 2, bos, beam_size=TGT_V**2)
    every = torch.cartesian_prod(torch.arange(TGT_V), torch.arange(TGT_V))  # (121, 2)
    for b in range(2):
        scores = teacher_forced_logprob(model, src[b : b + 1].expand(len(every), -1), every,
                                        bos)
        assert beam[b].tolist() == every[scores.argmax()].tolist()


def test_translate_beam_ends_hypotheses_at_eos():
    model = make_seq2seq(seed=6)
    bos, eos = 1, 2
    src = source(3, 5, seed=4)
    beam, _ = model.translate(src, 6, bos, beam_size=3, eos_id=eos)
    assert beam.shape == (3, 6)
    for row in beam.tolist():
        if eos in row:
            assert all(t == eos for t in row[row.index(eos):])
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
        model.translate(src, 6, bos, beam_size=0)

