"""Tests of coursepkg.attention: dot-product attention against a loop over keys, the lecture's
A/B example, masks, properties, the additive score against its formula, gradient checks, and
the Seq2Seq model (shapes, weights, padding, overfitting one batch, the loss, errors)."""

import math
import string

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from coursepkg.attention import (
    AdditiveAttention,
    Seq2Seq,
    additive_scores,
    attend,
    weighted_average,
)
from coursepkg.data import SeqCodec, dates_task

SMALL = settings(max_examples=25, deadline=None, derandomize=True)
F64 = torch.float64
E = math.e
KINDS = ["additive", "dot", "none"]
ATTENTION_KINDS = ["additive", "dot"]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


def random_mask(B: int, S: int, seed: int) -> torch.Tensor:
    """(B, S) boolean mask, about half True, with at least one True per row."""
    g = gen(seed)
    mask = torch.rand(B, S, generator=g) < 0.5
    mask[torch.arange(B), torch.randint(0, S, (B,), generator=g)] = True
    return mask


# ----------------------------------------------------------------------------- references
def softmax_by_hand(scores: dict[int, float], S: int) -> list[float]:
    """Softmax of the scores of the allowed keys, with math.exp; 0 for every other key."""
    top = max(scores.values())
    exps = {s: math.exp(e - top) for s, e in scores.items()}
    total = sum(exps.values())
    return [exps[s] / total if s in exps else 0.0 for s in range(S)]


def attend_loop(query, keys, values, mask=None, scale=1.0):
    """Dot-product attention with Python loops over rows, keys and components."""
    B, S, D = keys.shape
    Dv = values.shape[-1]
    contexts, all_weights = [], []
    for b in range(B):
        scores = {}
        for s in range(S):
            if mask is None or bool(mask[b, s]):
                scores[s] = scale * sum(float(keys[b, s, d]) * float(query[b, d]) for d in range(D))
        weights = softmax_by_hand(scores, S)
        contexts.append([sum(weights[s] * float(values[b, s, j]) for s in range(S))
                         for j in range(Dv)])
        all_weights.append(weights)
    return torch.tensor(contexts, dtype=F64), torch.tensor(all_weights, dtype=F64)


def additive_loop(query, keys, w_q, w_k, v, bias=None):
    """e[b, s] = sum_h v_h tanh(sum_d W_q[h, d] q[b, d] + sum_d W_k[h, d] k[b, s, d] + b_h)."""
    B, S, Dk = keys.shape
    Hd, Dq = w_q.shape
    out = []
    for b in range(B):
        row = []
        for s in range(S):
            e = 0.0
            for h in range(Hd):
                pre = sum(float(w_q[h, d]) * float(query[b, d]) for d in range(Dq))
                pre += sum(float(w_k[h, d]) * float(keys[b, s, d]) for d in range(Dk))
                pre += 0.0 if bias is None else float(bias[h])
                e += float(v[h]) * math.tanh(pre)
            row.append(e)
        out.append(row)
    return torch.tensor(out, dtype=F64)


# ----------------------------------------------------------------------------- attend
@pytest.mark.parametrize("scale", [1.0, 0.5, 3.0])
@pytest.mark.parametrize("masked", [False, True])
def test_attend_equals_a_loop_over_keys(scale, masked):
    B, S, D, Dv = 3, 5, 4, 3
    q, k, v = randn(B, D, seed=1), randn(B, S, D, seed=2), randn(B, S, Dv, seed=3)
    mask = random_mask(B, S, seed=4) if masked else None
    context, weights = attend(q, k, v, mask, scale=scale)
    ref_context, ref_weights = attend_loop(q, k, v, mask, scale=scale)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(context, ref_context, rtol=1e-12, atol=1e-14)


A, B_KEY = [1.0, 0.0], [0.0, 1.0]


def lecture_keys():
    return torch.tensor([[A, A, B_KEY, A]], dtype=F64)  # (1, 4, 2): keys A, A, B, A


def test_lecture_example_exact_weights_and_output():
    keys = lecture_keys()
    query = torch.tensor([[0.0, 1.0]], dtype=F64)
    scores = (keys @ query.unsqueeze(-1)).squeeze(-1)
    assert scores.tolist() == [[0.0, 0.0, 1.0, 0.0]]
    context, weights = attend(query, keys, keys)
    a, b = 1 / (3 + E), E / (3 + E)
    for got, want in zip(weights[0].tolist(), [a, a, b, a], strict=True):
        assert math.isclose(got, want, rel_tol=1e-15, abs_tol=0.0)
    for got, want in zip(context[0].tolist(), [3 / (3 + E), E / (3 + E)], strict=True):
        assert math.isclose(got, want, rel_tol=1e-15, abs_tol=0.0)
    # the lecture's rounded [1/6, 1/6, 1/2, 1/6] is only approximate: e / (3 + e) = 0.4754
    assert round(weights[0, 2].item(), 4) == 0.4754
    assert round(weights[0, 0].item(), 4) == 0.1749
    # the same weights from the scores alone
    context2, weights2 = weighted_average(scores, keys)
    torch.testing.assert_close(weights2, weights, rtol=0, atol=0)
    torch.testing.assert_close(context2, context, rtol=0, atol=0)
    # mean pooling (a DAN) gives [3/4, 1/4]: attention moved weight towards B
    assert keys.mean(dim=1).tolist() == [[0.75, 0.25]]
    assert context[0, 1] > 0.25


def test_lecture_example_long_query_picks_b():
    keys = lecture_keys()
    context, weights = attend(torch.tensor([[0.0, 10.0]], dtype=F64), keys, keys)
    assert weights[0, 2] > 0.9998  # e^10 / (3 + e^10) = 0.99986, each A gets 1.4e-4
    assert (weights[0, [0, 1, 3]] < 1.4e-4).all()
    assert math.isclose(weights[0, 2].item(), math.exp(10) / (3 + math.exp(10)), rel_tol=1e-14)
    torch.testing.assert_close(context, torch.tensor([[0.0, 1.0]], dtype=F64), rtol=0, atol=2e-4)
    # scaling the query by 10 and scale=10 are the same thing
    _, weights_scaled = attend(torch.tensor([[0.0, 1.0]], dtype=F64), keys, keys, scale=10.0)
    torch.testing.assert_close(weights_scaled, weights, rtol=1e-14, atol=0)


def test_scale_multiplies_the_scores_not_the_values():
    B, S, D, Dv = 2, 6, 3, 4
    q, k, v = randn(B, D, seed=5), randn(B, S, D, seed=6), randn(B, S, Dv, seed=7)
    for scale in (0.25, 2.0, 1 / math.sqrt(D)):
        context, weights = attend(q, k, v, scale=scale)
        expected_scores = scale * torch.einsum("bsd,bd->bs", k, q)
        ref_context, ref_weights = weighted_average(expected_scores, v)
        torch.testing.assert_close(weights, ref_weights, rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(context, ref_context, rtol=1e-13, atol=1e-15)
        # the context is a convex combination of the values (the scale never reaches them)
        torch.testing.assert_close(context, torch.einsum("bs,bsv->bv", weights, v))
    # scale 0: every key counts the same, the context is the mean of the values
    context, weights = attend(q, k, v, scale=0.0)
    torch.testing.assert_close(weights, torch.full((B, S), 1 / S, dtype=F64))
    torch.testing.assert_close(context, v.mean(dim=1))


def test_mask_zeroes_weights_and_renormalises():
    B, S, D, Dv = 4, 7, 3, 2
    q, k, v = randn(B, D, seed=8), randn(B, S, D, seed=9), randn(B, S, Dv, seed=10)
    mask = random_mask(B, S, seed=11)
    context, weights = attend(q, k, v, mask)
    assert (weights[~mask] == 0).all()  # exactly 0, not just small
    assert (weights[mask] > 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(B, dtype=F64))
    # identical to attending over the unmasked keys only, row by row
    for b in range(B):
        keep = mask[b].nonzero().squeeze(1)
        sub_context, sub_weights = attend(q[b : b + 1], k[b : b + 1, keep], v[b : b + 1, keep])
        torch.testing.assert_close(weights[b, keep], sub_weights[0], rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(context[b], sub_context[0], rtol=1e-13, atol=1e-15)
    # the masked keys' values and scores do not matter at all
    k2 = torch.where(mask[..., None], k, 1e3 * randn(B, S, D, seed=12))
    v2 = torch.where(mask[..., None], v, torch.full_like(v, 1e6))
    context2, weights2 = attend(q, k2, v2, mask)
    torch.testing.assert_close(weights2, weights, rtol=0, atol=0)
    torch.testing.assert_close(context2, context, rtol=1e-13, atol=1e-15)


def test_mask_broadcasts_and_all_true_equals_no_mask():
    B, S, D = 3, 5, 2
    q, k, v = randn(B, D, seed=13), randn(B, S, D, seed=14), randn(B, S, D, seed=15)
    full = attend(q, k, v, torch.ones(B, S, dtype=torch.bool))
    none = attend(q, k, v)
    for got, want in zip(full, none, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    row = torch.tensor([[True, False, True, True, False]])  # (1, S) broadcasts over B
    context, weights = attend(q, k, v, row)
    context_b, weights_b = attend(q, k, v, row.expand(B, S))
    torch.testing.assert_close(weights, weights_b, rtol=0, atol=0)
    torch.testing.assert_close(context, context_b, rtol=0, atol=0)
    assert (weights[:, ~row[0]] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attend_keeps_the_dtype(dtype):
    B, S, D, Dv = 2, 5, 4, 3
    q, k, v = randn(B, D, seed=16), randn(B, S, D, seed=17), randn(B, S, Dv, seed=18)
    mask = random_mask(B, S, seed=19)
    context, weights = attend(q.to(dtype), k.to(dtype), v.to(dtype), mask, scale=0.5)
    assert context.dtype == weights.dtype == dtype
    ref_context, ref_weights = attend_loop(q, k, v, mask, scale=0.5)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {}
    torch.testing.assert_close(weights.double(), ref_weights, **tol)
    torch.testing.assert_close(context.double(), ref_context, **tol)


@pytest.mark.parametrize(
    ("q_shape", "k_shape"),
    [((4,), (2, 5, 4)), ((2, 4), (5, 4)), ((2, 4), (2, 5, 3)), ((2, 1, 4), (2, 5, 4))],
)
def test_attend_rejects_bad_query_and_key_shapes(q_shape, k_shape):
    q, k = torch.zeros(q_shape), torch.zeros(k_shape)
    v = torch.zeros(2, 5, 3)
    with pytest.raises(ValueError) as info:
        attend(q, k, v)
    assert str(tuple(q_shape)) in str(info.value) and str(tuple(k_shape)) in str(info.value)


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape", "m_shape", "named"),
    [
        ((2, 4), (2, 5, 4), (2, 6, 3), None, (2, 6, 3)),  # values for 6 keys, 5 keys
        ((2, 4), (3, 5, 4), (3, 5, 3), None, (2, 4)),  # 2 queries, 3 rows of keys
        ((2, 4), (2, 5, 4), (2, 5, 3), (2, 6), (2, 6)),  # mask for 6 keys
    ],
)
def test_attend_rejects_mismatched_values_batch_and_mask(q_shape, k_shape, v_shape, m_shape,
                                                          named):
    """Every mismatch should be a ValueError that names the shapes, not a bare torch error.

    Fails as of writing: attend checks only the query and key shapes (a RuntimeError from
    torch, or silent broadcasting, for the rest).
    """
    q, k, v = torch.zeros(q_shape), torch.zeros(k_shape), torch.zeros(v_shape)
    mask = None if m_shape is None else torch.ones(m_shape, dtype=torch.bool)
    with pytest.raises(ValueError) as info:
        attend(q, k, v, mask)
    assert str(named) in str(info.value)


# ----------------------------------------------------------------------------- properties
sizes = st.tuples(
    st.integers(1, 3), st.integers(1, 6), st.integers(1, 4), st.integers(1, 3), st.integers(0, 999)
)


@SMALL
@given(sizes, st.floats(0.1, 4.0), st.booleans())
def test_weights_are_a_distribution_and_zero_where_masked(dims, scale, masked):
    B, S, D, Dv, seed = dims
    q, k, v = randn(B, D, seed=seed), randn(B, S, D, seed=seed + 1), randn(B, S, Dv, seed=seed + 2)
    mask = random_mask(B, S, seed=seed + 3) if masked else torch.ones(B, S, dtype=torch.bool)
    context, weights = attend(3 * q, k, v, mask, scale=scale)
    assert weights.shape == (B, S) and context.shape == (B, Dv)
    assert (weights >= 0).all()
    assert (weights[~mask] == 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(B, dtype=F64))
    # a convex combination stays inside the values' range
    assert (context <= v.amax(dim=1) + 1e-12).all() and (context >= v.amin(dim=1) - 1e-12).all()


@SMALL
@given(sizes)
def test_permuting_keys_and_values_permutes_the_weights(dims):
    B, S, D, Dv, seed = dims
    q, k, v = randn(B, D, seed=seed), randn(B, S, D, seed=seed + 1), randn(B, S, Dv, seed=seed + 2)
    mask = random_mask(B, S, seed=seed + 3)
    perm = torch.randperm(S, generator=gen(seed + 4))
    context, weights = attend(q, k, v, mask)
    context_p, weights_p = attend(q, k[:, perm], v[:, perm], mask[:, perm])
    torch.testing.assert_close(weights_p, weights[:, perm], rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(context_p, context, rtol=1e-12, atol=1e-14)


@SMALL
@given(sizes, st.floats(-50.0, 50.0), st.booleans())
def test_adding_a_constant_to_the_scores_changes_nothing(dims, c, per_row):
    B, S, _, Dv, seed = dims
    scores, v = 2 * randn(B, S, seed=seed), randn(B, S, Dv, seed=seed + 1)
    mask = random_mask(B, S, seed=seed + 2)
    shift = c * randn(B, 1, seed=seed + 3) if per_row else torch.tensor(c, dtype=F64)
    context, weights = weighted_average(scores, v, mask)
    context_s, weights_s = weighted_average(scores + shift, v, mask)
    torch.testing.assert_close(weights_s, weights, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(context_s, context, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- additive
@pytest.mark.parametrize("with_bias", [False, True])
def test_additive_scores_equal_the_formula(with_bias):
    B, S, Dq, Dk, Hd = 2, 4, 3, 5, 6
    q, k = randn(B, Dq, seed=20), randn(B, S, Dk, seed=21)
    w_q, w_k, v = randn(Hd, Dq, seed=22), randn(Hd, Dk, seed=23), randn(Hd, seed=24)
    bias = randn(Hd, seed=25) if with_bias else None
    got = additive_scores(q, k, w_q, w_k, v, bias)
    assert got.shape == (B, S)
    torch.testing.assert_close(got, additive_loop(q, k, w_q, w_k, v, bias), rtol=1e-12, atol=1e-13)
    # tanh matters: without it the score would be linear in the query
    linear = ((q @ w_q.T).unsqueeze(1) + k @ w_k.T + (0 if bias is None else bias)) @ v
    assert not torch.allclose(got, linear)


def test_additive_attention_module_equals_the_formula():
    B, S, Dq, Dk, Dv, Hd = 3, 5, 4, 6, 2, 7
    torch.manual_seed(0)
    attn = AdditiveAttention(Dq, Dk, Hd).double()
    q, k, values = randn(B, Dq, seed=26), randn(B, S, Dk, seed=27), randn(B, S, Dv, seed=28)
    mask = random_mask(B, S, seed=29)
    params = [p.detach() for p in (attn.w_q.weight, attn.w_k.weight, attn.v, attn.w_k.bias)]
    expected_scores = additive_loop(q, k, *params)
    with torch.no_grad():
        scores = attn.scores(q, k)
        context, weights = attn(q, k, values, mask)
    torch.testing.assert_close(scores, expected_scores, rtol=1e-12, atol=1e-13)
    for b in range(B):
        allowed = {s: float(expected_scores[b, s]) for s in range(S) if mask[b, s]}
        ref = torch.tensor(softmax_by_hand(allowed, S), dtype=F64)
        torch.testing.assert_close(weights[b], ref, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(context[b], ref @ values[b], rtol=1e-12, atol=1e-14)
    assert (weights[~mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, dtype=F64))


@pytest.mark.parametrize("masked", [False, True])
def test_gradcheck_additive_attention(masked):
    B, S, Dq, Dk, Dv, Hd = 2, 4, 3, 2, 3, 5
    torch.manual_seed(1)
    attn = AdditiveAttention(Dq, Dk, Hd).double()
    q = randn(B, Dq, seed=30).requires_grad_()
    k = randn(B, S, Dk, seed=31).requires_grad_()
    v = randn(B, S, Dv, seed=32).requires_grad_()
    mask = random_mask(B, S, seed=33) if masked else None
    assert torch.autograd.gradcheck(lambda q, k, v: attn(q, k, v, mask), (q, k, v))
    assert torch.autograd.gradgradcheck(lambda q, k, v: attn(q, k, v, mask), (q, k, v))


def test_gradcheck_additive_scores_all_inputs():
    B, S, Dq, Dk, Hd = 2, 3, 3, 2, 4
    inputs = (
        randn(B, Dq, seed=34), randn(B, S, Dk, seed=35), randn(Hd, Dq, seed=36),
        randn(Hd, Dk, seed=37), randn(Hd, seed=38), randn(Hd, seed=39),
    )
    inputs = tuple(x.requires_grad_() for x in inputs)
    assert torch.autograd.gradcheck(additive_scores, inputs)


def test_gradcheck_attend_and_weighted_average():
    B, S, D, Dv = 2, 4, 3, 2
    q = randn(B, D, seed=40).requires_grad_()
    k = randn(B, S, D, seed=41).requires_grad_()
    v = randn(B, S, Dv, seed=42).requires_grad_()
    mask = random_mask(B, S, seed=43)
    assert torch.autograd.gradcheck(lambda q, k, v: attend(q, k, v, mask, scale=0.7), (q, k, v))
    # masked keys get no gradient at all
    context, weights = attend(q, k, v, mask)
    (context.sum() + (weights * randn(B, S, seed=44)).sum()).backward()
    assert (k.grad[~mask] == 0).all() and (v.grad[~mask] == 0).all()


@SMALL
@given(sizes, st.integers(1, 5))
def test_additive_weights_sum_to_one_and_respect_the_mask(dims, Hd):
    B, S, D, Dv, seed = dims
    torch.manual_seed(seed)
    attn = AdditiveAttention(D, D + 1, Hd).double()
    q, k = randn(B, D, seed=seed), randn(B, S, D + 1, seed=seed + 1)
    v = randn(B, S, Dv, seed=seed + 2)
    mask = random_mask(B, S, seed=seed + 3)
    with torch.no_grad():
        context, weights = attn(q, k, v, mask)
    assert weights.shape == (B, S) and context.shape == (B, Dv)
    assert (weights >= 0).all() and (weights[~mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, dtype=F64))


# ----------------------------------------------------------------------------- Seq2Seq
SRC = SeqCodec(string.ascii_letters + string.digits + " ,./")
TGT = SeqCodec("0123456789-")


def date_batch(n: int, seed: int):
    """(pairs, src (B, S), src_lengths (B,), tgt (B, T)) with targets ending in EOS."""
    pairs = dates_task(n, generator=gen(seed))
    src, src_lengths = SRC.encode_batch([p[0] for p in pairs])
    tgt, _ = TGT.encode_batch([p[1] for p in pairs], eos=True)
    return pairs, src, src_lengths, tgt


def teacher_inputs(tgt: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.full_like(tgt[:, :1], SeqCodec.BOS), tgt[:, :-1]], dim=1)


def small_model(kind: str, seed: int = 0, dtype=torch.float32) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(SRC.vocab_size, TGT.vocab_size, d_embed=8, d_hidden=12, attention=kind).to(dtype)


@pytest.mark.parametrize("kind", KINDS)
def test_seq2seq_shapes(kind):
    pairs, src, src_lengths, tgt = date_batch(5, seed=0)
    model = small_model(kind)
    B, S = src.shape
    logits = model(src, src_lengths, teacher_inputs(tgt))
    assert logits.shape == (B, tgt.shape[1], TGT.vocab_size)
    for max_len in (11, 4):
        tokens, weights = model.translate(src, src_lengths, max_len=max_len, bos=SeqCodec.BOS)
        assert tokens.shape == (B, max_len) and tokens.dtype == torch.long
        assert weights.shape == (B, max_len, S)
        assert ((tokens >= 0) & (tokens < TGT.vocab_size)).all()
    states, summary, mask = model.encode(src, src_lengths)
    assert states.shape == (B, S, 2 * model.d_hidden) and summary.shape == (B, 2 * model.d_hidden)
    assert mask.tolist() == [[s < n for s in range(S)] for n in src_lengths.tolist()]


@pytest.mark.parametrize("kind", KINDS)
def test_translate_weights_sum_to_one_on_the_source_and_zero_on_padding(kind):
    _, src, src_lengths, _ = date_batch(6, seed=1)
    assert len(set(src_lengths.tolist())) > 1  # the batch really has padding
    model = small_model(kind)
    _, weights = model.translate(src, src_lengths, max_len=11, bos=SeqCodec.BOS)
    real = (torch.arange(src.shape[1])[None, :] < src_lengths[:, None])[:, None, :]  # (B, 1, S)
    if kind == "none":
        assert (weights == 0).all()
        return
    assert (weights >= 0).all()
    assert (weights.masked_select(~real) == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:2]))


@pytest.mark.parametrize("kind", KINDS)
def test_extra_padding_columns_change_nothing(kind):
    """Padding is not input: more PAD columns (same lengths) must leave the outputs alone.

    Fails as of writing: the encoder's right-to-left direction starts at the last column and
    reads the padding before the real tokens, so its states at real positions (the keys and
    values, and the summary used by "none") depend on how much padding follows.
    """
    _, src, src_lengths, tgt = date_batch(4, seed=2)
    padded = torch.cat([src, torch.zeros(src.shape[0], 5, dtype=torch.long)], dim=1)
    model = small_model(kind, dtype=F64)
    tgt_in = teacher_inputs(tgt)
    with torch.no_grad():
        torch.testing.assert_close(
            model(padded, src_lengths, tgt_in), model(src, src_lengths, tgt_in),
            rtol=1e-9, atol=1e-12,
        )
    tokens, weights = model.translate(src, src_lengths, max_len=11, bos=SeqCodec.BOS)
    tokens_p, weights_p = model.translate(padded, src_lengths, max_len=11, bos=SeqCodec.BOS)
    assert torch.equal(tokens_p, tokens)
    torch.testing.assert_close(weights_p[..., : src.shape[1]], weights, rtol=1e-9, atol=1e-12)
    assert (weights_p[..., src.shape[1] :] == 0).all()


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_a_translation_does_not_depend_on_the_rest_of_the_batch(kind):
    """The same date translated alone (no padding) or in a batch with longer dates.

    Fails as of writing, for the same reason as the test above.
    """
    _, src, src_lengths, _ = date_batch(6, seed=3)
    model = small_model(kind, dtype=F64)
    i = int(src_lengths.argmin())
    n = int(src_lengths[i])
    tokens, weights = model.translate(src, src_lengths, max_len=11, bos=SeqCodec.BOS)
    tokens_1, weights_1 = model.translate(src[i : i + 1, :n], src_lengths[i : i + 1], max_len=11,
                                          bos=SeqCodec.BOS)
    assert torch.equal(tokens_1[0], tokens[i])
    torch.testing.assert_close(weights_1[0], weights[i, :, :n], rtol=1e-9, atol=1e-12)


OVERFIT_DATES = 12
OVERFIT_STEPS = 90
OVERFIT_LOSS = 0.1  # measured at 90 steps, data seeds 0-2: additive and dot <= 0.015, none <= 0.044


@pytest.fixture(scope="module", params=KINDS)
def overfitted(request):
    """A model of each kind trained on the same 12 dates: (model, final loss, pairs, src,
    src_lengths)."""
    pairs, src, src_lengths, tgt = date_batch(OVERFIT_DATES, seed=0)
    torch.manual_seed(0)
    model = Seq2Seq(SRC.vocab_size, TGT.vocab_size, d_embed=16, d_hidden=24,
                    attention=request.param)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(OVERFIT_STEPS):
        opt.zero_grad()
        loss = model.loss(src, src_lengths, tgt, bos=SeqCodec.BOS)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return model, loss.item(), pairs, src, src_lengths


def test_seq2seq_overfits_one_batch(overfitted):
    model, final_loss, pairs, src, src_lengths = overfitted
    assert final_loss < OVERFIT_LOSS
    tokens, _ = model.translate(src, src_lengths, max_len=11, bos=SeqCodec.BOS)
    assert [TGT.decode(row) for row in tokens] == [iso for _, iso in pairs]
    assert (tokens[:, 10] == SeqCodec.EOS).all()  # YYYY-MM-DD then EOS


def test_trained_translation_survives_extra_padding(overfitted):
    """Fails as of writing for "additive" and "dot": see the two padding tests above."""
    model, _, pairs, src, src_lengths = overfitted
    padded = torch.cat([src, torch.zeros(src.shape[0], 8, dtype=torch.long)], dim=1)
    tokens, _ = model.translate(padded, src_lengths, max_len=11, bos=SeqCodec.BOS)
    assert [TGT.decode(row) for row in tokens] == [iso for _, iso in pairs]


@pytest.mark.parametrize("kind", KINDS)
def test_loss_ignores_padding(kind):
    _, src, src_lengths, _ = date_batch(4, seed=4)
    model = small_model(kind, dtype=F64)
    # targets of different lengths, so that some rows are padded
    texts = ["2021-03-05", "99", "1-2-3", "0"]
    tgt, tgt_lengths = TGT.encode_batch(texts, eos=True)
    loss = model.loss(src, src_lengths, tgt, bos=SeqCodec.BOS)
    # by hand: mean cross-entropy over the real target tokens only
    logits = model(src, src_lengths, teacher_inputs(tgt))
    terms = [F.cross_entropy(logits[b, t], tgt[b, t]) for b in range(4)
             for t in range(int(tgt_lengths[b]))]
    torch.testing.assert_close(loss, torch.stack(terms).mean(), rtol=1e-12, atol=1e-14)
    # more PAD columns at the end of the targets: the same loss
    longer = torch.cat([tgt, torch.zeros(4, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model.loss(src, src_lengths, longer, bos=SeqCodec.BOS), loss,
                               rtol=1e-12, atol=1e-14)


def test_invalid_attention_kind():
    with pytest.raises(ValueError, match="'bahdanau'") as info:
        Seq2Seq(10, 10, attention="bahdanau")
    for kind in KINDS:
        assert kind in str(info.value)


@pytest.mark.parametrize("training", [True, False])
def test_translate_restores_the_training_flag(training):
    _, src, src_lengths, _ = date_batch(2, seed=5)
    model = small_model("additive")
    model.train(training)
    tokens, weights = model.translate(src, src_lengths, max_len=3, bos=SeqCodec.BOS)
    assert model.training is training
    assert all(m.training is training for m in model.modules())
    assert not tokens.requires_grad and not weights.requires_grad


# ----------------------------------------------------------------------------- beam translation
def seq2seq_logprob(model, src, src_lengths, tokens):
    """(B,) the teacher-forced sum of log p of each row of tokens."""
    with torch.no_grad():
        logp = torch.log_softmax(model(src, src_lengths, teacher_inputs(tokens)), dim=-1)
    return logp.gather(-1, tokens[..., None])[..., 0].sum(dim=1)


@pytest.mark.parametrize("kind", KINDS)
def test_translate_with_a_beam(kind):
    _, src, src_lengths, _ = date_batch(6, seed=7)
    model = small_model(kind, seed=1, dtype=F64)
    greedy, greedy_weights = model.translate(src, src_lengths, max_len=6, bos=SeqCodec.BOS)
    same, same_weights = model.translate(src, src_lengths, max_len=6, bos=SeqCodec.BOS,
                                         beam_size=1)
    assert torch.equal(same, greedy) and torch.equal(same_weights, greedy_weights)
    beam, weights = model.translate(src, src_lengths, max_len=6, bos=SeqCodec.BOS,
                                    beam_size=3)
    assert beam.shape == (6, 6) and weights.shape == greedy_weights.shape
    beam_lp = seq2seq_logprob(model, src, src_lengths, beam)
    greedy_lp = seq2seq_logprob(model, src, src_lengths, greedy)
    assert (beam_lp >= greedy_lp - 1e-12).all()  # never less likely than greedy's
    # the weights are those of the teacher-forced pass over the chosen tokens
    _, teacher = model._decode(src, src_lengths, teacher_inputs(beam), 6, SeqCodec.BOS)
    torch.testing.assert_close(weights, teacher, rtol=0, atol=1e-12)


def test_translate_with_a_wide_beam_finds_the_most_likely_short_target():
    """Two tokens from 14: a beam of 196 keeps every target, so it returns the best."""
    _, src, src_lengths, _ = date_batch(2, seed=8)
    model = small_model("additive", seed=2, dtype=F64)
    V = TGT.vocab_size
    beam, _ = model.translate(src, src_lengths, max_len=2, bos=SeqCodec.BOS, beam_size=V * V)
    every = torch.cartesian_prod(torch.arange(V), torch.arange(V))  # (V^2, 2)
    for b in range(2):
        rows = torch.full((V * V,), b)
        scores = seq2seq_logprob(model, src[rows], src_lengths[rows], every)
        assert beam[b].tolist() == every[scores.argmax()].tolist()


def test_translate_beam_ends_hypotheses_at_eos_and_refuses_a_bad_width():
    _, src, src_lengths, _ = date_batch(3, seed=9)
    model = small_model("dot", seed=3)
    beam, _ = model.translate(src, src_lengths, max_len=8, bos=SeqCodec.BOS, beam_size=3,
                              eos_id=SeqCodec.EOS)
    for row in beam.tolist():
        if SeqCodec.EOS in row:
            assert set(row[row.index(SeqCodec.EOS):]) == {SeqCodec.EOS}
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
        model.translate(src, src_lengths, max_len=3, bos=SeqCodec.BOS, beam_size=0)
