"""Tests of coursepkg.self_attention: parity with torch.nn.functional.scaled_dot_product_attention
(every broadcastable boolean mask, the causal mask, several layouts, float32 and float64, outputs
and gradients) and with an explicit float64 softmax; gradient checks; properties (weights are a
distribution and exactly 0 where masked, causality, permutation equivariance); causal_mask;
the SelfAttention module (shapes, its own W^Q, W^K, W^V, masks, errors); learning a copy task."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from coursepkg.self_attention import SelfAttention, causal_mask, scaled_dot_product_attention

SMALL = settings(max_examples=20, deadline=None, derandomize=True)
F64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


def qkv(lead, T, S, Dk, Dv, seed=0, dtype=F64):
    """q (*lead, T, Dk), k (*lead, S, Dk), v (*lead, S, Dv); scaled up so the softmax is peaked."""
    q = 2 * randn(*lead, T, Dk, seed=seed, dtype=dtype)
    k = 2 * randn(*lead, S, Dk, seed=seed + 1, dtype=dtype)
    v = randn(*lead, S, Dv, seed=seed + 2, dtype=dtype)
    return q, k, v


def random_mask(shape, seed: int) -> torch.Tensor:
    """A boolean mask of this shape, about half True, such that once broadcast to the scores
    every query row keeps at least one key: one random True per row of the mask, and a mask
    with a single key column (..., 1) is all True."""
    shape = tuple(shape)
    if len(shape) == 0 or shape[-1] == 1:
        return torch.ones(shape, dtype=torch.bool)
    g = gen(seed)
    mask = torch.rand(shape, generator=g) < 0.5
    rows = mask.reshape(-1, shape[-1])  # a view of mask
    keep = torch.randint(0, shape[-1], (rows.shape[0],), generator=g)
    rows[torch.arange(rows.shape[0]), keep] = True
    return mask


def reference(q, k, v, mask=None):
    """softmax(q k^T / sqrt(Dk)) v in float64, the softmax written out: exp(e - max) / sum."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    exps = torch.exp(scores - scores.amax(dim=-1, keepdim=True))  # exp(-inf) = 0 exactly
    weights = exps / exps.sum(dim=-1, keepdim=True)
    return weights @ v, weights


def torch_sdpa(q, k, v, mask=None, **kwargs):
    """torch's function; it wants a mask with at least two dimensions, so (S,) and () masks
    are broadcast to (T, S) first (the same mask)."""
    if mask is not None and mask.dim() < 2:
        mask = mask.expand(q.shape[-2], k.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)


# ----------------------------------------------------------------------------- parity
B, H, T, S, DK, DV = 2, 3, 4, 6, 3, 5
MASK_SHAPES = [
    None,
    (),  # one boolean for everything
    (S,),  # one row of keys for every query
    (T, S),  # one (T, S) pattern for every batch and head
    (1, S),
    (T, 1),  # whole query rows (all True: every row must keep a key)
    (B, 1, T, S),  # per sequence, shared by the heads
    (B, H, T, S),  # the full score shape
    (1, 1, 1, S),
    (B, 1, 1, S),  # a key padding mask
    (H, 1, S),  # per head, shared by the batch
    (1, H, T, 1),
]


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("mask_shape", MASK_SHAPES, ids=str)
def test_equals_torch_with_every_broadcastable_mask(mask_shape, dtype):
    q, k, v = qkv((B, H), T, S, DK, DV, seed=1, dtype=dtype)
    mask = None if mask_shape is None else random_mask(mask_shape, seed=2)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (B, H, T, DV) and weights.shape == (B, H, T, S)
    assert out.dtype == dtype and weights.dtype == dtype
    torch.testing.assert_close(out, torch_sdpa(q, k, v, mask))  # default tolerances of dtype
    ref_out, ref_weights = reference(q, k, v, mask)
    torch.testing.assert_close(weights, ref_weights.to(dtype))
    torch.testing.assert_close(out, ref_out.to(dtype))
    if mask is not None:
        assert (weights[~mask.expand(B, H, T, S)] == 0).all()


def test_the_masks_in_the_parity_test_really_mask():
    """Guard for the test above: the random masks hide some keys and keep one per row."""
    for shape in [(S,), (T, S), (B, H, T, S), (H, 1, S)]:
        full = random_mask(shape, seed=2).expand(B, H, T, S)
        assert not full.all() and full.any(dim=-1).all()


LAYOUTS = [(), (B,), (B, H), (B, 2, H)]  # (T, D), (B, T, D), (B, H, T, D), (B1, B2, H, T, D)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("lead", LAYOUTS, ids=str)
@pytest.mark.parametrize("sizes", [(4, 6, 3, 5), (5, 5, 4, 4), (1, 3, 2, 1), (6, 1, 1, 2)],
                         ids=lambda s: "T{}-S{}-Dk{}-Dv{}".format(*s))
@pytest.mark.parametrize("masked", ["none", "TS", "full"])
def test_equals_torch_in_every_layout(lead, sizes, masked, dtype):
    T_, S_, Dk, Dv = sizes
    q, k, v = qkv(lead, T_, S_, Dk, Dv, seed=3, dtype=dtype)
    mask = {"none": None, "TS": random_mask((T_, S_), seed=4),
            "full": random_mask((*lead, T_, S_), seed=5)}[masked]
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (*lead, T_, Dv) and weights.shape == (*lead, T_, S_)
    torch.testing.assert_close(out, torch_sdpa(q, k, v, mask))
    ref_out, ref_weights = reference(q, k, v, mask)
    torch.testing.assert_close(weights, ref_weights.to(dtype))
    torch.testing.assert_close(out, ref_out.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("lead", LAYOUTS, ids=str)
@pytest.mark.parametrize("T_", [1, 2, 7])
def test_causal_mask_equals_torch_is_causal(lead, T_, dtype):
    q, k, v = qkv(lead, T_, T_, 3, 2, seed=6, dtype=dtype)
    out, weights = scaled_dot_product_attention(q, k, v, causal_mask(T_))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.testing.assert_close(weights, reference(q, k, v, causal_mask(T_))[1].to(dtype))
    # the future gets exactly 0, the first query sees only itself
    future = ~torch.ones(T_, T_, dtype=torch.bool).tril()
    assert (weights[..., future] == 0).all()
    assert (weights[..., 0, 0] == 1).all()


def grads(fn, q, k, v, mask, with_weights):
    """Gradients w.r.t. q, k, v of a random weighting of the output (and of the weights)."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    result = fn(q, k, v, mask)
    out, weights = result if isinstance(result, tuple) else (result, None)
    loss = (out * randn(*out.shape, seed=40)).sum()
    if with_weights:
        loss = loss + (weights * randn(*weights.shape, seed=41)).sum()
    return torch.autograd.grad(loss, (q, k, v))


@pytest.mark.parametrize("lead", LAYOUTS, ids=str)
@pytest.mark.parametrize("masked", ["none", "causal", "S", "TS", "padding", "full"])
def test_gradients_equal_torch_and_the_formula(lead, masked):
    T_ = S if masked == "causal" else T
    q, k, v = qkv(lead, T_, S, DK, DV, seed=7)
    mask = {"none": None, "causal": causal_mask(S), "S": random_mask((S,), seed=8),
            "TS": random_mask((T_, S), seed=8), "padding": random_mask((*lead, 1, S), seed=8),
            "full": random_mask((*lead, T_, S), seed=8)}[masked]
    ours = grads(scaled_dot_product_attention, q, k, v, mask, with_weights=False)
    theirs = grads(torch_sdpa, q, k, v, mask, with_weights=False)
    for name, g_ours, g_theirs in zip("qkv", ours, theirs, strict=True):
        assert g_ours.shape == g_theirs.shape, name
        torch.testing.assert_close(g_ours, g_theirs, msg=lambda m, name=name: f"d/d{name}: {m}")
    # through the returned weights as well: against the written-out softmax
    ours = grads(scaled_dot_product_attention, q, k, v, mask, with_weights=True)
    formula = grads(reference, q, k, v, mask, with_weights=True)
    for g_ours, g_ref in zip(ours, formula, strict=True):
        torch.testing.assert_close(g_ours, g_ref)


@pytest.mark.parametrize("masked", [False, True])
def test_gradcheck_scaled_dot_product_attention(masked):
    q, k, v = qkv((2,), 3, 4, 2, 3, seed=9)
    q, k, v = q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    mask = None
    if masked:
        mask = random_mask((2, 3, 4), seed=10)
        mask[..., 0], mask[..., 3] = True, False  # key 3 is hidden from every query

    def fn(q, k, v):
        return scaled_dot_product_attention(q, k, v, mask)

    assert torch.autograd.gradcheck(fn, (q, k, v))
    assert torch.autograd.gradgradcheck(fn, (q, k, v))
    # a hidden key gets no gradient at all
    out, weights = fn(q, k, v)
    (out * randn(*out.shape, seed=11)).sum().backward()
    if masked:
        hidden = ~mask.any(dim=1)  # (2, 4): keys no query may see
        assert hidden[:, 3].all()
        assert (k.grad[hidden] == 0).all() and (v.grad[hidden] == 0).all()


def test_scaling_is_by_sqrt_dk_not_sqrt_dv():
    """Dk != Dv, q and k non-square: only softmax(q k^T / sqrt(Dk)) matches."""
    q, k, v = qkv((), 2, 5, 4, 9, seed=12)
    _, weights = scaled_dot_product_attention(q, k, v)
    scores = q @ k.T
    torch.testing.assert_close(weights, torch.softmax(scores / 2.0, dim=-1))  # sqrt(4) = 2
    assert not torch.allclose(weights, torch.softmax(scores / 3.0, dim=-1))  # sqrt(Dv) = 3
    assert not torch.allclose(weights, torch.softmax(scores, dim=-1))  # unscaled


def test_the_mask_uses_minus_infinity_not_a_large_negative_number():
    """The one visible key scores -1e10: a fill of -1e4 or -1e9 for the hidden keys would give
    them all the weight; -inf gives them exactly 0."""
    q = torch.tensor([[1e5]], dtype=F64)  # (T=1, Dk=1)
    k = torch.tensor([[-1e5], [1.0], [-1.0]], dtype=F64)  # (S=3, Dk=1)
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], dtype=F64)
    mask = torch.tensor([[True, False, False]])
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert weights.tolist() == [[1.0, 0.0, 0.0]]
    assert out.tolist() == [[1.0, 0.0]]
    torch.testing.assert_close(out, torch_sdpa(q, k, v, mask), rtol=0, atol=0)


# ----------------------------------------------------------------------------- properties
shapes = st.tuples(
    st.lists(st.integers(1, 3), max_size=2),  # leading dimensions
    st.integers(1, 6),  # T
    st.integers(1, 6),  # S
    st.integers(1, 4),  # Dk
    st.integers(1, 3),  # Dv
    st.integers(0, 2**16),  # seed
)


@SMALL
@given(shapes, st.data())
def test_weights_are_a_distribution_and_exactly_zero_where_masked(shape, data):
    lead, T_, S_, Dk, Dv, seed = shape
    full = (*lead, T_, S_)
    # a broadcastable mask: drop some leading dimensions, set some others to 1
    n_dims = data.draw(st.integers(0, len(full)), label="mask dims")
    ones = data.draw(st.lists(st.booleans(), min_size=n_dims, max_size=n_dims), label="ones")
    mask_shape = tuple(1 if one else n for one, n in zip(ones, full[len(full) - n_dims:],
                                                          strict=True))
    q, k, v = qkv(lead, T_, S_, Dk, Dv, seed=seed)
    mask = random_mask(mask_shape, seed=seed + 3)
    out, weights = scaled_dot_product_attention(3 * q, k, v, mask)
    assert weights.shape == full and out.shape == (*lead, T_, Dv)
    assert (weights >= 0).all()
    assert (weights[~mask.expand(full)] == 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(full[:-1], dtype=F64))
    torch.testing.assert_close(out, weights @ v)
    # each output is a convex combination of the values: inside their range
    assert (out <= v.amax(dim=-2, keepdim=True) + 1e-12).all()
    assert (out >= v.amin(dim=-2, keepdim=True) - 1e-12).all()


causal_shapes = st.tuples(
    st.integers(1, 3),  # B
    st.integers(1, 7),  # T
    st.integers(1, 5),  # D
    st.booleans(),  # bias
    st.integers(0, 2**16),  # seed
)


@SMALL
@given(causal_shapes, st.data())
def test_causal_self_attention_ignores_the_future(shape, data):
    B_, T_, D, bias, seed = shape
    t = data.draw(st.integers(0, T_ - 1), label="t")
    torch.manual_seed(seed)
    attn = SelfAttention(D, d_k=D + 1, causal=True, bias=bias).double()
    x = randn(B_, T_, D, seed=seed)
    later = x.clone()
    later[:, t + 1:] = 10 * randn(B_, T_ - t - 1, D, seed=seed + 1)
    now = x.clone()
    now[:, t] = 10 * randn(B_, D, seed=seed + 2)
    with torch.no_grad():
        out, weights = attn(x)
        out_later, weights_later = attn(later)
        out_now, _ = attn(now)
    torch.testing.assert_close(out_later[:, : t + 1], out[:, : t + 1], rtol=0, atol=0)
    torch.testing.assert_close(weights_later[:, : t + 1], weights[:, : t + 1], rtol=0, atol=0)
    assert (weights[:, ~causal_mask(T_)] == 0).all()
    # but the present is seen: changing x_t changes the output at t
    assert not torch.equal(out_now[:, t], out[:, t])


@SMALL
@given(shapes, st.data())
def test_causal_mask_makes_the_function_ignore_the_future(shape, data):
    lead, T_, _, Dk, Dv, seed = shape
    t = data.draw(st.integers(0, T_ - 1), label="t")
    q, k, v = qkv(lead, T_, T_, Dk, Dv, seed=seed)
    changed = [x.clone() for x in (q, k, v)]
    for i, x in enumerate(changed):
        x[..., t + 1:, :] = 10 * randn(*x[..., t + 1:, :].shape, seed=seed + 3 + i)
    v_now = v.clone()
    v_now[..., t, :] += 1.0
    mask = causal_mask(T_)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    out_c, weights_c = scaled_dot_product_attention(*changed, mask)
    torch.testing.assert_close(out_c[..., : t + 1, :], out[..., : t + 1, :], rtol=0, atol=0)
    torch.testing.assert_close(weights_c[..., : t + 1, :], weights[..., : t + 1, :],
                               rtol=0, atol=0)
    # every query gives its own position a positive weight: changing v_t changes output t
    out_now, _ = scaled_dot_product_attention(q, k, v_now, mask)
    assert (out_now[..., t, :] != out[..., t, :]).all()


@SMALL
@given(causal_shapes, st.booleans())
def test_self_attention_without_positions_is_permutation_equivariant(shape, masked):
    B_, T_, D, bias, seed = shape
    torch.manual_seed(seed)
    attn = SelfAttention(D, d_k=3, d_v=D + 2, bias=bias).double()
    x = randn(B_, T_, D, seed=seed)
    perm = torch.randperm(T_, generator=gen(seed + 1))
    mask = random_mask((B_, T_, T_), seed=seed + 2) if masked else None
    mask_p = None if mask is None else mask[:, perm][:, :, perm]
    with torch.no_grad():
        out, weights = attn(x, mask)
        out_p, weights_p = attn(x[:, perm], mask_p)
    # the same vectors in another order: the outputs are permuted, nothing else changes
    torch.testing.assert_close(out_p, out[:, perm], rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(weights_p, weights[:, perm][:, :, perm], rtol=1e-12, atol=1e-14)


def test_causal_self_attention_is_not_permutation_equivariant():
    """The causal mask is the only thing here that knows about order (x_0 sees only itself)."""
    torch.manual_seed(0)
    attn = SelfAttention(4, causal=True).double()
    x = randn(1, 4, 4, seed=13)
    perm = torch.tensor([3, 1, 2, 0])
    with torch.no_grad():
        out, _ = attn(x)
        out_p, _ = attn(x[:, perm])
    assert not torch.allclose(out_p, out[:, perm])


# ----------------------------------------------------------------------------- causal_mask
def test_causal_mask_small_example():
    mask = causal_mask(3)
    assert mask.dtype == torch.bool and mask.shape == (3, 3)
    assert mask.tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal_mask(1).tolist() == [[True]]


@pytest.mark.parametrize("T_", [1, 2, 5, 16])
def test_causal_mask_is_true_on_and_below_the_diagonal(T_):
    mask = causal_mask(T_)
    assert mask.dtype == torch.bool and mask.shape == (T_, T_)
    for t in range(T_):
        for s in range(T_):
            assert bool(mask[t, s]) == (s <= t), (t, s)
    assert mask.diagonal().all()
    assert int(mask.sum()) == T_ * (T_ + 1) // 2


@pytest.mark.parametrize("device", [None, "cpu", torch.device("cpu"), "meta"])
def test_causal_mask_device(device):
    mask = causal_mask(4, device=device)
    assert mask.device.type == ("cpu" if device is None else torch.device(device).type)
    assert mask.dtype == torch.bool and mask.shape == (4, 4)


@pytest.mark.parametrize("bad", [0, -1, 2.5, 3.0, True, "3", None])
def test_causal_mask_rejects_a_bad_length(bad):
    with pytest.raises(ValueError, match="T must be a positive int"):
        causal_mask(bad)


# ----------------------------------------------------------------------------- SelfAttention
@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("d_k, d_v", [(None, None), (3, None), (None, 7), (2, 9)])
def test_self_attention_shapes(d_k, d_v, dtype):
    D = 5
    torch.manual_seed(0)
    attn = SelfAttention(D, d_k=d_k, d_v=d_v).to(dtype)
    Dk, Dv = d_k or D, d_v or D
    assert attn.w_q.weight.shape == (Dk, D) and attn.w_k.weight.shape == (Dk, D)
    assert attn.w_v.weight.shape == (Dv, D)
    assert attn.w_q.bias is None and attn.w_k.bias is None and attn.w_v.bias is None
    assert sum(p.numel() for p in attn.parameters()) == D * (2 * Dk + Dv)
    out, weights = attn(randn(3, 6, D, seed=14, dtype=dtype))
    assert out.shape == (3, 6, Dv) and weights.shape == (3, 6, 6)
    assert out.dtype == dtype and weights.dtype == dtype


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("bias", [False, True])
def test_self_attention_is_softmax_of_its_own_projections(bias, dtype):
    B_, T_, D, Dk, Dv = 2, 5, 4, 3, 6
    torch.manual_seed(1)
    attn = SelfAttention(D, d_k=Dk, d_v=Dv, bias=bias).to(dtype)
    assert (attn.w_q.bias is not None) == bias
    x = randn(B_, T_, D, seed=15, dtype=dtype)
    with torch.no_grad():
        out, weights = attn(x)
    # by hand, in float64, from the module's own W^Q, W^K, W^V: Q = X W^Q^T (+ b) ...
    x64 = x.to(F64)
    proj = {}
    for name in ("w_q", "w_k", "w_v"):
        lin = getattr(attn, name)
        proj[name] = x64 @ lin.weight.detach().to(F64).T
        if bias:
            proj[name] = proj[name] + lin.bias.detach().to(F64)
    Q, K, V = proj["w_q"], proj["w_k"], proj["w_v"]  # (B, T, Dk), (B, T, Dk), (B, T, Dv)
    expected_weights = torch.softmax(Q @ K.transpose(1, 2) / math.sqrt(Dk), dim=-1)  # (B, T, T)
    torch.testing.assert_close(weights, expected_weights.to(dtype))
    torch.testing.assert_close(out, (expected_weights @ V).to(dtype))
    # and the same as torch's function on those projections
    torch.testing.assert_close(out, F.scaled_dot_product_attention(Q, K, V).to(dtype))


@pytest.mark.parametrize("mask_shape", [(5, 5), (2, 1, 5), (2, 5, 5)], ids=str)
def test_causal_flag_and_a_user_mask_are_combined_with_and(mask_shape):
    torch.manual_seed(2)
    causal = SelfAttention(3, causal=True).double()
    plain = SelfAttention(3).double()
    plain.load_state_dict(causal.state_dict())
    x = randn(2, 5, 3, seed=16)
    user = random_mask(mask_shape, seed=17)
    user[..., 0] = True  # query 0 may only see key 0: keep it
    user[..., 1] = False  # and hide key 1 from everyone, so the user's mask matters
    both = user & causal_mask(5)  # (2, 5, 5) or (5, 5)
    with torch.no_grad():
        out, weights = causal(x, user)
        out_ref, weights_ref = plain(x, both)
        out_causal_only, _ = causal(x)
    torch.testing.assert_close(weights, weights_ref, rtol=0, atol=0)
    torch.testing.assert_close(out, out_ref, rtol=0, atol=0)
    assert (weights[~both.expand(2, 5, 5)] == 0).all()
    assert (weights[..., ~causal_mask(5)] == 0).all()  # the future stays hidden
    assert not torch.allclose(out, out_causal_only)  # and the user's mask does matter


def test_self_attention_trains_in_float32():
    """Gradients reach all three projections."""
    torch.manual_seed(3)
    attn = SelfAttention(4, d_k=2, causal=True)
    out, _ = attn(torch.randn(2, 5, 4))
    (out * torch.randn(2, 5, 4, generator=gen(18))).sum().backward()
    for name, p in attn.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("shape", [(5, 4), (2, 5, 3), (2, 5, 5), (1, 2, 5, 4), (4,)], ids=str)
def test_self_attention_rejects_a_bad_input_shape(shape):
    attn = SelfAttention(4)
    with pytest.raises(ValueError, match=r"expected x of shape \(B, T, 4\), got " +
                       str(shape).replace("(", r"\(").replace(")", r"\)")):
        attn(torch.randn(shape))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_a_non_boolean_mask_is_rejected_naming_its_dtype(dtype, causal):
    mask = torch.ones(5, 5, dtype=dtype)
    q, k, v = qkv((2,), 5, 5, 3, 3, seed=19)
    with pytest.raises(ValueError, match=rf"mask must be boolean.*{dtype}"):
        scaled_dot_product_attention(q, k, v, mask)
    attn = SelfAttention(3, causal=causal)
    with pytest.raises(ValueError, match=rf"mask must be boolean.*{dtype}"):
        attn(torch.randn(2, 5, 3), mask)


def test_mismatched_widths_and_lengths_are_rejected_naming_the_shapes():
    q, k, v = randn(2, 4, 3), randn(2, 6, 3), randn(2, 6, 5)
    with pytest.raises(ValueError, match=r"same width Dk.*q \(2, 4, 3\).*k \(2, 6, 2\)"):
        scaled_dot_product_attention(q, k[..., :2], v)
    with pytest.raises(ValueError, match=r"same length S.*k \(2, 6, 3\).*v \(2, 5, 5\)"):
        scaled_dot_product_attention(q, k, v[:, :5])
    # K not transposed would need Dk == S: a square-looking mistake; the good call works
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 4, 5) and weights.shape == (2, 4, 6)


# ----------------------------------------------------------------------------- learning
def copy_batch(n: int, seed: int, V: int = 6, T: int = 8):
    """Copy the marked token to every position. Tokens 0..V-1; one position per row is marked
    (its id is shifted by V). The target at every position is the marked token, which no
    position-wise model can know: a position has to look at the others."""
    g = gen(seed)
    tokens = torch.randint(0, V, (n, T), generator=g)
    marked = torch.randint(0, T, (n,), generator=g)
    x = tokens.clone()
    x[torch.arange(n), marked] += V
    y = tokens[torch.arange(n), marked][:, None].expand(n, T)
    return x, y, marked


def test_self_attention_learns_to_copy_the_marked_token():
    V, D = 6, 16
    x, y, _ = copy_batch(256, seed=0, V=V)
    x_test, y_test, marked_test = copy_batch(512, seed=1, V=V)
    torch.manual_seed(0)
    embed = nn.Embedding(2 * V, D)
    attn = SelfAttention(D, bias=True)  # the bias gives every query a common direction
    head = nn.Linear(D, V)
    params = [*embed.parameters(), *attn.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=3e-2)

    def run(x):
        out, weights = attn(embed(x))  # (B, T, D), (B, T, T)
        return head(out), weights  # (B, T, V)

    first = None
    for _ in range(100):  # measured: loss 1e-7 after 100 steps (~1 s on a busy CPU)
        logits, _ = run(x)
        loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits, _ = run(x)
        final = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)).item()
        logits_test, weights_test = run(x_test)
    assert first > 0.8 * math.log(V)
    assert final < 1e-3
    # not memorised: fresh sequences are solved too (measured accuracy 1.0), by attending to
    # the marked position (measured: mean weight 0.997 on it, over every query)
    assert (logits_test.argmax(-1) == y_test).float().mean() > 0.99
    on_marked = weights_test[torch.arange(512), :, marked_test]  # (512, T)
    assert on_marked.mean() > 0.95


def test_a_mask_that_does_not_fit_the_scores_is_rejected_naming_both_shapes():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    expected = r"mask of shape \(3, 4\) does not broadcast .*\(2, 3, 5\)"
    with pytest.raises(ValueError, match=expected):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 4, dtype=torch.bool))
    # more leading dimensions than the scores would silently grow the output: refused too
    with pytest.raises(ValueError, match=r"mask of shape \(7, 2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(7, 2, 3, 5, dtype=torch.bool))


@pytest.mark.parametrize("kwargs", [{"d_k": 0}, {"d_v": 0}, {"d_k": -2}, {"d_v": 2.5}])
def test_bad_widths_are_rejected(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"{name} must be a positive int"):
        SelfAttention(8, **kwargs)


# ----------------------------------------------------------------------------- score bias
def reference_with_bias(q, k, v, bias, mask=None):
    """softmax(q k^T / sqrt(Dk) + bias) v in float64, masked with -inf."""
    q, k, v, bias = q.to(F64), k.to(F64), v.to(F64), bias.to(F64)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


BIAS_SHAPES = [(T, S), (H, T, S), (B, 1, T, S), (B, H, T, S), (1, S), (H, 1, S)]
BIAS_MASKS = [None, (T, S), (B, 1, 1, S), (B, H, T, S)]


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("bias_shape", BIAS_SHAPES, ids=str)
@pytest.mark.parametrize("mask_shape", BIAS_MASKS, ids=str)
def test_bias_equals_torch_s_float_mask_combined_with_a_boolean_mask(bias_shape, mask_shape,
                                                                     dtype):
    """torch adds a float attn_mask to the scaled scores: our bias is that float mask, and a
    boolean mask on top of it is -inf in the float mask."""
    q, k, v = qkv((B, H), T, S, DK, DV, seed=30, dtype=dtype)
    bias = 2 * randn(*bias_shape, seed=31, dtype=dtype)
    mask = None if mask_shape is None else random_mask(mask_shape, seed=32)
    float_mask = bias.expand(B, H, T, S)
    if mask is not None:
        float_mask = float_mask.masked_fill(~mask, float("-inf"))
    out, weights = scaled_dot_product_attention(q, k, v, mask, bias=bias)
    assert out.shape == (B, H, T, DV) and weights.shape == (B, H, T, S)
    assert out.dtype == dtype and weights.dtype == dtype
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask))
    ref_out, ref_weights = reference_with_bias(q, k, v, bias, mask)
    torch.testing.assert_close(weights, ref_weights.to(dtype))
    torch.testing.assert_close(out, ref_out.to(dtype))
    # the bias matters, and a masked key gets exactly 0 whatever its bias
    assert not torch.allclose(weights, scaled_dot_product_attention(q, k, v, mask)[1])
    if mask is not None:
        assert (weights[~mask.expand(B, H, T, S)] == 0).all()


@pytest.mark.parametrize("masked", [False, True])
def test_bias_gradients_equal_torch(masked):
    """Gradients w.r.t. q, k, v and the bias itself (a learned relative bias trains through
    it) agree with torch's float mask; masked entries of the bias get no gradient."""
    q, k, v = qkv((B, H), T, S, DK, DV, seed=33)
    bias = randn(H, T, S, seed=34)
    mask = random_mask((T, S), seed=35) if masked else None
    results = []
    for fn in ("ours", "torch"):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, bias)]
        if fn == "ours":
            out, _ = scaled_dot_product_attention(*leaves[:3], mask, bias=leaves[3])
        else:
            float_mask = leaves[3].expand(B, H, T, S)
            if mask is not None:
                float_mask = float_mask.masked_fill(~mask, float("-inf"))
            out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=float_mask)
        (out * randn(*out.shape, seed=36)).sum().backward()
        results.append([t.grad for t in leaves])
    for name, ours, theirs in zip(["q", "k", "v", "bias"], *results, strict=True):
        torch.testing.assert_close(ours, theirs, msg=lambda m, name=name: f"d/d{name}: {m}")
    if masked:
        assert (results[0][3][:, ~mask] == 0).all() and results[0][3].abs().sum() > 0


def test_gradcheck_with_a_bias_and_a_mask():
    q, k, v = qkv((2,), 3, 4, 2, 3, seed=37)
    bias = randn(2, 3, 4, seed=38)
    mask = random_mask((3, 4), seed=39)
    inputs = tuple(t.requires_grad_() for t in (q, k, v, bias))

    def fn(q, k, v, bias):
        return scaled_dot_product_attention(q, k, v, mask, bias=bias)

    assert torch.autograd.gradcheck(fn, inputs)


def test_the_bias_is_added_after_the_scaling():
    """With zero queries every score is 0: the weights are softmax(bias) exactly, not
    softmax(bias / sqrt(Dk))."""
    _, k, v = qkv((B,), T, S, 4, DV, seed=40)
    q = torch.zeros(B, T, 4, dtype=F64)
    bias = randn(T, S, seed=41)
    _, weights = scaled_dot_product_attention(q, k, v, bias=bias)
    torch.testing.assert_close(weights, torch.softmax(bias, dim=-1).expand(B, T, S))


def test_a_bias_constant_along_the_keys_changes_nothing_and_none_adds_nothing():
    q, k, v = qkv((B, H), T, S, DK, DV, seed=42)
    mask = random_mask((B, 1, T, S), seed=43)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    row_bias = 5 * randn(B, H, T, 1, seed=44)  # one number per query row: softmax ignores it
    out_b, weights_b = scaled_dot_product_attention(q, k, v, mask, bias=row_bias)
    torch.testing.assert_close(out_b, out)
    torch.testing.assert_close(weights_b, weights)
    for bias in (None, torch.zeros(T, S, dtype=F64)):
        out_n, weights_n = scaled_dot_product_attention(q, k, v, mask, bias=bias)
        torch.testing.assert_close(out_n, out, rtol=0, atol=0)
        torch.testing.assert_close(weights_n, weights, rtol=0, atol=0)


def test_a_bias_that_does_not_fit_the_scores_is_rejected_naming_both_shapes():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match=r"\(7, 2, 3, 5\).*\(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, bias=torch.zeros(7, 2, 3, 5))
