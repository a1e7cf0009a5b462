"""Tests of coursepkg.positional: the sinusoidal table against its closed form (math.sin/cos in
a loop), a shift by k positions is one fixed rotation per frequency for every p, and the dot
product of two positions depends only on their offset; RoPE against a loop reference (identity
at 0, norms kept, the plain 2-D rotation when Dh = 2, scores that depend only on m - n, default
and explicit positions, base, leading dimensions, inverse and composition, gradients); the
angles by hand; the relative position bias (shape, one shared number per clipped offset,
gradients only into the offsets used); the learned embedding (first T rows, max_len, training);
the modules that serve attention at call time (SinusoidalPositions, Rotary, the bias) and their
offsets (queries at offset .. offset+T-1 give the last T rows of the full computation); and the
errors of each."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coursepkg.positional import (
    LearnedPositionalEmbedding,
    RelativePositionBias,
    Rotary,
    SinusoidalPositions,
    apply_rope,
    rope_angles,
    sinusoidal_encoding,
)

SMALL = settings(max_examples=20, deadline=None, derandomize=True)
F64 = torch.float64
BAD_SIZES = [0, -1, 2.5, 3.0, True, "3", None]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=gen(seed), dtype=dtype)


def re_shape(shape) -> str:
    """A shape as a regular expression matching its tuple's repr."""
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


# ----------------------------------------------------------------------------- sinusoidal
def sinusoidal_reference(T: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """The paper's formula, one entry at a time: PE[p, 2i] = sin(p / base^(2i/d)),
    PE[p, 2i+1] = cos(p / base^(2i/d)). Float64."""
    table = torch.empty(T, d, dtype=F64)
    for p in range(T):
        for i in range(d // 2):
            angle = p / base ** (2 * i / d)
            table[p, 2 * i] = math.sin(angle)
            table[p, 2 * i + 1] = math.cos(angle)
    return table


def frequencies(d: int, base: float = 10000.0) -> list[float]:
    """w_i = base^(-2i/d), i = 0 .. d/2 - 1."""
    return [base ** (-2 * i / d) for i in range(d // 2)]


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("T", [1, 2, 7, 60])
@pytest.mark.parametrize("d", [2, 4, 6, 16, 64])
def test_sinusoidal_table_is_the_closed_form(T, d, dtype):
    pe = sinusoidal_encoding(T, d, dtype=dtype)
    assert pe.shape == (T, d) and pe.dtype == dtype
    torch.testing.assert_close(pe, sinusoidal_reference(T, d).to(dtype))  # dtype's tolerances


def test_sinusoidal_table_small_example_by_hand():
    """d = 4: w_0 = 1 and w_1 = 10000^(-2/4) = 1/100. Position 0 is (0, 1, 0, 1)."""
    pe = sinusoidal_encoding(3, 4, dtype=F64)
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
            [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)],
        ],
        dtype=F64,
    )
    torch.testing.assert_close(pe, expected, rtol=0, atol=1e-15)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]  # exactly
    assert sinusoidal_encoding(3, 4).dtype == torch.float32  # the default


@pytest.mark.parametrize("base", [2.0, 100.0, 12345.6])
def test_sinusoidal_base_sets_the_wavelengths(base):
    pe = sinusoidal_encoding(20, 8, base=base, dtype=F64)
    torch.testing.assert_close(pe, sinusoidal_reference(20, 8, base), rtol=0, atol=1e-14)
    assert not torch.allclose(pe, sinusoidal_encoding(20, 8, dtype=F64))


@pytest.mark.parametrize("d", [1, 3, 5, 17])
def test_sinusoidal_odd_width_is_rejected(d):
    with pytest.raises(ValueError, match=f"d must be even.*got {d}"):
        sinusoidal_encoding(4, d)


@pytest.mark.parametrize("bad", BAD_SIZES)
def test_sinusoidal_bad_sizes_are_rejected(bad):
    with pytest.raises(ValueError, match="T must be a positive int"):
        sinusoidal_encoding(bad, 4)
    with pytest.raises(ValueError, match="d must be a positive int"):
        sinusoidal_encoding(4, bad)


def shift_matrix(k: int, d: int) -> torch.Tensor:
    """M_k (d, d), block diagonal, built from k alone: PE[p + k] = M_k @ PE[p] for every p.

    Each pair is (s, c) = (sin(p w), cos(p w)); the angle-addition formulas give
    sin((p + k) w) = cos(k w) s + sin(k w) c and cos((p + k) w) = -sin(k w) s + cos(k w) c,
    so the block is [[cos kw, sin kw], [-sin kw, cos kw]]: a rotation by -k w in the (s, c)
    plane (the pair is (y, x), not (x, y), so the sign is the reverse of the usual one)."""
    M = torch.zeros(d, d, dtype=F64)
    for i, w in enumerate(frequencies(d)):
        c, s = math.cos(k * w), math.sin(k * w)
        M[2 * i: 2 * i + 2, 2 * i: 2 * i + 2] = torch.tensor([[c, s], [-s, c]], dtype=F64)
    return M


@pytest.mark.parametrize("d", [2, 6, 16])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 17, 40])
def test_a_shift_by_k_is_one_linear_map_for_every_position(k, d):
    """The same M_k takes every row p to row p + k: PE[k:] = PE[:-k] @ M_k^T, all p at once."""
    T = 60
    pe = sinusoidal_encoding(T + k, d, dtype=F64)
    M = shift_matrix(k, d)
    torch.testing.assert_close(pe[k:], pe[:T] @ M.T, rtol=0, atol=1e-12)
    torch.testing.assert_close(pe[k:], (M @ pe[:T].T).T, rtol=0, atol=1e-12)  # column form
    torch.testing.assert_close(M @ M.T, torch.eye(d, dtype=F64), rtol=0, atol=1e-14)  # rotation
    if k:  # guard: the other orientation of the blocks is wrong, so the test can fail
        assert not torch.allclose(pe[k:], pe[:T] @ M, atol=1e-3)


@SMALL
@given(st.integers(0, 500), st.integers(-200, 200), st.sampled_from([2, 4, 8, 32]))
def test_shift_map_depends_on_k_only(p, k, d):
    """For any p and k (negative too, as long as p + k >= 0) the M_k made without p works."""
    q = p + k
    if q < 0:
        p, q = -k, 0  # keep the shift, move the start
    pe = sinusoidal_encoding(max(p, q) + 1, d, dtype=F64)
    M = shift_matrix(q - p, d)
    torch.testing.assert_close(pe[q], M @ pe[p], rtol=0, atol=1e-11)


def test_dot_product_of_two_positions_depends_only_on_their_offset():
    """PE[p] . PE[p + k] = sum_i cos(k w_i): the Gram matrix is Toeplitz, with d/2 on its
    diagonal."""
    T, d = 50, 16
    pe = sinusoidal_encoding(T, d, dtype=F64)
    gram = pe @ pe.T  # (T, T)
    w = frequencies(d)
    expected = torch.tensor(
        [[sum(math.cos((q - p) * wi) for wi in w) for q in range(T)] for p in range(T)],
        dtype=F64,
    )
    torch.testing.assert_close(gram, expected, rtol=0, atol=1e-12)
    for k in range(-T + 1, T):  # every diagonal is constant
        diagonal = gram.diagonal(k)
        torch.testing.assert_close(diagonal, diagonal[0].expand_as(diagonal), rtol=0, atol=1e-12)
    torch.testing.assert_close(gram.diagonal(), torch.full((T,), d / 2, dtype=F64))
    assert gram.diagonal(1)[0] > gram.diagonal(20)[0]  # near positions are more alike


# ----------------------------------------------------------------------------- SinusoidalPositions
@pytest.mark.parametrize("T, offset", [(1, 0), (5, 0), (300, 0), (4, 3), (2, 1000)], ids=str)
def test_sinusoidal_positions_are_the_table_at_any_length_and_offset(T, offset):
    module = SinusoidalPositions(6)
    rows = module(T, offset=offset)
    assert rows.shape == (T, 6) and rows.dtype == torch.float32
    assert torch.equal(rows, sinusoidal_encoding(offset + T, 6)[offset:])
    if offset == 0:
        assert torch.equal(module(T), rows)


def test_sinusoidal_positions_follow_the_module_s_dtype_at_full_precision():
    """After .double(), the rows are computed in float64, not float32 rows widened."""
    module = SinusoidalPositions(8).double()
    for T in (1, 40, 500):
        torch.testing.assert_close(module(T), sinusoidal_encoding(T, 8, dtype=F64),
                                   rtol=0, atol=1e-15)


def test_sinusoidal_positions_store_nothing_and_keep_no_cache():
    """No parameters, nothing in the state dict, and a long call leaves no state behind."""
    module = SinusoidalPositions(4)
    state = {name: t.clone() for name, t in module.named_buffers()}
    attributes = dict(vars(module))
    assert not list(module.parameters()) and module.state_dict() == {}
    module(5000)
    assert {name: t.shape for name, t in module.named_buffers()} == {
        name: t.shape for name, t in state.items()}
    assert vars(module).keys() == attributes.keys()


def test_sinusoidal_positions_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="d must be even"):
        SinusoidalPositions(5)
    with pytest.raises(ValueError, match="d must be a positive int"):
        SinusoidalPositions(0)
    module = SinusoidalPositions(4)
    with pytest.raises(ValueError, match="T must be a positive int"):
        module(0)
    with pytest.raises(ValueError, match=r"offset must be an int >= 0, got -1"):
        module(3, offset=-1)


# ----------------------------------------------------------------------------- learned
@pytest.mark.parametrize("max_len, d", [(1, 1), (8, 4), (16, 3)])
def test_learned_embedding_returns_the_first_rows(max_len, d):
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(max_len, d)
    assert isinstance(emb.weight, torch.nn.Parameter) and emb.weight.shape == (max_len, d)
    assert [name for name, _ in emb.named_parameters()] == ["weight"]
    assert emb.weight.abs().sum() > 0  # initialised, not zeros
    for T in range(1, max_len + 1):
        out = emb(T)
        assert out.shape == (T, d)
        assert torch.equal(out, emb.weight[:T])


def test_learned_embedding_refuses_positions_beyond_max_len():
    emb = LearnedPositionalEmbedding(8, 4)
    assert emb(8).shape == (8, 4)
    with pytest.raises(ValueError, match=r"max_len=8.*length 9"):
        emb(9)
    with pytest.raises(ValueError, match="max_len=8"):
        emb(100)


@pytest.mark.parametrize("bad", BAD_SIZES)
def test_learned_embedding_bad_sizes_are_rejected(bad):
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        LearnedPositionalEmbedding(bad, 4)
    with pytest.raises(ValueError, match="d must be a positive int"):
        LearnedPositionalEmbedding(4, bad)
    with pytest.raises(ValueError, match="T must be a positive int"):
        LearnedPositionalEmbedding(4, 4)(bad)


def test_learned_embedding_trains_only_the_rows_it_used():
    max_len, d, T = 10, 3, 6
    torch.manual_seed(1)
    emb = LearnedPositionalEmbedding(max_len, d)
    upstream = randn(T, d, seed=2, dtype=torch.float32)
    (emb(T) * upstream).sum().backward()
    assert torch.equal(emb.weight.grad[:T], upstream)
    assert (emb.weight.grad[T:] == 0).all()
    # and an optimiser step moves those rows only
    before = emb.weight.detach().clone()
    torch.optim.SGD(emb.parameters(), lr=0.1).step()
    assert (emb.weight[:T] != before[:T]).all()
    assert torch.equal(emb.weight[T:], before[T:])


# ----------------------------------------------------------------------------- rope_angles
def test_rope_angles_by_hand():
    """Dh = 4: theta = (1, 10000^(-2/4)) = (1, 0.01); angle[m, i] = m theta_i."""
    angles = rope_angles(torch.tensor([0, 1, 2, 5]), 4)
    assert angles.shape == (4, 2) and angles.dtype == torch.float32  # integer positions
    expected = torch.tensor([[0.0, 0.0], [1.0, 0.01], [2.0, 0.02], [5.0, 0.05]])
    torch.testing.assert_close(angles, expected)
    # base 4, Dh = 6: theta = (1, 4^(-1/3), 4^(-2/3)); float64 positions give float64 angles
    angles = rope_angles(torch.tensor([3.0, -0.5], dtype=F64), 6, base=4.0)
    assert angles.dtype == F64
    theta = [1.0, 4 ** (-1 / 3), 4 ** (-2 / 3)]
    expected = torch.tensor([[3 * t for t in theta], [-0.5 * t for t in theta]], dtype=F64)
    torch.testing.assert_close(angles, expected, rtol=1e-15, atol=0)
    assert rope_angles(torch.tensor([1, 2]), 2, dtype=F64).tolist() == [[1.0], [2.0]]


def test_rope_angles_odd_width_is_rejected():
    with pytest.raises(ValueError, match="Dh must be even, got 5"):
        rope_angles(torch.arange(3), 5)


# ----------------------------------------------------------------------------- apply_rope
def rope_reference(x: torch.Tensor, positions, base: float = 10000.0) -> torch.Tensor:
    """Pair i of the row at position m, (a, b), becomes R(m theta_i) (a, b) with
    R(t) = [[cos t, -sin t], [sin t, cos t]] and theta_i = base^(-2i/Dh). A loop, float64."""
    x = x.to(F64)
    T, Dh = x.shape[-2:]
    out = torch.empty_like(x)
    for t, m in enumerate(positions):
        for i in range(Dh // 2):
            angle = float(m) * base ** (-2 * i / Dh)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            out[..., t, 2 * i] = c * a - s * b
            out[..., t, 2 * i + 1] = s * a + c * b
    return out


LEADS = [(), (2,), (2, 3), (2, 1, 3)]


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("lead", LEADS, ids=str)
@pytest.mark.parametrize("T, Dh", [(1, 2), (5, 4), (7, 8), (3, 16)])
def test_rope_equals_the_loop_reference_in_every_layout(lead, T, Dh, dtype):
    x = randn(*lead, T, Dh, seed=T * Dh, dtype=dtype)
    out = apply_rope(x)
    assert out.shape == x.shape and out.dtype == dtype
    torch.testing.assert_close(out, rope_reference(x, range(T)).to(dtype))
    # the leading dimensions are independent: each (T, Dh) slice alone gives the same
    flat, flat_out = x.reshape(-1, T, Dh), out.reshape(-1, T, Dh)
    for b in range(flat.shape[0]):
        torch.testing.assert_close(apply_rope(flat[b]), flat_out[b], rtol=0, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, F64])
def test_rope_is_as_accurate_as_its_dtype_at_long_positions(dtype):
    """The rotation of an input already in `dtype`, compared with the exact (float64) rotation
    of the same numbers: only the rounding of cos, sin and the products, a few eps per entry.
    Rounding the angle m theta to `dtype` before taking cos/sin would be far worse: at m = 511
    one float32 ulp of the angle is 3e-5 rad, one bfloat16 ulp is 2 rad."""
    x = randn(2, 512, 16, seed=12).to(dtype)
    out = apply_rope(x)
    assert out.dtype == dtype
    exact = rope_reference(x[0, -8:], range(504, 512))  # the last rows, in the loop reference
    torch.testing.assert_close(apply_rope(x.to(F64))[0, -8:], exact, rtol=0, atol=1e-12)
    bound = 4 * torch.finfo(dtype).eps * x.abs().max().item()
    error = (out.to(F64) - apply_rope(x.to(F64))).abs().max().item()
    assert error <= bound, f"{dtype}: error {error:.3g} > {bound:.3g}"


def test_rope_is_the_identity_at_position_zero():
    x = randn(2, 3, 4, 8, seed=1)
    assert torch.equal(apply_rope(x, torch.zeros(4, dtype=torch.long)), x)
    assert torch.equal(apply_rope(x)[..., 0, :], x[..., 0, :])  # default positions start at 0
    assert not torch.allclose(apply_rope(x)[..., 1:, :], x[..., 1:, :])  # and only there


@SMALL
@given(st.lists(st.integers(1, 3), max_size=2), st.integers(1, 6), st.integers(1, 6),
       st.integers(0, 2**16))
def test_rope_keeps_norms_of_every_pair(lead, T, half, seed):
    Dh = 2 * half
    x = randn(*lead, T, Dh, seed=seed)
    positions = torch.randint(-1000, 1000, (T,), generator=gen(seed + 1))
    out = apply_rope(x, positions)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-13, atol=1e-13)
    pairs, pairs_out = x.unflatten(-1, (half, 2)), out.unflatten(-1, (half, 2))
    torch.testing.assert_close(pairs_out.norm(dim=-1), pairs.norm(dim=-1), rtol=1e-13,
                               atol=1e-13)


@SMALL
@given(st.one_of(st.integers(-100, 100), st.floats(-20.0, 20.0)), st.integers(0, 2**16))
def test_rope_with_two_dims_is_the_plane_rotation_by_m_radians(m, seed):
    x = randn(1, 2, seed=seed)  # (T=1, Dh=2)
    positions = torch.tensor([m], dtype=F64)
    rotation = torch.tensor([[math.cos(m), -math.sin(m)], [math.sin(m), math.cos(m)]], dtype=F64)
    torch.testing.assert_close(apply_rope(x, positions)[0], rotation @ x[0], rtol=0, atol=1e-13)
    if isinstance(m, int):  # integer positions give the same
        torch.testing.assert_close(apply_rope(x, torch.tensor([m]))[0], rotation @ x[0],
                                   rtol=0, atol=1e-13)


def test_rope_two_dims_quarter_turn_is_counterclockwise():
    """m = pi/2 turns (1, 0) into (0, 1) and (0, 1) into (-1, 0)."""
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=F64)
    out = apply_rope(x, torch.full((2,), math.pi / 2, dtype=F64))
    torch.testing.assert_close(out, torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=F64),
                               rtol=0, atol=1e-15)


def score(q: torch.Tensor, k: torch.Tensor, m, n, base=10000.0) -> torch.Tensor:
    """<rope(q, m), rope(k, n)> for single vectors q, k (Dh,)."""
    q_m = apply_rope(q[None], torch.tensor([m]), base)[0]
    k_n = apply_rope(k[None], torch.tensor([n]), base)[0]
    return q_m @ k_n


@SMALL
@given(st.integers(-2000, 2000), st.integers(-2000, 2000), st.integers(-2000, 2000),
       st.sampled_from([2, 4, 8, 64]), st.integers(0, 2**16))
def test_rope_scores_depend_only_on_m_minus_n(m, n, shift, Dh, seed):
    q, k = randn(Dh, seed=seed), randn(Dh, seed=seed + 1)
    s = score(q, k, m, n)
    torch.testing.assert_close(score(q, k, m + shift, n + shift), s, rtol=0, atol=1e-11)
    torch.testing.assert_close(score(q, k, m - n, 0), s, rtol=0, atol=1e-11)
    # the closed form: pairs as complex numbers, sum_i Re(q_i conj(k_i) e^{i (m - n) theta_i})
    qc = torch.complex(q[0::2], q[1::2])
    kc = torch.complex(k[0::2], k[1::2])
    theta = 10000.0 ** (-torch.arange(0, Dh, 2, dtype=F64) / Dh)
    closed = (qc * kc.conj() * torch.exp(1j * (m - n) * theta)).real.sum()
    torch.testing.assert_close(s, closed, rtol=0, atol=1e-11)


def test_rope_scores_do_change_with_the_offset():
    """Guard for the property above: the score is not a constant."""
    q, k = randn(8, seed=3), randn(8, seed=4)
    scores = torch.stack([score(q, k, m, 0) for m in range(6)])
    assert len(set(scores.tolist())) == 6
    torch.testing.assert_close(score(q, k, 0, 0), q @ k)  # offset 0: the plain dot product


def test_rope_default_positions_are_arange():
    x = randn(2, 3, 6, 4, seed=5)
    torch.testing.assert_close(apply_rope(x), apply_rope(x, torch.arange(6)), rtol=0, atol=0)
    torch.testing.assert_close(apply_rope(x), apply_rope(x, torch.arange(6, dtype=F64)),
                               rtol=0, atol=1e-15)


@pytest.mark.parametrize("start, stop", [(0, 3), (4, 9), (11, 12), (0, 12)])
def test_explicit_positions_equal_a_slice_of_a_longer_sequence(start, stop):
    """Rotating rows start .. stop-1 at their own positions = slicing the rotated whole."""
    x = randn(2, 12, 8, seed=6)
    whole = apply_rope(x)
    part = apply_rope(x[:, start:stop], torch.arange(start, stop))
    torch.testing.assert_close(part, whole[:, start:stop], rtol=0, atol=1e-15)
    # a cached generation step: one new row at position stop - 1
    one = apply_rope(x[:, stop - 1: stop], torch.tensor([stop - 1]))
    torch.testing.assert_close(one, whole[:, stop - 1: stop], rtol=0, atol=1e-15)
    if start:  # and the default positions would be wrong there
        assert not torch.allclose(apply_rope(x[:, start:stop]), whole[:, start:stop])


@pytest.mark.parametrize("base", [2.0, 100.0, 10000.0, 5e5])
@pytest.mark.parametrize("Dh", [2, 6, 8])
def test_base_sets_the_frequency_of_each_pair(base, Dh):
    """A unit vector in pair i, (1, 0) -> (cos a, sin a): read off a = m base^(-2i/Dh)."""
    m = 0.7  # small enough that every angle stays in (-pi, pi]
    half = Dh // 2
    x = torch.zeros(half, Dh, dtype=F64)  # row i: 1 in the first entry of pair i
    x[torch.arange(half), 2 * torch.arange(half)] = 1.0
    out = apply_rope(x, torch.full((half,), m, dtype=F64), base=base)
    measured = torch.atan2(out[torch.arange(half), 2 * torch.arange(half) + 1],
                           out[torch.arange(half), 2 * torch.arange(half)])
    expected = torch.tensor([m * base ** (-2 * i / Dh) for i in range(half)], dtype=F64)
    torch.testing.assert_close(measured, expected, rtol=1e-14, atol=1e-15)
    # every other entry stays 0: pair i only mixes within itself
    others = torch.ones_like(out, dtype=torch.bool)
    others[torch.arange(half), 2 * torch.arange(half)] = False
    others[torch.arange(half), 2 * torch.arange(half) + 1] = False
    assert (out[others] == 0).all()
    y = randn(5, Dh, seed=7)
    torch.testing.assert_close(apply_rope(y, base=base), rope_reference(y, range(5), base))


def test_rope_inverse_and_composition():
    """R(-m) undoes R(m); R(n) R(m) = R(m + n)."""
    x = randn(3, 5, 8, seed=8)
    m = torch.tensor([0, 3, -7, 100, 2501])
    n = torch.tensor([4, -3, 7, 0, 12])
    torch.testing.assert_close(apply_rope(apply_rope(x, m), -m), x, rtol=0, atol=1e-13)
    torch.testing.assert_close(apply_rope(apply_rope(x, m), n), apply_rope(x, m + n),
                               rtol=0, atol=1e-12)


def test_rope_gradients():
    x = randn(2, 4, 6, seed=9).requires_grad_()
    positions = torch.tensor([0, 1, 5, 30])
    assert torch.autograd.gradcheck(lambda x: apply_rope(x, positions, base=50.0), (x,))
    assert torch.autograd.gradgradcheck(lambda x: apply_rope(x, positions), (x,))
    # a rotation's gradient is the upstream gradient rotated back
    upstream = randn(2, 4, 6, seed=10)
    (apply_rope(x, positions) * upstream).sum().backward()
    torch.testing.assert_close(x.grad, apply_rope(upstream, -positions), rtol=0, atol=1e-14)


def test_rope_gradient_with_respect_to_float_positions():
    x = randn(3, 4, seed=11)
    positions = torch.tensor([0.0, 1.5, -2.0], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p: apply_rope(x, p), (positions,))


@pytest.mark.parametrize("Dh", [1, 3, 7])
def test_rope_odd_head_width_is_rejected(Dh):
    with pytest.raises(ValueError, match=f"Dh must be even, got {Dh}"):
        apply_rope(torch.randn(2, 4, Dh))


@pytest.mark.parametrize("shape", [(4,), (6,), (1, 5), (5, 1), ()], ids=str)
def test_rope_positions_of_the_wrong_shape_are_rejected(shape):
    x = torch.randn(2, 5, 4)
    expected = r"expected positions of shape \(5,\), got " + re_shape(shape)
    with pytest.raises(ValueError, match=expected):
        apply_rope(x, torch.zeros(shape, dtype=torch.long))


# ----------------------------------------------------------------------------- Rotary
@pytest.mark.parametrize("base", [10000.0, 50.0])
def test_rotary_is_apply_rope_on_the_queries_and_on_the_keys(base):
    """Queries (..., T, Dh) at 0 .. T-1 and keys (..., S, Dh) at 0 .. S-1, S != T."""
    q, k = randn(2, 3, 4, 6, seed=90), randn(2, 3, 7, 6, seed=91)
    q_rot, k_rot = Rotary(base)(q, k)
    assert torch.equal(q_rot, apply_rope(q, base=base))
    assert torch.equal(k_rot, apply_rope(k, base=base))


@SMALL
@given(st.integers(0, 40), st.integers(1, 6), st.integers(0, 2**16))
def test_rotary_offset_gives_the_last_rows_of_the_full_scores(offset, T, seed):
    """Queries at offset .. offset+T-1 against the keys at 0 .. offset+T-1 (what a cache of
    the earlier keys would hold) score as the last T rows of the full sequence."""
    L = offset + T
    q_full, k_full = randn(2, L, 8, seed=seed), randn(2, L, 8, seed=seed + 1)
    rotary = Rotary()
    q_rot, k_rot = rotary(q_full, k_full)
    full = q_rot @ k_rot.transpose(-2, -1)  # (2, L, L)
    q_last, k_again = rotary(q_full[:, offset:], k_full, offset=offset)
    assert torch.equal(k_again, k_rot)
    torch.testing.assert_close(q_last @ k_again.transpose(-2, -1), full[:, offset:],
                               rtol=0, atol=1e-12)


def test_rotary_has_no_parameters_and_refuses_a_negative_offset():
    rotary = Rotary(500.0)
    assert not list(rotary.parameters()) and rotary.state_dict() == {}
    assert "base=500.0" in repr(rotary)
    x = torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match=r"offset must be an int >= 0, got -2"):
        rotary(x, x, offset=-2)
    with pytest.raises(ValueError, match="Dh must be even, got 3"):
        rotary(torch.randn(1, 3, 3), torch.randn(1, 3, 3))


# ----------------------------------------------------------------------------- relative bias
def random_bias_module(H: int, M: int, seed: int = 0) -> RelativePositionBias:
    """Its bias starts at zeros: fill it with distinct random numbers."""
    module = RelativePositionBias(H, M).double()
    with torch.no_grad():
        module.bias.copy_(randn(H, 2 * M + 1, seed=seed))
    return module


def test_relative_bias_parameters():
    module = RelativePositionBias(3, 4)
    assert [name for name, _ in module.named_parameters()] == ["bias"]
    assert module.bias.shape == (3, 9) and (module.bias == 0).all()  # no bias before training


@pytest.mark.parametrize("T, S", [(1, 1), (4, 4), (3, 7), (7, 3), (10, 10)])
@pytest.mark.parametrize("H, M", [(1, 1), (2, 3), (4, 20)])
def test_relative_bias_entry_is_the_bias_of_the_clipped_offset(T, S, H, M):
    module = random_bias_module(H, M, seed=T + S)
    out = module(T, S)
    assert out.shape == (H, T, S) and out.dtype == F64
    for h in range(H):
        for t in range(T):  # query position t, key position s: the offset s - t
            for s in range(S):
                offset = min(max(s - t, -M), M)
                assert out[h, t, s] == module.bias[h, offset + M], (h, t, s)
    if T == S:
        assert torch.equal(module(T), out)  # S defaults to T


def test_relative_bias_offsets_small_example():
    module = RelativePositionBias(1, 1)
    assert module.offsets(3, 4).tolist() == [[1, 2, 2, 2], [0, 1, 2, 2], [0, 0, 1, 2]]
    assert module.offsets(2).tolist() == [[1, 2], [0, 1]]


def test_relative_bias_is_shared_along_diagonals_and_clipped_at_the_ends():
    H, M, T = 2, 3, 12
    module = random_bias_module(H, M, seed=1)
    out = module(T)
    for k in range(-T + 1, T):  # every pair at offset s - t = k shares one number per head
        diagonal = out.diagonal(k, dim1=1, dim2=2)  # (H, T - |k|)
        end = module.bias[:, min(max(k, -M), M) + M]
        assert (diagonal == end[:, None]).all(), k
    # beyond max_distance: the end values, and only those
    t, s = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")  # query t, key s
    assert (out[:, s - t >= M] == module.bias[:, -1:]).all()
    assert (out[:, s - t <= -M] == module.bias[:, :1]).all()
    inside = (s - t).abs() < M
    assert len(set(out[0, inside].tolist())) == 2 * M - 1  # the inner offsets are distinct


@pytest.mark.parametrize("T, S, M", [(2, 3, 5), (4, 4, 2), (1, 6, 3), (6, 1, 3)])
def test_relative_bias_gradients_reach_only_the_offsets_used(T, S, M):
    H = 2
    module = random_bias_module(H, M, seed=2)
    upstream = randn(H, T, S, seed=3)
    (module(T, S) * upstream).sum().backward()
    expected = torch.zeros(H, 2 * M + 1, dtype=F64)  # the sum of upstream per clipped offset
    used = set()
    for t in range(T):
        for s in range(S):
            index = min(max(s - t, -M), M) + M
            expected[:, index] += upstream[:, t, s]
            used.add(index)
    torch.testing.assert_close(module.bias.grad, expected, rtol=0, atol=1e-14)
    unused = [c for c in range(2 * M + 1) if c not in used]
    assert (module.bias.grad[:, unused] == 0).all()
    assert (module.bias.grad[:, sorted(used)] != 0).all()


@pytest.mark.parametrize("T, offset, M", [(1, 0, 2), (1, 7, 3), (3, 4, 2), (5, 2, 10)],
                         ids=str)
def test_relative_bias_offset_gives_the_last_rows_of_the_full_bias(T, offset, M):
    """Queries at offset .. offset+T-1: the last T rows of the bias of offset + T positions,
    with S = offset + T keys by default; with an explicit S, entry [h, t, s] is the bias of
    s - (offset + t)."""
    module = random_bias_module(2, M, seed=T + offset)
    full = module(offset + T)  # (H, offset + T, offset + T)
    assert torch.equal(module(T, offset=offset), full[:, offset:])
    out = module(T, 4, offset=offset)
    for t in range(T):
        for s in range(4):
            index = min(max(s - (offset + t), -M), M) + M
            assert torch.equal(out[:, t, s], module.bias[:, index]), (t, s)


def test_relative_bias_offsets_with_an_offset_small_example():
    module = RelativePositionBias(1, 1)
    assert module.offsets(1, offset=2).tolist() == [[0, 0, 1]]  # query 2 against keys 0, 1, 2
    assert module.offsets(2, 2, offset=1).tolist() == [[0, 1], [0, 0]]
    with pytest.raises(ValueError, match=r"offset must be an int >= 0, got -1"):
        module(2, offset=-1)


@pytest.mark.parametrize("bad", BAD_SIZES)
def test_relative_bias_bad_arguments_are_rejected(bad):
    with pytest.raises(ValueError, match="n_heads must be a positive int"):
        RelativePositionBias(bad, 2)
    with pytest.raises(ValueError, match="max_distance must be a positive int"):
        RelativePositionBias(2, bad)
    module = RelativePositionBias(2, 2)
    with pytest.raises(ValueError, match="T must be a positive int"):
        module(bad, 3)
    if bad is not None:  # None means "S = T"
        with pytest.raises(ValueError, match="S must be a positive int"):
            module(3, bad)
