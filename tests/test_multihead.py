"""Tests of coursepkg.multihead: parity with torch.nn.MultiheadAttention via from_torch (self-
and cross-attention, attention and key-padding masks, per-head weights, outputs and gradients,
float64 and float32, with and without biases, dropout under the same seed); one head is
chapter 4's SelfAttention; the heads are a loop written as a reshape; split_heads/merge_heads
(an exact example, round trips, errors); the cost in parameters and FLOPs does not depend on
the number of heads; properties (weights are distributions, masks, causality, permutation
equivariance, heads are independent); dropout; errors; learning a task that needs two
attention patterns at once; the pure function multi_head_attention (equal to torch's
F.multi_head_attention_forward and to the module); the call-time hooks (rotate, score_bias, one
rule for 3-D masks and biases); the fused path; record_attention (imports: tests/test_course.py)."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from coursepkg.multihead import (
    MultiHeadAttention,
    fused_multi_head_attention,
    merge_heads,
    multi_head_attention,
    record_attention,
    split_heads,
)
from coursepkg.positional import Rotary, apply_rope
from coursepkg.self_attention import SelfAttention, causal_mask

SMALL = settings(max_examples=20, deadline=None, derandomize=True)
F64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


def re_shape(shape) -> str:
    """A shape as a regular expression matching its tuple's repr."""
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


def random_mask(shape, seed: int) -> torch.Tensor:
    """A boolean mask (True = may attend), about half True, with key 0 always allowed, so
    that every query keeps at least one key however the mask is combined with others that
    also keep key 0."""
    mask = torch.rand(shape, generator=gen(seed)) < 0.5
    mask[..., 0] = True
    return mask


def random_padding(B: int, S: int, seed: int) -> torch.Tensor:
    """torch's key_padding_mask (B, S), True = padding, never key 0, at least one per row."""
    pad = torch.rand(B, S, generator=gen(seed)) < 0.4
    pad[:, 0] = False
    pad[torch.arange(B), torch.randint(1, S, (B,), generator=gen(seed + 1))] = True
    return pad


# ----------------------------------------------------------------------------- parity helpers
def make_pair(D, H, *, bias=True, dtype=F64, seed=0, dropout=0.0):
    """torch's module (train mode: no fast path) and ours made from it by from_torch."""
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(D, H, dropout=dropout, bias=bias, batch_first=True).to(dtype)
    ref.train()
    # torch initialises the biases with zeros: random ones, so that the biases are tested
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "bias" in name:
                p.copy_(randn(*p.shape, seed=seed + 100, dtype=dtype))
    return ref, MultiHeadAttention.from_torch(ref)


def masks_for(kind, B, H, T, S, seed=3):
    """torch's (attn_mask, key_padding_mask), True = NOT allowed, and the same as our one mask
    (True = may attend)."""
    if kind == "none":
        return {}, None
    if kind == "causal":
        allowed = causal_mask(T)  # (T, T)
        return {"attn_mask": ~allowed}, allowed
    if kind == "TS":
        allowed = random_mask((T, S), seed)  # (T, S)
        return {"attn_mask": ~allowed}, allowed
    if kind == "BHTS":  # torch's 3-D mask is (B * H, T, S), batch-major
        allowed = random_mask((B, H, T, S), seed)
        return {"attn_mask": ~allowed.reshape(B * H, T, S)}, allowed
    pad = random_padding(B, S, seed)  # (B, S)
    if kind == "padding":
        return {"key_padding_mask": pad}, ~pad[:, None, None, :]  # (B, 1, 1, S)
    assert kind == "both"
    allowed = random_mask((T, S), seed + 7)
    return {"attn_mask": ~allowed, "key_padding_mask": pad}, allowed & ~pad[:, None, None, :]


def run_both(ref, ours, query, key, value, torch_masks, mask, self_attention):
    """Outputs, per-head weights and gradients (w.r.t. the inputs and every parameter, by name)
    of torch's module and ours. Self-attention passes one tensor as query, key and value."""
    results = []
    for module in (ref, ours):
        module.zero_grad(set_to_none=True)
        if self_attention:
            x = query.detach().clone().requires_grad_()
            inputs = {"x": x}
            args = (x, x, x)
        else:
            inputs = {n: t.detach().clone().requires_grad_()
                      for n, t in (("query", query), ("key", key), ("value", value))}
            args = (inputs["query"], inputs["key"], inputs["value"])
        if module is ref:
            out, weights = ref(*args, need_weights=True, average_attn_weights=False,
                               **torch_masks)
        else:
            out, weights = ours(*args, mask=mask)
        # random weightings, so that every output and every weight gets its own gradient
        loss = (out * randn(*out.shape, seed=50, dtype=out.dtype)).sum()
        loss = loss + (weights * randn(*weights.shape, seed=51, dtype=out.dtype)).sum()
        loss.backward()
        grads = {name: t.grad for name, t in inputs.items()}
        grads.update({name: p.grad for name, p in module.named_parameters()})
        results.append((out, weights, grads))
    return results


def assert_same(results, **tol):
    (out_r, w_r, grad_r), (out_o, w_o, grad_o) = results
    assert out_o.shape == out_r.shape and w_o.shape == w_r.shape
    torch.testing.assert_close(out_o, out_r, **tol)
    torch.testing.assert_close(w_o, w_r, **tol)
    assert grad_o.keys() == grad_r.keys()
    for name in grad_r:
        assert grad_r[name] is not None and grad_o[name] is not None, name
        torch.testing.assert_close(grad_o[name], grad_r[name], **tol,
                                   msg=lambda m, name=name: f"gradient of {name}: {m}")


# ----------------------------------------------------------------------------- parity, float64
SIZES = [(4, 1), (8, 1), (4, 2), (8, 2), (8, 4), (12, 4)]  # (D, H)
SELF_MASKS = ["none", "causal", "TS", "BHTS", "padding", "both"]
CROSS_MASKS = ["none", "TS", "BHTS", "padding", "both"]


@pytest.mark.parametrize("D, H", SIZES, ids=lambda s: str(s))
@pytest.mark.parametrize("masked", SELF_MASKS)
def test_self_attention_equals_torch(D, H, masked):
    B, T = 3, 5
    ref, ours = make_pair(D, H, seed=D + H)
    torch_masks, mask = masks_for(masked, B, H, T, T)
    x = randn(B, T, D, seed=1)
    results = run_both(ref, ours, x, x, x, torch_masks, mask, self_attention=True)
    out, weights, _ = results[1]
    assert out.shape == (B, T, D) and weights.shape == (B, H, T, T) and out.dtype == F64
    assert_same(results)
    if mask is not None:
        assert (weights[~mask.expand(B, H, T, T)] == 0).all()


@pytest.mark.parametrize("D, H", SIZES, ids=lambda s: str(s))
@pytest.mark.parametrize("masked", CROSS_MASKS)
def test_cross_attention_with_s_not_t_equals_torch(D, H, masked):
    B, T, S = 2, 3, 6
    ref, ours = make_pair(D, H, seed=D * H)
    torch_masks, mask = masks_for(masked, B, H, T, S)
    q, k, v = randn(B, T, D, seed=2), randn(B, S, D, seed=3), randn(B, S, D, seed=4)
    results = run_both(ref, ours, q, k, v, torch_masks, mask, self_attention=False)
    out, weights, grads = results[1]
    assert out.shape == (B, T, D) and weights.shape == (B, H, T, S)
    assert grads["key"].shape == grads["value"].shape == (B, S, D)
    assert_same(results)


def test_the_masks_in_the_parity_tests_really_mask():
    """Guard for the tests above: every kind of mask hides some keys, keeps one per query, and
    the combined mask hides more than either part."""
    B, H, T, S = 2, 2, 3, 6
    full = {}
    for kind in ["causal", "TS", "BHTS", "padding", "both"]:
        T_, S_ = (S, S) if kind == "causal" else (T, S)
        _, mask = masks_for(kind, B, H, T_, S_)
        full[kind] = mask.expand(B, H, T_, S_)
        assert not full[kind].all() and full[kind].any(dim=-1).all(), kind
    assert full["both"].sum() < min(full["TS"].sum(), full["padding"].sum())
    assert torch.equal(full["both"], full["padding"] & random_mask((T, S), 3 + 7))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("self_attention", [True, False])
def test_parity_without_bias_and_float32_default_tolerances(bias, self_attention):
    B, T, S, D, H = 2, 4, 5, 8, 2
    for dtype in (F64, torch.float32):
        ref, ours = make_pair(D, H, bias=bias, dtype=dtype, seed=7)
        assert ours.in_proj_weight.dtype == dtype
        assert (ours.in_proj_bias is not None) == bias and (ours.out_proj.bias is not None) == bias
        torch_masks, mask = masks_for("both", B, H, T, T if self_attention else S)
        q = randn(B, T, D, seed=5, dtype=dtype)
        k, v = randn(B, S, D, seed=6, dtype=dtype), randn(B, S, D, seed=7, dtype=dtype)
        results = run_both(ref, ours, q, k, v, torch_masks, mask, self_attention)
        assert results[1][0].dtype == dtype and results[1][1].dtype == dtype
        names = set(results[1][2])
        assert ("in_proj_bias" in names) == bias and ("out_proj.bias" in names) == bias
        assert_same(results)  # default tolerances of the dtype


def test_a_3d_mask_of_ours_is_shared_by_every_head():
    """Our (B, T, S) mask is unsqueezed at dim 1; torch's 3-D mask is (B * H, T, S): the same
    pattern repeated for every head."""
    B, T, S, D, H = 2, 3, 5, 8, 4
    ref, ours = make_pair(D, H, seed=8)
    allowed = random_mask((B, T, S), seed=9)
    torch_mask = (~allowed).repeat_interleave(H, dim=0)  # (B * H, T, S), b-major
    q, k, v = randn(B, T, D, seed=10), randn(B, S, D, seed=11), randn(B, S, D, seed=12)
    results = run_both(ref, ours, q, k, v, {"attn_mask": torch_mask}, allowed, False)
    assert_same(results)
    weights = results[1][1]
    assert (weights[~allowed[:, None].expand(B, H, T, S)] == 0).all()


def test_torch_s_averaged_weights_are_the_mean_of_our_heads():
    ref, ours = make_pair(8, 4, seed=9)
    x = randn(2, 5, 8, seed=13)
    with torch.no_grad():
        out_ref, mean_ref = ref(x, x, x)  # average_attn_weights=True by default
        out, weights = ours(x, x, x)
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(weights.mean(dim=1), mean_ref)


def test_a_torch_style_3d_mask_is_refused_not_misread():
    """torch's (B * H, T, S) mask passed to us unchanged would be read as (B * H, 1, T, S):
    it does not fit the scores (B, H, T, S) and is refused with both shapes named."""
    ours = MultiHeadAttention(8, 2)
    x = torch.randn(3, 4, 8)
    with pytest.raises(ValueError, match=r"mask of shape \(6, 1, 4, 4\).*\(3, 2, 4, 4\)"):
        ours(x, x, x, mask=torch.ones(6, 4, 4, dtype=torch.bool))


def test_our_state_dict_loads_into_torch():
    torch.manual_seed(10)
    ours = MultiHeadAttention(8, 2).double()
    ref = nn.MultiheadAttention(8, 2, batch_first=True).double()
    ours_sd, ref_sd = ours.state_dict(), ref.state_dict()
    assert list(ours_sd) == list(ref_sd)  # same names, same order
    assert all(ours_sd[k].shape == ref_sd[k].shape for k in ref_sd)
    ref.load_state_dict(ours_sd)  # strict, the other direction
    ref.train()
    x = randn(2, 4, 8, seed=14)
    with torch.no_grad():
        torch.testing.assert_close(ours(x, x, x)[0], ref(x, x, x)[0])


def test_gradcheck_multi_head_attention():
    torch.manual_seed(11)
    m = MultiHeadAttention(4, 2).double()
    q = randn(2, 3, 4, seed=15).requires_grad_()
    k = randn(2, 4, 4, seed=16).requires_grad_()
    v = randn(2, 4, 4, seed=17).requires_grad_()
    mask = random_mask((2, 1, 3, 4), seed=18)

    def fn(q, k, v):
        return m(q, k, v, mask)

    assert torch.autograd.gradcheck(fn, (q, k, v))


# ----------------------------------------------------------------------------- from_torch
@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_from_torch_keeps_dtype_training_flag_and_configuration(dtype, training, bias):
    torch.manual_seed(12)
    ref = nn.MultiheadAttention(12, 3, dropout=0.25, bias=bias, batch_first=True).to(dtype)
    ref.train(training)
    ours = MultiHeadAttention.from_torch(ref)
    assert isinstance(ours, MultiHeadAttention)
    assert ours.training == training
    assert (ours.d_model, ours.n_heads, ours.d_head, ours.dropout) == (12, 3, 4, 0.25)
    assert all(p.dtype == dtype for p in ours.parameters())
    ref_params = dict(ref.named_parameters())
    assert {n for n, _ in ours.named_parameters()} == set(ref_params)
    for name, p in ours.named_parameters():
        assert torch.equal(p, ref_params[name]), name
        assert p.data_ptr() != ref_params[name].data_ptr(), f"{name} is shared, not copied"
    # a copy: training ours leaves torch's module alone
    with torch.no_grad():
        ours.in_proj_weight.add_(1.0)
    assert not torch.equal(ours.in_proj_weight, ref.in_proj_weight)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"batch_first": False}, "batch_first=True"),
        ({"kdim": 5}, "kdim == vdim == embed_dim"),
        ({"vdim": 3}, "kdim == vdim == embed_dim"),
        ({"kdim": 5, "vdim": 3}, "kdim == vdim == embed_dim"),
        ({"add_bias_kv": True}, "add_bias_kv"),
        ({"add_zero_attn": True}, "add_zero_attn"),
    ],
    ids=["batch_first", "kdim", "vdim", "kdim-vdim", "add_bias_kv", "add_zero_attn"],
)
def test_from_torch_refuses_what_it_cannot_copy(kwargs, match):
    args = {"batch_first": True, **kwargs}
    ref = nn.MultiheadAttention(8, 2, **args)
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention.from_torch(ref)


@pytest.mark.parametrize("bad", [nn.Linear(8, 8), MultiHeadAttention(8, 2), "mha", None],
                         ids=["Linear", "ours", "str", "None"])
def test_from_torch_refuses_a_wrong_type_naming_it(bad):
    with pytest.raises(ValueError, match=rf"torch.nn.MultiheadAttention, got {type(bad).__name__}"):
        MultiHeadAttention.from_torch(bad)


def test_initialisation_follows_torch():
    """Xavier-uniform in_proj_weight (fan_in D, fan_out 3D), zero biases."""
    torch.manual_seed(13)
    D = 64
    m = MultiHeadAttention(D, 4)
    bound = math.sqrt(6 / (D + 3 * D))
    w = m.in_proj_weight.detach()
    assert w.abs().max() <= bound and w.abs().max() > 0.95 * bound
    assert w.std() == pytest.approx(bound / math.sqrt(3), rel=0.05)  # uniform's std
    assert (m.in_proj_bias == 0).all() and (m.out_proj.bias == 0).all()


# ----------------------------------------------------------------------------- one head, loop
def one_head_as_self_attention(m: MultiHeadAttention, causal: bool = False) -> SelfAttention:
    """Chapter 4's SelfAttention with W^Q, W^K, W^V (and biases) of a one-head module."""
    D = m.d_model
    sa = SelfAttention(D, causal=causal, bias=True).to(m.in_proj_weight.dtype)
    with torch.no_grad():
        for lin, w, b in zip((sa.w_q, sa.w_k, sa.w_v), m.in_proj_weight.chunk(3),
                             m.in_proj_bias.chunk(3), strict=True):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
    return sa


@pytest.mark.parametrize("causal", [False, True])
def test_one_head_is_chapter_4_self_attention(causal):
    B, T, D = 3, 6, 5
    torch.manual_seed(14)
    m = MultiHeadAttention(D, 1).double()
    with torch.no_grad():
        m.in_proj_bias.copy_(randn(3 * D, seed=19))
    sa = one_head_as_self_attention(m, causal=causal)
    x = randn(B, T, D, seed=20)
    mask = causal_mask(T) if causal else None
    with torch.no_grad():
        out_sa, weights_sa = sa(x)  # (B, T, D), (B, T, T)
        out, weights = m(x, x, x, mask)  # W^O is a random Linear here
        torch.testing.assert_close(weights.squeeze(1), weights_sa)
        torch.testing.assert_close(out, m.out_proj(out_sa))
        # and with W^O the identity (zero bias), exactly chapter 4's output
        m.out_proj.weight.copy_(torch.eye(D))
        m.out_proj.bias.zero_()
        out_id, weights_id = m(x, x, x, mask)
    assert weights.shape == (B, 1, T, T)
    torch.testing.assert_close(out_id, out_sa)
    torch.testing.assert_close(weights_id.squeeze(1), weights_sa)
    if causal:
        assert (weights[..., ~causal_mask(T)] == 0).all()


def heads_by_loop(m: MultiHeadAttention, query, key, value, mask=None):
    """The definition, one head at a time: head_h = softmax(Q_h K_h^T / sqrt(Dh)) V_h with
    Q_h = query W_h^Q + b_h (the rows h*Dh:(h+1)*Dh of W^Q), then concat(heads) W^O."""
    D, H, Dh = m.d_model, m.n_heads, m.d_head
    w = m.in_proj_weight
    b = m.in_proj_bias if m.in_proj_bias is not None else torch.zeros(3 * D, dtype=w.dtype)
    heads, weights = [], []
    for h in range(H):
        rows = slice(h * Dh, (h + 1) * Dh)
        q = query @ w[:D][rows].T + b[:D][rows]  # (B, T, Dh)
        k = key @ w[D:2 * D][rows].T + b[D:2 * D][rows]  # (B, S, Dh)
        v = value @ w[2 * D:][rows].T + b[2 * D:][rows]  # (B, S, Dh)
        scores = q @ k.transpose(1, 2) / math.sqrt(Dh)  # (B, T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        a = torch.softmax(scores, dim=-1)
        heads.append(a @ v)
        weights.append(a)
    return m.out_proj(torch.cat(heads, dim=-1)), torch.stack(weights, dim=1)


@pytest.mark.parametrize("D, H", [(6, 1), (6, 2), (6, 3), (12, 4), (12, 6)], ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_the_reshape_equals_a_loop_over_heads(D, H, bias):
    torch.manual_seed(15)
    m = MultiHeadAttention(D, H, bias=bias).double()
    if bias:
        with torch.no_grad():
            m.in_proj_bias.copy_(randn(3 * D, seed=21))
    q, k, v = randn(2, 4, D, seed=22), randn(2, 7, D, seed=23), randn(2, 7, D, seed=24)
    mask = random_mask((2, 4, 7), seed=25)  # (B, T, S)
    with torch.no_grad():
        out, weights = m(q, k, v, mask)
        out_ref, weights_ref = heads_by_loop(m, q, k, v, mask)
    torch.testing.assert_close(weights, weights_ref)
    torch.testing.assert_close(out, out_ref)


def test_scores_are_scaled_by_sqrt_d_head_not_sqrt_d_model():
    torch.manual_seed(16)
    m = MultiHeadAttention(16, 4, bias=False).double()
    x = 3 * randn(1, 5, 16, seed=26)
    with torch.no_grad():
        _, weights = m(x, x, x)
        q = split_heads(x @ m.in_proj_weight[:16].T, 4)  # (1, 4, 5, 4)
        k = split_heads(x @ m.in_proj_weight[16:32].T, 4)
    scores = q @ k.transpose(-2, -1)  # (1, 4, 5, 5)
    torch.testing.assert_close(weights, torch.softmax(scores / 2.0, dim=-1))  # sqrt(Dh = 4)
    assert not torch.allclose(weights, torch.softmax(scores / 4.0, dim=-1))  # sqrt(D = 16)


# ----------------------------------------------------------------------------- split / merge
def test_split_heads_small_example():
    x = torch.arange(2 * 3 * 6).reshape(2, 3, 6)  # (B=2, T=3, D=6)
    out = split_heads(x, 3)
    assert out.shape == (2, 3, 3, 2)  # (B, H, T, Dh)
    assert out[0, 0].tolist() == [[0, 1], [6, 7], [12, 13]]  # head 0: columns 0-1 of every t
    assert out[0, 2].tolist() == [[4, 5], [10, 11], [16, 17]]
    for b in range(2):
        for h in range(3):
            for t in range(3):
                assert torch.equal(out[b, h, t], x[b, t, 2 * h:2 * (h + 1)]), (b, h, t)
    assert torch.equal(merge_heads(out), x)
    assert merge_heads(out).shape == (2, 3, 6)


def test_a_reshape_without_the_transpose_is_not_split_heads():
    """Guard for the tests' meaning: viewing (B, T, D) straight as (B, H, T, Dh) mixes time and
    heads, has the same shape, and is wrong."""
    x = torch.arange(2 * 4 * 6).reshape(2, 4, 6)
    wrong = x.reshape(2, 2, 4, 3)
    assert wrong.shape == split_heads(x, 2).shape
    assert not torch.equal(wrong, split_heads(x, 2))
    assert not torch.equal(split_heads(x, 2).reshape(2, 4, 6), x)  # merging without transpose
    assert torch.equal(merge_heads(split_heads(x, 2)), x)


split_shapes = st.tuples(
    st.integers(1, 3),  # B
    st.integers(1, 5),  # T
    st.integers(1, 4),  # H
    st.integers(1, 4),  # Dh
    st.integers(0, 2**16),  # seed
)


@SMALL
@given(split_shapes)
def test_merge_heads_inverts_split_heads_exactly(shape):
    B_, T_, H_, Dh, seed = shape
    x = randn(B_, T_, H_ * Dh, seed=seed)
    y = randn(B_, H_, T_, Dh, seed=seed + 1)
    split = split_heads(x, H_)
    assert split.shape == (B_, H_, T_, Dh)
    assert torch.equal(merge_heads(split), x)
    assert torch.equal(split_heads(merge_heads(y), H_), y)
    # head h is the slice h of the features, at every position
    for h in range(H_):
        assert torch.equal(split[:, h], x[..., h * Dh:(h + 1) * Dh])
    # a non-contiguous input (a transposed tensor) gives the same heads
    x_t = x.transpose(0, 1).contiguous().transpose(0, 1)
    assert not x_t.is_contiguous() or B_ == 1 or T_ == 1
    assert torch.equal(split_heads(x_t, H_), split)


@pytest.mark.parametrize("n_heads", [4, 5, 7])
def test_split_heads_rejects_a_width_not_divisible(n_heads):
    with pytest.raises(ValueError, match=rf"D=6 is not divisible by n_heads={n_heads}"):
        split_heads(torch.zeros(2, 3, 6), n_heads)


@pytest.mark.parametrize("bad", [0, -2, 2.0, 1.5, True, "2", None])
def test_split_heads_rejects_a_bad_number_of_heads(bad):
    with pytest.raises(ValueError, match="n_heads must be a positive int"):
        split_heads(torch.zeros(2, 3, 6), bad)


@pytest.mark.parametrize("shape", [(3, 6), (6,), (1, 2, 3, 6)], ids=str)
def test_split_heads_rejects_a_tensor_that_is_not_b_t_d(shape):
    expected = r"expected x of shape \(B, T, D\), got " + re_shape(shape)
    with pytest.raises(ValueError, match=expected):
        split_heads(torch.zeros(shape), 2)


@pytest.mark.parametrize("shape", [(2, 3, 6), (6,), (1, 2, 3, 4, 5)], ids=str)
def test_merge_heads_rejects_a_tensor_that_is_not_b_h_t_dh(shape):
    expected = r"expected x of shape \(B, H, T, Dh\), got " + re_shape(shape)
    with pytest.raises(ValueError, match=expected):
        merge_heads(torch.zeros(shape))


# ----------------------------------------------------------------------------- cost
@pytest.mark.parametrize("bias", [True, False])
def test_parameters_do_not_depend_on_the_number_of_heads(bias):
    D = 12
    counts = {}
    for H in [h for h in range(1, D + 1) if D % h == 0]:  # 1, 2, 3, 4, 6, 12
        m = MultiHeadAttention(D, H, bias=bias)
        counts[H] = sum(p.numel() for p in m.parameters())
    assert len(counts) == 6
    assert set(counts.values()) == {4 * D * D + (4 * D if bias else 0)}
    # = one full-width head (chapter 4's W^Q, W^K, W^V) and the output projection W^O
    one_head = SelfAttention(D, bias=bias)
    full = sum(p.numel() for p in one_head.parameters())
    full += sum(p.numel() for p in nn.Linear(D, D, bias=bias).parameters())
    assert counts[1] == full


def count_flops(fn, *args) -> tuple[int, dict]:
    with FlopCounterMode(display=False) as counter:
        fn(*args)
    per_op = {str(op).split(".")[-1]: n for op, n in counter.get_flop_counts()["Global"].items()}
    return counter.get_total_flops(), per_op


def test_flops_do_not_depend_on_the_number_of_heads_and_equal_the_formula():
    """FlopCounterMode counts 2 M N K per matrix product (bias additions, the scaling and the
    softmax are not counted). Per batch row: the projections of T queries, S keys, S values
    and T outputs, 2 (2T + 2S) D^2; the scores Q K^T and the weighted sum of V, H products of
    2 T S Dh each, 2 * 2 T S D together, whatever H is."""
    B, T, S, D = 2, 5, 7, 8
    q, k, v = torch.randn(B, T, D), torch.randn(B, S, D), torch.randn(B, S, D)
    projections = 2 * B * (2 * T + 2 * S) * D * D
    attention = 2 * B * 2 * T * S * D
    totals = {}
    for H in [1, 2, 4, 8]:
        m = MultiHeadAttention(D, H)
        with torch.no_grad():
            totals[H], per_op = count_flops(m, q, k, v)
        assert per_op.get("addmm", 0) + per_op.get("mm", 0) == projections, H
        assert per_op["bmm"] == attention, H
    assert set(totals.values()) == {projections + attention}
    assert projections + attention == 2 * B * (T * D * D + 2 * S * D * D + 2 * T * S * D
                                               + T * D * D)


def test_flops_equal_one_full_width_head_and_its_output_projection():
    B, T, D = 2, 6, 8
    x = torch.randn(B, T, D)
    one_head = SelfAttention(D, bias=True)
    w_o = nn.Linear(D, D)
    with torch.no_grad():
        head_flops, _ = count_flops(one_head, x)
        out_flops, _ = count_flops(w_o, x)
        for H in [1, 2, 4, 8]:
            flops, _ = count_flops(MultiHeadAttention(D, H), x, x, x)
            assert flops == head_flops + out_flops, H
    assert head_flops > 0 and out_flops == 2 * B * T * D * D


# ----------------------------------------------------------------------------- properties
mha_shapes = st.tuples(
    st.integers(1, 3),  # B
    st.integers(1, 6),  # T
    st.integers(1, 6),  # S
    st.sampled_from([(4, 1), (4, 2), (6, 3), (8, 4)]),  # (D, H)
    st.booleans(),  # bias
    st.integers(0, 2**16),  # seed
)


def make_module(D, H, bias, seed):
    torch.manual_seed(seed)
    m = MultiHeadAttention(D, H, bias=bias).double()
    if bias:
        with torch.no_grad():
            m.in_proj_bias.copy_(randn(3 * D, seed=seed + 9))
    return m


@SMALL
@given(mha_shapes, st.sampled_from(["none", "TS", "padding", "BTS", "BHTS"]))
def test_weights_are_distributions_per_head_and_zero_where_masked(shape, masked):
    B_, T_, S_, (D, H), bias, seed = shape
    m = make_module(D, H, bias, seed)
    mask_shape = {"none": None, "TS": (T_, S_), "padding": (B_, 1, 1, S_), "BTS": (B_, T_, S_),
                  "BHTS": (B_, H, T_, S_)}[masked]
    mask = None if mask_shape is None else random_mask(mask_shape, seed + 1)
    q, k, v = randn(B_, T_, D, seed=seed), randn(B_, S_, D, seed=seed + 2), randn(
        B_, S_, D, seed=seed + 3)
    with torch.no_grad():
        out, weights = m(3 * q, k, v, mask)
    assert out.shape == (B_, T_, D) and weights.shape == (B_, H, T_, S_)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(B_, H, T_, dtype=F64))
    if mask is not None:
        full = (mask[:, None] if mask.dim() == 3 else mask).expand(B_, H, T_, S_)
        assert (weights[~full] == 0).all()


@SMALL
@given(mha_shapes, st.data())
def test_causal_mask_makes_outputs_ignore_the_future(shape, data):
    B_, T_, _, (D, H), bias, seed = shape
    t = data.draw(st.integers(0, T_ - 1), label="t")
    m = make_module(D, H, bias, seed)
    x = randn(B_, T_, D, seed=seed)
    later = x.clone()
    later[:, t + 1:] = 10 * randn(B_, T_ - t - 1, D, seed=seed + 1)
    now = x.clone()
    now[:, t] = 10 * randn(B_, D, seed=seed + 2)
    mask = causal_mask(T_)
    with torch.no_grad():
        out, weights = m(x, x, x, mask)
        out_later, weights_later = m(later, later, later, mask)
        out_now, _ = m(now, now, now, mask)
    torch.testing.assert_close(out_later[:, : t + 1], out[:, : t + 1], rtol=0, atol=0)
    torch.testing.assert_close(weights_later[:, :, : t + 1], weights[:, :, : t + 1],
                               rtol=0, atol=0)
    assert (weights[..., ~mask] == 0).all()
    # the present is seen: changing x_t changes the output at t
    assert not torch.equal(out_now[:, t], out[:, t])


@SMALL
@given(mha_shapes, st.booleans())
def test_self_attention_without_positions_is_permutation_equivariant(shape, masked):
    B_, T_, _, (D, H), bias, seed = shape
    m = make_module(D, H, bias, seed)
    x = randn(B_, T_, D, seed=seed)
    perm = torch.randperm(T_, generator=gen(seed + 1))
    mask = random_mask((B_, T_, T_), seed=seed + 2) if masked else None
    if mask is not None:
        mask[:, torch.arange(T_), torch.arange(T_)] = True  # a permuted mask keeps a key too
    mask_p = None if mask is None else mask[:, perm][:, :, perm]
    with torch.no_grad():
        out, weights = m(x, x, x, mask)
        out_p, weights_p = m(x[:, perm], x[:, perm], x[:, perm], mask_p)
    torch.testing.assert_close(out_p, out[:, perm], rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(weights_p, weights[:, :, perm][..., perm], rtol=1e-12,
                               atol=1e-14)


@SMALL
@given(mha_shapes)
def test_cross_attention_ignores_the_order_of_the_key_value_pairs(shape):
    B_, T_, S_, (D, H), bias, seed = shape
    m = make_module(D, H, bias, seed)
    q, k, v = randn(B_, T_, D, seed=seed), randn(B_, S_, D, seed=seed + 1), randn(
        B_, S_, D, seed=seed + 2)
    perm = torch.randperm(S_, generator=gen(seed + 3))
    with torch.no_grad():
        out, weights = m(q, k, v)
        out_p, weights_p = m(q, k[:, perm], v[:, perm])
    torch.testing.assert_close(out_p, out, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(weights_p, weights[..., perm], rtol=1e-12, atol=1e-14)


def test_heads_are_independent():
    """Changing the rows of W^Q that belong to head 1 changes head 1's weights and nothing
    else: each head has its own slice of the projections."""
    D, H = 8, 4
    m = make_module(D, H, True, seed=17)
    x = randn(2, 5, D, seed=27)
    with torch.no_grad():
        _, weights = m(x, x, x)
        m.in_proj_weight[2:4] += randn(2, D, seed=28)  # W^Q rows of head 1 (Dh = 2)
        _, changed = m(x, x, x)
    for h in range(H):
        if h == 1:
            assert not torch.allclose(changed[:, h], weights[:, h])
        else:
            assert torch.equal(changed[:, h], weights[:, h]), h


# ----------------------------------------------------------------------------- dropout
def test_dropout_has_no_effect_in_eval_mode():
    torch.manual_seed(18)
    m = MultiHeadAttention(8, 2, dropout=0.5).double().eval()
    plain = MultiHeadAttention(8, 2).double().eval()
    plain.load_state_dict(m.state_dict())
    x = randn(2, 5, 8, seed=29)
    with torch.no_grad():
        out, weights = m(x, x, x)
        out_plain, weights_plain = plain(x, x, x)
        out_again, _ = m(x, x, x)
        plain.train()
        out_train_p0, _ = plain(x, x, x)  # dropout 0 in train mode is no dropout either
    torch.testing.assert_close(out, out_plain, rtol=0, atol=0)
    torch.testing.assert_close(weights, weights_plain, rtol=0, atol=0)
    torch.testing.assert_close(out_again, out, rtol=0, atol=0)
    torch.testing.assert_close(out_train_p0, out, rtol=0, atol=0)


def test_dropout_in_training_changes_outputs_not_the_returned_weights():
    torch.manual_seed(19)
    m = MultiHeadAttention(8, 2, dropout=0.5).double()
    x = randn(2, 6, 8, seed=30)
    with torch.no_grad():
        m.eval()
        out_eval, weights_eval = m(x, x, x)
        m.train()
        torch.manual_seed(0)
        out, weights = m(x, x, x)
        torch.manual_seed(0)
        out_same, _ = m(x, x, x)
        torch.manual_seed(1)
        out_other, _ = m(x, x, x)
    assert not torch.allclose(out, out_eval)
    # the returned weights are the softmax before dropout: distributions, equal to eval's
    torch.testing.assert_close(weights, weights_eval, rtol=0, atol=0)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 2, 6, dtype=F64))
    # seeded: the same seed gives the same output, another seed another one
    torch.testing.assert_close(out_same, out, rtol=0, atol=0)
    assert not torch.allclose(out_other, out)


def test_dropout_equals_torch_under_the_same_seed():
    """Both draw one dropout mask of the weights' shape (B * H, T, S) in the same order, so with
    the same seed the outputs agree; torch returns the weights after dropout, we before."""
    p = 0.3
    ref, ours = make_pair(8, 2, seed=20, dropout=p)
    assert ours.dropout == p and ours.training
    q, k, v = randn(2, 4, 8, seed=31), randn(2, 5, 8, seed=32), randn(2, 5, 8, seed=33)
    with torch.no_grad():
        torch.manual_seed(3)
        out_ref, weights_ref = ref(q, k, v, average_attn_weights=False)
        torch.manual_seed(3)
        out, weights = ours(q, k, v)
    torch.testing.assert_close(out, out_ref)
    kept = weights_ref != 0
    assert 0 < kept.float().mean() < 1
    torch.testing.assert_close(weights_ref[kept], weights[kept] / (1 - p))


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("which", ["query", "key", "value"])
@pytest.mark.parametrize("shape", [(2, 5, 7), (5, 8), (1, 2, 5, 8)], ids=str)
def test_a_bad_input_shape_is_rejected_naming_it(which, shape):
    m = MultiHeadAttention(8, 2)
    args = {"query": torch.randn(2, 4, 8), "key": torch.randn(2, 5, 8),
            "value": torch.randn(2, 5, 8)}
    args[which] = torch.randn(shape)
    expected = rf"expected {which} of shape \(B, length, 8\), got " + re_shape(shape)
    with pytest.raises(ValueError, match=expected):
        m(**args)


def test_keys_and_values_of_different_lengths_are_rejected():
    m = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match="same length S"):
        m(torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 6, 8))


@pytest.mark.parametrize("batches", [(2, 1, 1), (1, 2, 2), (2, 3, 3), (2, 2, 1)], ids=str)
def test_inputs_with_different_batch_sizes_are_rejected(batches):
    """Batch sizes must agree: a key batch of 1 must not be broadcast silently over the queries
    (torch's module refuses too)."""
    bq, bk, bv = batches
    m = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match="batch"):
        m(torch.randn(bq, 4, 8), torch.randn(bk, 5, 8), torch.randn(bv, 5, 8))


def test_a_bad_mask_is_rejected():
    m = MultiHeadAttention(8, 2)
    q, kv = torch.randn(2, 4, 8), torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"mask must be boolean.*torch.float32"):
        m(q, kv, kv, torch.ones(4, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(5, 4\) does not broadcast"):
        m(q, kv, kv, torch.ones(5, 4, dtype=torch.bool))  # (S, T) instead of (T, S)


@pytest.mark.parametrize("d_model, n_heads", [(8, 3), (6, 4), (10, 4), (3, 6)])
def test_d_model_not_divisible_by_n_heads_is_rejected(d_model, n_heads):
    with pytest.raises(ValueError, match=rf"d_model={d_model} is not divisible by "
                                         rf"n_heads={n_heads}"):
        MultiHeadAttention(d_model, n_heads)


@pytest.mark.parametrize("n_heads", [0, -2, 2.0, True, "2"], ids=repr)
def test_a_bad_number_of_heads_is_rejected_when_the_module_is_built(n_heads):
    """Not a ZeroDivisionError (0), nor a module that fails only when called (-2, 2.0),
    nor a bool taken for 1 head."""
    with pytest.raises(ValueError, match="n_heads must be a positive int"):
        MultiHeadAttention(8, n_heads)


@pytest.mark.parametrize("d_model", [0, -4, 8.0], ids=repr)
def test_a_bad_width_is_rejected_when_the_module_is_built(d_model):
    with pytest.raises(ValueError, match="d_model must be a positive int"):
        MultiHeadAttention(d_model, 2)


@pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5, float("nan")], ids=repr)
def test_dropout_out_of_range_is_rejected(dropout):
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got"):
        MultiHeadAttention(8, 2, dropout=dropout)


# ----------------------------------------------------------------------------- learning
def two_pattern_batch(n: int, seed: int, V: int = 5, T: int = 8):
    """Two answers at every position t: the token at t - 1, and the marked token (one position
    per row is marked by shifting its id by V). The first needs attention by position, the
    second attention by content."""
    g = gen(seed)
    tokens = torch.randint(0, V, (n, T), generator=g)
    marked = torch.randint(0, T, (n,), generator=g)
    x = tokens.clone()
    x[torch.arange(n), marked] += V
    previous = torch.roll(tokens, 1, dims=1)  # previous[:, t] = tokens[:, t - 1]; t = 0 unused
    marked_token = tokens[torch.arange(n), marked][:, None].expand(n, T)
    return x, previous, marked_token, marked


def test_two_heads_learn_two_attention_patterns_at_once():
    """A smoke test that the module trains, and that with seed 0 its two heads split the work
    (one looks back, one at the marker). One head can also solve this small version; the
    book's chapter 5 uses a harder one where a single head fails."""
    V, T, D, H = 5, 8, 16, 2
    x, previous, marked_token, _ = two_pattern_batch(256, seed=0, V=V, T=T)
    torch.manual_seed(0)
    embed = nn.Embedding(2 * V, D)
    position = nn.Embedding(T, D)  # attention alone knows no order
    attn = MultiHeadAttention(D, H)
    head = nn.Linear(D, 2 * V)  # logits for the previous token and for the marked token
    params = [*embed.parameters(), *position.parameters(), *attn.parameters(),
              *head.parameters()]
    opt = torch.optim.Adam(params, lr=3e-2)

    def run(x):
        h = embed(x) + position.weight[: x.shape[1]]  # (B, T, D)
        out, weights = attn(h, h, h)  # (B, T, D), (B, H, T, T)
        return head(out).view(*x.shape, 2, V), weights  # (B, T, 2, V)

    def loss_fn(logits, previous, marked_token):
        return (F.cross_entropy(logits[:, 1:, 0].reshape(-1, V), previous[:, 1:].reshape(-1))
                + F.cross_entropy(logits[:, :, 1].reshape(-1, V), marked_token.reshape(-1)))

    first = None
    for _ in range(80):  # measured: loss 1.3e-5 after 80 steps (~1-2.5 s)
        loss = loss_fn(run(x)[0], previous, marked_token)
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    x_test, previous_test, marked_test_token, marked_test = two_pattern_batch(512, 1, V, T)
    with torch.no_grad():
        final = loss_fn(run(x)[0], previous, marked_token).item()
        logits, weights = run(x_test)
    assert first > 0.8 * 2 * math.log(V)
    assert final < 1e-3
    # fresh sequences are solved too (measured accuracies 0.997 and 0.999)
    assert (logits[:, 1:, 0].argmax(-1) == previous_test[:, 1:]).float().mean() > 0.98
    assert (logits[:, :, 1].argmax(-1) == marked_test_token).float().mean() > 0.98
    # and the heads specialised: one looks at t - 1, the other at the marker (measured, per
    # head: weight on t - 1 is 0.13 / 0.99, weight on the marker 0.93 / 0.12)
    t = torch.arange(1, T)
    on_previous = weights[:, :, t, t - 1].mean(dim=(0, 2))  # (H,)
    on_marker = weights[torch.arange(512), :, :, marked_test].mean(dim=(0, 2))  # (H,)
    by_position, by_content = int(on_previous.argmax()), int(on_marker.argmax())
    assert by_position != by_content
    assert on_previous[by_position] > 0.9 and on_marker[by_content] > 0.85
    assert on_previous[by_content] < 0.3 and on_marker[by_position] < 0.3


# ----------------------------------------------------------------------------- rotate, score bias
def by_hand(m: MultiHeadAttention, query, key, value, mask=None, score_bias=None,
            rope_base=None, q_positions=None, k_positions=None):
    """Attention written out with the module's weights: project, split the heads, rotate the
    queries and keys with chapter 6's apply_rope (when rope_base is given), add the bias to
    the scaled scores, mask, softmax, merge the heads, W^O. A 3-D mask or bias is (B, T, S)."""
    w_q, w_k, w_v = m.in_proj_weight.chunk(3)
    b_q, b_k, b_v = m.in_proj_bias.chunk(3)
    q = split_heads(query @ w_q.T + b_q, m.n_heads)  # (B, H, T, Dh)
    k = split_heads(key @ w_k.T + b_k, m.n_heads)  # (B, H, S, Dh)
    v = split_heads(value @ w_v.T + b_v, m.n_heads)  # (B, H, S, Dh)
    if rope_base is not None:
        q = apply_rope(q, q_positions, base=rope_base)
        k = apply_rope(k, k_positions, base=rope_base)
    scores = q @ k.transpose(-2, -1) / math.sqrt(m.d_head)  # (B, H, T, S)
    if score_bias is not None:
        scores = scores + (score_bias[:, None] if score_bias.dim() == 3 else score_bias)
    if mask is not None:
        mask = mask[:, None] if mask.dim() == 3 else mask
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return m.out_proj(merge_heads(weights @ v)), weights


@pytest.mark.parametrize("base", [10000.0, 100.0])
@pytest.mark.parametrize("self_attention", [True, False])
@pytest.mark.parametrize("masked", [False, True])
def test_rotate_rotary_equals_apply_rope_on_the_split_queries_and_keys(base, self_attention,
                                                                        masked):
    B, T, S, D, H = 2, 5, 5 if self_attention else 7, 8, 2
    m = make_module(D, H, True, seed=40)
    q = randn(B, T, D, seed=41)
    k, v = (q, q) if self_attention else (randn(B, S, D, seed=42), randn(B, S, D, seed=43))
    mask = random_mask((B, T, S), seed=44) if masked else None
    with torch.no_grad():
        out, weights = m(q, k, v, mask, rotate=Rotary(base))
        out_ref, weights_ref = by_hand(m, q, k, v, mask, rope_base=base)
        out_plain, _ = m(q, k, v, mask)
        out_other, _ = m(q, k, v, mask, rotate=Rotary(10000.0 if base == 100.0 else 100.0))
    torch.testing.assert_close(weights, weights_ref)
    torch.testing.assert_close(out, out_ref)
    assert not torch.allclose(out, out_plain)  # the rotation does something
    assert not torch.allclose(out_other, out)  # and the base matters


def test_rotate_is_any_callable_on_the_split_queries_and_keys():
    """The hook sees (B, H, T, Dh) queries and (B, H, S, Dh) keys, after the projections and
    before the scores; here it scales the queries by 2, which doubles the scores."""
    B, T, S, D, H = 2, 3, 4, 8, 2
    m = make_module(D, H, True, seed=34)
    q, kv = randn(B, T, D, seed=35), randn(B, S, D, seed=36)
    seen = []

    def double_queries(q_heads, k_heads):
        seen.append((q_heads.shape, k_heads.shape))
        return 2 * q_heads, k_heads

    with torch.no_grad():
        _, weights = m(q, kv, kv, rotate=double_queries)
        _, plain = m(q, kv, kv)
    assert seen == [((B, H, T, D // H), (B, H, S, D // H))]
    torch.testing.assert_close(weights, torch.softmax(2 * plain.log(), dim=-1))


@SMALL
@given(st.integers(-1000, 1000), st.integers(1, 6), st.integers(0, 2**16))
def test_rope_attention_is_the_same_at_any_starting_position(start, T_, seed):
    """Rotary puts query t and key s at positions t and s; rotating them by hand from
    positions start + t and start + s gives the same weights and output: the scores depend on
    the offsets only."""
    m = make_module(8, 2, True, seed=seed % 5)
    x = randn(2, T_, 8, seed=seed)
    positions = start + torch.arange(T_)
    mask = causal_mask(T_)
    with torch.no_grad():
        out, weights = m(x, x, x, mask, rotate=Rotary())
        out_ref, weights_ref = by_hand(m, x, x, x, mask, rope_base=10000.0,
                                       q_positions=positions, k_positions=positions)
    torch.testing.assert_close(weights, weights_ref, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(out, out_ref, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("d_model, n_heads", [(12, 4), (6, 2), (5, 5)])
def test_rope_needs_an_even_head_width(d_model, n_heads):
    Dh = d_model // n_heads
    m = MultiHeadAttention(d_model, n_heads)
    x = torch.randn(1, 3, d_model)
    with pytest.raises(ValueError, match=rf"Dh must be even, got {Dh}"):
        m(x, x, x, rotate=Rotary())
    m(x, x, x)  # without RoPE an odd head width is fine


@pytest.mark.parametrize("bias_shape", [(3, 4, 6), (1, 2, 4, 6), (3, 2, 4, 6), (3, 1, 4, 6),
                                        (4, 6)], ids=str)
def test_score_bias_is_added_to_the_scaled_scores(bias_shape):
    """(B, T, S) for every head, (1, H, T, S) per head for every sequence, (B, H, T, S),
    (B, 1, T, S) and (T, S): the rule of the masks."""
    B, T, S, D, H = 3, 4, 6, 8, 2
    m = make_module(D, H, True, seed=45)
    q, k, v = randn(B, T, D, seed=46), randn(B, S, D, seed=47), randn(B, S, D, seed=48)
    bias = (2 * randn(*bias_shape, seed=49)).requires_grad_()
    mask = random_mask((B, 1, 1, S), seed=50)
    out, weights = m(q, k, v, mask, score_bias=bias)
    out_ref, weights_ref = by_hand(m, q, k, v, mask, score_bias=bias)
    torch.testing.assert_close(weights, weights_ref)
    torch.testing.assert_close(out, out_ref)
    assert not torch.allclose(weights, m(q, k, v, mask)[1])
    out.sum().backward()
    assert bias.grad.shape == bias_shape and bias.grad.abs().sum() > 0


def test_a_3d_score_bias_is_per_sequence_and_shared_by_the_heads_like_a_3d_mask():
    """One rule: a 3-D bias (B, T, S) is the same as (B, 1, T, S), and a 3-D mask means the
    same (B, T, S) as the bias: -inf in the bias and False in the mask hide the same keys."""
    B, T, S, D, H = 2, 3, 5, 8, 2
    m = make_module(D, H, True, seed=37)
    q, kv = randn(B, T, D, seed=38), randn(B, S, D, seed=39)
    bias = randn(B, T, S, seed=40)
    mask = random_mask((B, T, S), seed=41)
    with torch.no_grad():
        out, weights = m(q, kv, kv, score_bias=bias)
        out_4d, weights_4d = m(q, kv, kv, score_bias=bias[:, None])
        _, masked = m(q, kv, kv, mask)
        _, as_bias = m(q, kv, kv, score_bias=torch.zeros(B, T, S).masked_fill(~mask, -math.inf))
    torch.testing.assert_close(out, out_4d, rtol=0, atol=0)
    torch.testing.assert_close(weights, weights_4d, rtol=0, atol=0)
    torch.testing.assert_close(masked, as_bias, rtol=0, atol=0)
    assert not torch.allclose(weights[0], weights[1])  # each sequence has its own bias


def test_a_head_first_3d_bias_is_refused_naming_both_shapes():
    """(H, T, S) is not a per-head bias: it is read as (B, T, S), and refused when it does
    not fit; a per-head bias is (1, H, T, S)."""
    m = MultiHeadAttention(8, 2)
    x = torch.randn(3, 4, 8)
    with pytest.raises(ValueError, match=r"score_bias of shape \(2, 1, 4, 4\).*\(3, 2, 4, 4\)"):
        m(x, x, x, score_bias=torch.zeros(2, 4, 4))
    m(x, x, x, score_bias=torch.zeros(1, 2, 4, 4))  # fine


# ----------------------------------------------------------------------------- fused path
FUSED_MASKS = ["none", "causal", "TS", "BTS", "BHTS", "padding"]


@pytest.mark.parametrize("masked", FUSED_MASKS)
@pytest.mark.parametrize("bias", ["none", "1HTS", "B1TS", "BTS"])
@pytest.mark.parametrize("rope", [None, 10000.0], ids=["no-rope", "rope"])
def test_fused_path_equals_the_explicit_path(masked, bias, rope):
    """torch's fused kernel and the course's attention: the same outputs and the same
    gradients (inputs, every parameter, the score bias), with every kind of mask, with a
    random score bias and with RoPE. fused_forward returns the output alone."""
    B, T, D, H = 3, 5, 8, 2
    m = make_module(D, H, True, seed=51)
    rotate = None if rope is None else Rotary(rope)
    mask = {"none": None, "causal": causal_mask(T), "TS": random_mask((T, T), seed=52),
            "BTS": random_mask((B, T, T), seed=53), "BHTS": random_mask((B, H, T, T), seed=54),
            "padding": random_mask((B, 1, 1, T), seed=55)}[masked]
    score_bias = {"none": None, "1HTS": randn(1, H, T, T, seed=56),
                  "B1TS": randn(B, 1, T, T, seed=57), "BTS": randn(B, T, T, seed=58)}[bias]
    x = randn(B, T, D, seed=58)
    kv = randn(B, T, D, seed=59)
    results = []
    for fused in (False, True):
        m.zero_grad(set_to_none=True)
        leaves = [t.detach().clone().requires_grad_() for t in (x, kv)]
        sb = None if score_bias is None else score_bias.clone().requires_grad_()
        args = (leaves[0], leaves[1], leaves[1], mask)
        if fused:
            out = m.fused_forward(*args, score_bias=sb, rotate=rotate)
        else:
            out, weights = m(*args, score_bias=sb, rotate=rotate)
            assert weights.shape == (B, H, T, T)
        (out * randn(*out.shape, seed=60)).sum().backward()
        grads = {"query": leaves[0].grad, "key_value": leaves[1].grad,
                 **{n: p.grad for n, p in m.named_parameters()}}
        if sb is not None:
            grads["score_bias"] = sb.grad
        results.append((out, grads))
    (out, grads), (out_f, grads_f) = results
    assert isinstance(out_f, torch.Tensor) and out_f.shape == (B, T, D)
    torch.testing.assert_close(out_f, out, rtol=1e-10, atol=1e-12)
    assert grads_f.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(grads_f[name], grads[name], rtol=1e-10, atol=1e-12,
                                   msg=lambda msg, name=name: f"gradient of {name}: {msg}")


def test_fused_path_in_float32_with_padding_and_bias():
    B, T, S, D, H = 2, 4, 6, 8, 2
    torch.manual_seed(61)
    m = MultiHeadAttention(D, H)
    q, kv = torch.randn(B, T, D), torch.randn(B, S, D)
    mask, bias = random_mask((B, 1, 1, S), seed=62), torch.randn(1, H, T, S)
    with torch.no_grad():
        out, weights = m(q, kv, kv, mask, score_bias=bias)
        out_f = m.fused_forward(q, kv, kv, mask, score_bias=bias)
    assert out_f.dtype == torch.float32
    torch.testing.assert_close(out_f, out)


def test_fused_dropout_is_off_in_eval_mode_and_on_in_training():
    torch.manual_seed(63)
    m = MultiHeadAttention(8, 2, dropout=0.5).double().eval()
    x = randn(2, 5, 8, seed=64)
    with torch.no_grad():
        out = m(x, x, x)[0]
        torch.testing.assert_close(m.fused_forward(x, x, x), out)
        m.train()
        assert not torch.allclose(m.fused_forward(x, x, x), out)


def test_fused_path_refuses_what_forward_refuses():
    m = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"mask must be boolean.*torch.float32"):
        m.fused_forward(x, x, x, torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 1, 3, 3\) does not broadcast"):
        m.fused_forward(x, x, x, torch.ones(4, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"expected key of shape \(B, length, 8\)"):
        m.fused_forward(x, x[..., :4], x)
    assert "d_model=8, n_heads=2, d_head=4, dropout=0.0, bias=True" in repr(m)


def test_forward_always_returns_the_weights():
    """No flag changes forward's return type: (out, weights), in training and in eval."""
    m = MultiHeadAttention(8, 2, dropout=0.1)
    x = torch.randn(2, 3, 8)
    for training in (True, False):
        out, weights = m.train(training)(x, x, x)
        assert out.shape == (2, 3, 8) and weights.shape == (2, 2, 3, 3)


# ----------------------------------------------------------------------------- the pure function
def torch_functional(query, key, value, m: MultiHeadAttention, mask=None):
    """torch's F.multi_head_attention_forward (time-first, True = may NOT attend, a 3-D mask
    is (B * H, T, S)) with the module's weights: (out (B, T, D), weights (B, H, T, S))."""
    B, T, S, H = query.shape[0], query.shape[1], key.shape[1], m.n_heads
    attn_mask = None
    if mask is not None:
        attn_mask = ~mask.expand(B, H, T, S).reshape(B * H, T, S)
    out, weights = F.multi_head_attention_forward(
        query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), m.d_model, H,
        m.in_proj_weight, m.in_proj_bias, None, None, False, 0.0, m.out_proj.weight,
        m.out_proj.bias, training=False, need_weights=True, attn_mask=attn_mask,
        average_attn_weights=False)
    return out.transpose(0, 1), weights


@pytest.mark.parametrize("masked", ["none", "causal", "TS", "BHTS"])
@pytest.mark.parametrize("self_attention", [True, False])
def test_multi_head_attention_equals_torch_s_functional_form(masked, self_attention):
    """The pure function against F.multi_head_attention_forward in float64: outputs, per-head
    weights, and the gradients of the inputs and of the four weight tensors."""
    B, T, D, H = 2, 4, 8, 2
    S = T if self_attention or masked == "causal" else 6
    m = make_module(D, H, True, seed=70)
    with torch.no_grad():
        m.out_proj.bias.copy_(randn(D, seed=71))
    mask = {"none": None, "causal": causal_mask(T), "TS": random_mask((T, S), seed=72),
            "BHTS": random_mask((B, H, T, S), seed=73)}[masked]
    q = randn(B, T, D, seed=74)
    k, v = (q, q) if self_attention else (randn(B, S, D, seed=75), randn(B, S, D, seed=76))
    params = [m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias]
    results = []
    for fn in ("ours", "torch"):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        for p_ in params:
            p_.grad = None
        if fn == "ours":
            out, weights = multi_head_attention(*leaves, *params, H, mask)
        else:
            out, weights = torch_functional(*leaves, m, mask)
        loss = (out * randn(*out.shape, seed=77)).sum() + (
            weights * randn(*weights.shape, seed=78)).sum()
        loss.backward()
        results.append((out, weights, [t.grad for t in leaves] + [p_.grad for p_ in params]))
    (out, weights, grads), (out_ref, weights_ref, grads_ref) = results
    assert out.shape == (B, T, D) and weights.shape == (B, H, T, S)
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(weights, weights_ref)
    for name, g, g_ref in zip(["query", "key", "value", "in_proj_weight", "in_proj_bias",
                               "out_proj.weight", "out_proj.bias"], grads, grads_ref, strict=True):
        torch.testing.assert_close(g, g_ref, msg=lambda msg, name=name: f"{name}: {msg}")


def test_the_module_is_the_pure_function_with_its_weights():
    """forward is the function called with the module's parameters (bit for bit), with
    dropout_p = the module's dropout in training and 0 in eval; without biases too."""
    for bias in (True, False):
        torch.manual_seed(79)
        m = MultiHeadAttention(8, 2, dropout=0.25, bias=bias).double()
        q, kv = randn(2, 3, 8, seed=80), randn(2, 5, 8, seed=81)
        mask, sb = random_mask((2, 3, 5), seed=82), randn(1, 2, 3, 5, seed=83)
        weights_ = (m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias)
        with torch.no_grad():
            for training, p in ((False, 0.0), (True, 0.25)):
                m.train(training)
                torch.manual_seed(84)
                out, weights = m(q, kv, kv, mask, score_bias=sb, rotate=Rotary())
                torch.manual_seed(84)
                out_f, weights_f = multi_head_attention(q, kv, kv, *weights_, 2, mask,
                                                        score_bias=sb, rotate=Rotary(),
                                                        dropout_p=p)
                torch.testing.assert_close(out, out_f, rtol=0, atol=0)
                torch.testing.assert_close(weights, weights_f, rtol=0, atol=0)
                torch.manual_seed(84)
                fused = fused_multi_head_attention(q, kv, kv, *weights_, 2, mask, score_bias=sb,
                                                   rotate=Rotary(), dropout_p=0.0)
                if not training:
                    torch.testing.assert_close(fused, out, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- record_attention
class TwoLayers(nn.Module):
    """Two attention layers and something that is not attention."""

    def __init__(self):
        super().__init__()
        self.first = MultiHeadAttention(8, 2)
        self.mlp = nn.Linear(8, 8)
        self.second = nn.ModuleDict({"attn": MultiHeadAttention(8, 4)})

    def forward(self, x, memory):
        x = x + self.first(x, x, x, causal_mask(x.shape[1]))[0]
        return self.second["attn"](self.mlp(x), memory, memory)[0]


def test_record_attention_returns_every_layer_s_weights_by_name_in_order():
    torch.manual_seed(85)
    model = TwoLayers().double()
    x, memory = randn(2, 3, 8, seed=86), randn(2, 5, 8, seed=87)
    with record_attention(model) as maps:
        assert maps == {}
        out = model(x, memory)
    assert list(maps) == ["first", "second.attn"]
    assert maps["first"].shape == (2, 2, 3, 3) and maps["second.attn"].shape == (2, 4, 3, 5)
    assert all(not w.requires_grad for w in maps.values()) and out.requires_grad
    # the weights forward returned, in the order the layers ran
    expected_first = model.first(x, x, x, causal_mask(3))[1]
    torch.testing.assert_close(maps["first"], expected_first, rtol=0, atol=0)
    # a second forward replaces them: the maps are the last forward's
    with record_attention(model) as maps:
        model(x, memory)
        model(x[:, :2], memory)
    assert maps["first"].shape == (2, 2, 2, 2)
    # a MultiHeadAttention alone is recorded under ""
    with record_attention(model.first) as maps:
        model(x, memory)
    assert list(maps) == [""]


def test_record_attention_removes_its_hooks_on_exit_and_on_an_exception():
    model = TwoLayers()
    x = torch.randn(1, 3, 8)
    with record_attention(model) as maps:
        model(x, x)
    model(x[:, :1], x)  # after the block: nothing more is recorded
    assert maps["first"].shape == (1, 2, 3, 3)
    with pytest.raises(RuntimeError, match="boom"), record_attention(model) as maps:
        model(x, x)
        raise RuntimeError("boom")
    for module in (model.first, model.second["attn"]):
        assert not module._forward_hooks and not module._forward_pre_hooks
    model(x, x)
    assert maps["first"].shape == (1, 2, 3, 3)


def test_no_weights_are_stored_on_the_module():
    m = MultiHeadAttention(8, 2)
    before = set(vars(m))
    x = torch.randn(2, 3, 8)
    m(x, x, x)
    m.fused_forward(x, x, x)
    assert set(vars(m)) == before
    assert not [name for name in dir(m) if "weights" in name]


def test_fused_forward_records_nothing():
    m = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with record_attention(m) as maps:
        m.fused_forward(x, x, x)
    assert maps == {}

