"""Tests of coursepkg.lm: batches, the training loop, evaluation in nats/token and sampling,
with toy models whose logits (and so whose losses) are known exactly; decoding with a
key/value cache (equal to recomputation for every positional encoding, within and beyond
block_size), top-p, and beam search (greedy at width 1, scores recomputed, exhaustive search on
a tiny model)."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from coursepkg.decoding import batched_beam_search
from coursepkg.feedforward import FeedForwardLM
from coursepkg.lm import (
    TrainHistory,
    beam_search,
    evaluate,
    generate,
    get_batch,
    next_token_probs,
    resolve_device,
    train,
)
from coursepkg.rnn import RNNLM
from coursepkg.transformer import TransformerLM


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- toy models
class Uniform(nn.Module):
    """Logits all zero: every token has probability 1/V, so the loss is ln V per token."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, idx):
        return torch.zeros(*idx.shape, self.vocab_size, dtype=torch.float64)


class Bigram(nn.Module):
    """Logits at t are ``table[idx[:, t]]``: the loss of each (previous, next) pair is known.

    Records every input it is called with, so tests can see the windows a caller used.
    """

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table.clone())
        self.calls: list[torch.Tensor] = []

    def forward(self, idx):
        self.calls.append(idx.clone())
        return self.table[idx]  # (B, T, V)


def bigram_loss(table: torch.Tensor, ids: torch.Tensor) -> float:
    """Mean -log p(ids[i+1] | ids[i]) over i, by hand."""
    logp = torch.log_softmax(table.double(), dim=-1)
    pairs = [-logp[a, b].item() for a, b in zip(ids[:-1].tolist(), ids[1:].tolist(), strict=True)]
    return math.fsum(pairs) / len(pairs)


def random_table(V: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(V, V, generator=gen(seed), dtype=torch.float64) * 2


def repetitive_ids(n: int = 400, period: str = "abcde") -> torch.Tensor:
    text = (period * (n // len(period) + 1))[:n]
    return torch.tensor([ord(ch) - ord("a") for ch in text])


# ----------------------------------------------------------------------------- get_batch
def test_get_batch_shapes_and_shift():
    ids = torch.arange(100) * 3  # the value tells the position
    x, y = get_batch(ids, 5, 8, generator=gen(0))
    assert x.shape == y.shape == (5, 8) and x.dtype == y.dtype == torch.int64
    assert torch.equal(y[:, :-1], x[:, 1:])  # y is x shifted by one
    assert torch.equal(y, x + 3)  # the next token of the text
    assert torch.equal(x, x[:, :1] + 3 * torch.arange(8))  # consecutive windows
    starts = x[:, 0] // 3
    assert ((starts >= 0) & (starts + 8 < 100)).all()


def test_get_batch_is_deterministic_for_a_seed():
    ids = torch.randint(0, 50, (300,), generator=gen(1))
    a = get_batch(ids, 4, 10, generator=gen(7))
    b = get_batch(ids, 4, 10, generator=gen(7))
    c = get_batch(ids, 4, 10, generator=gen(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_get_batch_reaches_both_ends_of_the_text():
    ids = torch.arange(12)
    g = gen(0)
    starts = torch.cat([get_batch(ids, 50, 4, generator=g)[0][:, 0] for _ in range(4)])
    # windows of 4 + 1 tokens in 12: starts 0..7, all of them drawn, none beyond
    assert set(starts.tolist()) == set(range(8))
    x, y = get_batch(torch.arange(5), 3, 4, generator=gen(0))  # exactly block_size + 1
    assert torch.equal(x, torch.arange(4).expand(3, 4))
    assert torch.equal(y, torch.arange(1, 5).expand(3, 4))


# ----------------------------------------------------------------------------- train
def tiny_lm(seed: int = 0, V: int = 5) -> RNNLM:
    torch.manual_seed(seed)
    return RNNLM(V, 8, 16, cell="lstm")


TRAIN_KW = {"batch_size": 4, "block_size": 8, "lr": 5e-2, "progress": False}


def test_train_history_and_loss_decreases():
    ids = repetitive_ids(400)
    model = tiny_lm()
    val = repetitive_ids(60)
    before = evaluate(model, val, block_size=8)
    history = train(model, ids, val, steps=25, eval_every=10, **TRAIN_KW)
    assert isinstance(history, TrainHistory)
    assert history.steps == list(range(1, 26))
    assert len(history.train_loss) == 25
    assert history.val_steps == [10, 20, 25]  # every eval_every steps and at the end
    assert len(history.val_loss) == 3
    assert history.tokens == 25 * 4 * 8
    assert history.seconds > 0 and history.tokens_per_second > 0
    assert all(math.isfinite(v) for v in history.train_loss + history.val_loss)
    # a period-5 text is easy: the loss falls far below ln 5 = 1.61
    # (measured: train 1.59 at step 1, 0.02 at step 25; val 0.10, 0.020, 0.017)
    assert history.train_loss[0] > 1.4
    assert max(history.train_loss[-5:]) < 0.15
    assert history.val_loss[-1] < 0.1 and before > 1.4
    assert history.val_loss == sorted(history.val_loss, reverse=True)
    assert not model.training  # left in eval mode
    # the last val_loss is the trained model's loss on the first eval_tokens + 1 tokens
    assert history.val_loss[-1] == pytest.approx(evaluate(model, val, block_size=8), rel=1e-6)


def test_train_val_steps_without_eval_every_and_without_val():
    ids = repetitive_ids(100)
    h = train(tiny_lm(), ids, repetitive_ids(30), steps=4, **TRAIN_KW)
    assert h.val_steps == [4] and len(h.val_loss) == 1
    h = train(tiny_lm(), ids, repetitive_ids(30), steps=4, eval_every=2, **TRAIN_KW)
    assert h.val_steps == [2, 4] and len(h.val_loss) == 2  # the end is not evaluated twice
    h = train(tiny_lm(), ids, None, steps=3, eval_every=1, **TRAIN_KW)
    assert h.val_steps == [] and h.val_loss == [] and len(h.train_loss) == 3


def test_train_eval_tokens_limits_the_evaluation():
    table = random_table(5, seed=3)
    model = Bigram(table)
    val = torch.randint(0, 5, (200,), generator=gen(2))
    train(model, repetitive_ids(50), val, steps=1, eval_tokens=30, lr=0.0,
          batch_size=2, block_size=4, progress=False)
    eval_calls = model.calls[1:]  # the first call is the training step
    seen = torch.cat([c.reshape(-1) for c in eval_calls])
    assert seen.numel() == 30  # 31 tokens read, 30 predicted
    assert torch.equal(seen, val[:30])


def test_train_same_seed_same_history():
    ids, val = repetitive_ids(200), repetitive_ids(40)
    a = train(tiny_lm(), ids, val, steps=6, eval_every=3, seed=5, **TRAIN_KW)
    b = train(tiny_lm(), ids, val, steps=6, eval_every=3, seed=5, **TRAIN_KW)
    c = train(tiny_lm(), torch.randint(0, 5, (200,), generator=gen(0)), val, steps=6,
              seed=5, **TRAIN_KW)
    d = train(tiny_lm(), torch.randint(0, 5, (200,), generator=gen(0)), val, steps=6,
              seed=6, **TRAIN_KW)
    assert a.train_loss == b.train_loss and a.val_loss == b.val_loss
    assert a.steps == b.steps and a.val_steps == b.val_steps
    assert c.train_loss != d.train_loss  # another seed, other batches


def test_train_draws_its_batches_with_get_batch_and_the_seed():
    model = Bigram(random_table(5))
    ids = torch.randint(0, 5, (100,), generator=gen(3))
    train(model, ids, steps=3, seed=11, batch_size=2, block_size=6, lr=1e-3, progress=False)
    g = gen(11)
    expected = [get_batch(ids, 2, 6, generator=g)[0] for _ in range(3)]
    assert len(model.calls) == 3
    for seen, x in zip(model.calls, expected, strict=True):
        assert torch.equal(seen, x)


def test_train_learns_the_bigram_table_of_its_text():
    """On a text of one repeated bigram chain, a bigram model learns the chain."""
    model = Bigram(torch.zeros(4, 4, dtype=torch.float64))
    ids = torch.tensor([0, 1, 2, 3] * 30)
    train(model, ids, steps=60, batch_size=4, block_size=5, lr=0.2, grad_clip=None,
          progress=False)
    assert torch.equal(model.table.argmax(-1), torch.tensor([1, 2, 3, 0]))


def test_progress_bar_only_when_asked(capsys):
    ids = repetitive_ids(60)
    history = train(tiny_lm(), ids, steps=2, **{**TRAIN_KW, "progress": False})
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
    assert len(history.train_loss) == 2
    train(tiny_lm(), ids, steps=2, **{**TRAIN_KW, "progress": True})
    assert "training" in capsys.readouterr().err


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"steps": 0}, "steps, batch_size and block_size must be positive"),
        ({"batch_size": 0}, "steps, batch_size and block_size must be positive"),
        ({"block_size": -1}, "steps, batch_size and block_size must be positive"),
        ({"train_ids": torch.arange(8)}, r"train_ids has 8 tokens, fewer than block_size \+ 1 = 9"),
        ({"val_ids": torch.arange(5)}, r"val_ids has 5 tokens"),
        ({"train_ids": torch.zeros(2, 50, dtype=torch.long)}, "train_ids must be a 1-D tensor"),
        ({"train_ids": torch.zeros(50)}, r"train_ids must be .*token ids.*float32"),
        ({"val_ids": torch.zeros(50)}, r"val_ids must be .*token ids"),
    ],
)
def test_train_rejects_bad_inputs(changes, match):
    kwargs = {"train_ids": repetitive_ids(50), "val_ids": None, "steps": 2,
              "batch_size": 2, "block_size": 8, "lr": 1e-2, "progress": False, **changes}
    with pytest.raises(ValueError, match=match):
        train(tiny_lm(), **kwargs)


# ----------------------------------------------------------------------------- evaluate
@pytest.mark.parametrize("V", [2, 7, 65])
def test_evaluate_uniform_model_gives_ln_v(V):
    ids = torch.randint(0, V, (103,), generator=gen(V))
    for block_size, batch_size in [(1, 1), (8, 3), (10, 64), (500, 2)]:
        loss = evaluate(Uniform(V), ids, block_size=block_size, batch_size=batch_size)
        assert loss == pytest.approx(math.log(V), rel=1e-12)


@pytest.mark.parametrize("N", [2, 3, 17, 40, 41])
@pytest.mark.parametrize("block_size", [1, 3, 8, 39, 40, 64])
@pytest.mark.parametrize("batch_size", [1, 2, 64])
def test_evaluate_predicts_every_token_after_the_first_exactly_once(N, block_size, batch_size):
    V = 6
    table = random_table(V, seed=1)
    ids = torch.randint(0, V, (N,), generator=gen(N))
    model = Bigram(table)
    loss = evaluate(model, ids, block_size=block_size, batch_size=batch_size)
    assert loss == pytest.approx(bigram_loss(table, ids), rel=1e-12)
    # the windows read, in order, are ids[:-1], each at most block_size long
    assert all(c.shape[1] <= block_size and c.shape[0] <= batch_size for c in model.calls)
    assert torch.equal(torch.cat([c.reshape(-1) for c in model.calls]), ids[:-1])


def test_evaluate_by_hand():
    # p(next | prev) from a 2-token table: after 0, p(1) = 3/4; after 1, p(0) = p(1) = 1/2
    table = torch.tensor([[0.0, math.log(3)], [0.0, 0.0]], dtype=torch.float64)
    ids = torch.tensor([0, 1, 1, 0, 1])  # pairs 01 11 10 01
    expected = (-math.log(3 / 4) * 2 - math.log(1 / 2) * 2) / 4
    assert evaluate(Bigram(table), ids, block_size=3) == pytest.approx(expected, rel=1e-12)


def test_evaluate_context_is_limited_to_block_size():
    """A model that only gets its loss right with a long context: block_size matters."""

    class CountsContext(nn.Module):
        # predicts token 1 with certainty at positions t >= 2 of its window, else uniform
        def forward(self, idx):
            B, T = idx.shape
            logits = torch.zeros(B, T, 2, dtype=torch.float64)
            logits[:, 2:, 1] = 100.0
            return logits

    ids = torch.ones(13, dtype=torch.long)  # 12 predicted tokens, all 1
    # block_size 3: windows predict 3 tokens each, the first two uniformly (ln 2)
    assert evaluate(CountsContext(), ids, block_size=3) == pytest.approx(
        8 * math.log(2) / 12, rel=1e-9)
    assert evaluate(CountsContext(), ids, block_size=12) == pytest.approx(
        2 * math.log(2) / 12, rel=1e-9)


def test_evaluate_restores_the_mode_and_accepts_int32():
    model = Bigram(random_table(4))
    ids = torch.randint(0, 4, (30,), generator=gen(0))
    model.train()
    a = evaluate(model, ids, block_size=5)
    assert model.training
    model.eval()
    b = evaluate(model, ids.int(), block_size=5)
    assert not model.training and a == pytest.approx(b, rel=1e-12)


def test_evaluate_rejects_bad_ids():
    with pytest.raises(ValueError, match="1-D tensor of token ids"):
        evaluate(Uniform(3), torch.zeros(2, 5, dtype=torch.long), block_size=4)
    with pytest.raises(ValueError, match="ids has 1 tokens"):
        evaluate(Uniform(3), torch.zeros(1, dtype=torch.long), block_size=4)


@pytest.mark.parametrize("kwargs, name", [({"block_size": 0}, "block_size"),
                                          ({"block_size": -2}, "block_size"),
                                          ({"batch_size": 0}, "batch_size")])
def test_evaluate_rejects_bad_sizes(kwargs, name):
    # currently: block_size=0 and batch_size=0 raise range()'s "arg 3 must not be zero",
    # block_size < 0 a ZeroDivisionError (no window is read)
    kwargs = {"block_size": 4, **kwargs}
    with pytest.raises(ValueError, match=name):
        evaluate(Uniform(3), torch.zeros(10, dtype=torch.long), **kwargs)


# ----------------------------------------------------------------------------- generate
def chain_table(V: int) -> torch.Tensor:
    """After token i, token (i + 1) % V is by far the most likely."""
    table = torch.zeros(V, V, dtype=torch.float64)
    table[torch.arange(V), (torch.arange(V) + 1) % V] = 5.0
    return table


def greedy_by_hand(table, prompt, n):
    out = prompt.clone()
    for _ in range(n):
        out = torch.cat([out, table[out[:, -1]].argmax(-1, keepdim=True)], dim=1)
    return out


def test_generate_shape_and_prompt_kept():
    model = Bigram(random_table(7))
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = generate(model, prompt, 5, generator=gen(0))
    assert out.shape == (2, 8) and out.dtype == torch.int64
    assert torch.equal(out[:, :3], prompt)
    assert ((out >= 0) & (out < 7)).all()
    assert torch.equal(generate(model, prompt, 0), prompt)


def test_generate_temperature_zero_is_greedy_and_deterministic():
    model = Bigram(chain_table(5))
    out = generate(model, torch.tensor([[0], [3]]), 7, temperature=0)
    assert out.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2], [3, 4, 0, 1, 2, 3, 4, 0]]
    table = random_table(9, seed=4)
    prompt = torch.tensor([[2, 5], [7, 7], [0, 1]])
    a = generate(Bigram(table), prompt, 12, temperature=0.0)
    torch.manual_seed(123)  # the global RNG plays no part
    b = generate(Bigram(table), prompt, 12, temperature=0.0)
    assert torch.equal(a, b)
    assert torch.equal(a, greedy_by_hand(table, prompt, 12))


def test_generate_top_k_one_equals_greedy():
    table = random_table(9, seed=5)
    prompt = torch.tensor([[3], [8]])
    greedy = greedy_by_hand(table, prompt, 10)
    assert torch.equal(generate(Bigram(table), prompt, 10, top_k=1, generator=gen(0)), greedy)
    assert torch.equal(generate(Bigram(table), prompt, 10, top_k=1, temperature=3.0,
                                generator=gen(1)), greedy)


def test_generate_top_k_samples_only_among_the_k_best():
    table = random_table(10, seed=6)
    top3 = table.topk(3, dim=-1).indices  # (V, 3)
    out = generate(Bigram(table), torch.zeros(50, 1, dtype=torch.long), 20, top_k=3,
                   temperature=2.0, generator=gen(0))
    for prev, nxt in zip(out[:, :-1].reshape(-1).tolist(), out[:, 1:].reshape(-1).tolist(),
                         strict=True):
        assert nxt in top3[prev].tolist()
    assert len(set(out[:, 1].tolist())) == 3  # and all three do get sampled


def test_generate_seeded_generator_is_reproducible():
    model = Bigram(torch.zeros(50, 50, dtype=torch.float64))  # uniform
    prompt = torch.zeros(2, 1, dtype=torch.long)
    a = generate(model, prompt, 30, generator=gen(42))
    b = generate(model, prompt, 30, generator=gen(42))
    c = generate(model, prompt, 30, generator=gen(43))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_generate_temperature_rescales_the_distribution():
    # p = (1/4, 3/4); at temperature 2, p is proportional to (1, sqrt 3)
    table = torch.tensor([[0.0, math.log(3)]] * 2, dtype=torch.float64)
    prompt = torch.zeros(20_000, 1, dtype=torch.long)
    share = generate(Bigram(table), prompt, 1, generator=gen(0))[:, 1].double().mean().item()
    assert share == pytest.approx(0.75, abs=0.015)
    share_t2 = generate(Bigram(table), prompt, 1, temperature=2.0,
                        generator=gen(0))[:, 1].double().mean().item()
    assert share_t2 == pytest.approx(math.sqrt(3) / (1 + math.sqrt(3)), abs=0.015)


def test_generate_block_size_crops_the_context():
    model = Bigram(chain_table(6))
    generate(model, torch.zeros(1, 3, dtype=torch.long), 5, block_size=4, temperature=0)
    assert [c.shape[1] for c in model.calls] == [3, 4, 4, 4, 4]
    model.calls.clear()
    generate(model, torch.zeros(1, 3, dtype=torch.long), 4, temperature=0)
    assert [c.shape[1] for c in model.calls] == [3, 4, 5, 6]  # no limit: everything
    # the model's own block_size attribute is the default; an explicit one wins
    model.calls.clear()
    model.block_size = 2
    out = generate(model, torch.tensor([[1, 2, 3]]), 3, temperature=0)
    assert [c.shape[1] for c in model.calls] == [2, 2, 2]
    assert [c[0].tolist() for c in model.calls] == [[2, 3], [3, 4], [4, 5]]  # the latest tokens
    assert out.tolist() == [[1, 2, 3, 4, 5, 0]]
    model.calls.clear()
    generate(model, torch.tensor([[1, 2, 3]]), 2, temperature=0, block_size=5)
    assert [c.shape[1] for c in model.calls] == [3, 4]


def test_generate_restores_the_mode():
    model = Bigram(chain_table(3))
    model.train()
    generate(model, torch.zeros(1, 1, dtype=torch.long), 2, generator=gen(0))
    assert model.training
    model.eval()
    generate(model, torch.zeros(1, 1, dtype=torch.long), 2, generator=gen(0))
    assert not model.training


def test_generate_with_an_rnnlm():
    torch.manual_seed(0)
    lm = RNNLM(11, 8, 16)
    out = generate(lm, torch.tensor([[1, 2]]), 6, temperature=0)
    assert out.shape == (1, 8)
    # greedy: each new token is the argmax of the model's logits on the sequence so far
    for t in range(2, 8):
        assert out[0, t].item() == lm(out[:, :t])[0, -1].argmax().item()


def test_generate_rejects_bad_arguments():
    model = Bigram(chain_table(3))
    with pytest.raises(ValueError, match=r"temperature must be >= 0, got -0.5"):
        generate(model, torch.zeros(1, 1, dtype=torch.long), 2, temperature=-0.5)
    with pytest.raises(ValueError, match=r"idx must be \(B, T\) with T >= 1, got \(4,\)"):
        generate(model, torch.zeros(4, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=r"idx must be \(B, T\).*\(2, 0\)"):
        generate(model, torch.zeros(2, 0, dtype=torch.long), 2)


@pytest.mark.parametrize("top_k", [0, -1])
def test_generate_rejects_a_bad_top_k(top_k):
    # currently: torch.topk raises a RuntimeError (k=-1) or the mask fails to broadcast (k=0)
    model = Bigram(chain_table(3))
    with pytest.raises(ValueError, match="top_k"):
        generate(model, torch.zeros(1, 1, dtype=torch.long), 2, top_k=top_k)


# ----------------------------------------------------------------------------- next_token_probs
def test_next_token_probs_divides_by_the_temperature_then_keeps_the_top_k():
    logits = torch.tensor([[1.5, 0.0, 1.0, -0.5], [0.0, 0.0, 3.0, 1.0]], dtype=torch.float64)
    assert torch.equal(next_token_probs(logits), logits.softmax(-1))
    assert torch.allclose(next_token_probs(logits, temperature=0.5), (logits / 0.5).softmax(-1))
    top2 = next_token_probs(logits, temperature=2.0, top_k=2)
    first = (torch.tensor([1.5, 1.0], dtype=torch.float64) / 2.0).softmax(-1)
    second = (torch.tensor([3.0, 1.0], dtype=torch.float64) / 2.0).softmax(-1)
    assert torch.allclose(top2, torch.tensor([[first[0], 0.0, first[1], 0.0],
                                              [0.0, 0.0, second[0], second[1]]],
                                             dtype=torch.float64))
    assert torch.equal(next_token_probs(logits, top_k=99), logits.softmax(-1))  # k > V: all


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_next_token_probs_at_temperature_zero_is_a_one_hot_on_the_first_best(dtype):
    logits = torch.tensor([[0.0, 2.0, 2.0, 1.0], [5.0, -1.0, 0.0, 4.0]], dtype=dtype)
    probs = next_token_probs(logits, temperature=0.0, top_k=3)
    assert probs.dtype == dtype
    assert probs.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.7, 3), (1.6, 2), (0.0, None)])
def test_generate_draws_each_token_from_next_token_probs(temperature, top_k):
    table = random_table(6, seed=8)
    prompt = torch.tensor([[2], [5], [0]])
    out = generate(Bigram(table), prompt, 8, temperature=temperature, top_k=top_k,
                   generator=gen(3))
    generator, idx = gen(3), prompt
    for _ in range(8):  # the same loop by hand, one draw per token from the same generator
        probs = next_token_probs(table[idx[:, -1]], temperature=temperature, top_k=top_k)
        nxt = (probs.argmax(-1, keepdim=True) if temperature == 0
               else torch.multinomial(probs, 1, generator=generator))
        idx = torch.cat([idx, nxt], dim=1)
    assert torch.equal(out, idx)


def test_next_token_probs_rejects_bad_arguments():
    logits = torch.zeros(1, 3)
    with pytest.raises(ValueError, match=r"temperature must be >= 0, got -1.0"):
        next_token_probs(logits, temperature=-1.0)
    with pytest.raises(ValueError, match=r"top_k must be >= 1 or None, got 0"):
        next_token_probs(logits, top_k=0)


def test_cross_entropy_of_toy_models_agrees_with_torch():
    """The hand-computed bigram loss used above is torch's cross-entropy."""
    table = random_table(5, seed=9)
    ids = torch.randint(0, 5, (40,), generator=gen(9))
    logits = table[ids[:-1]]
    assert bigram_loss(table, ids) == pytest.approx(
        F.cross_entropy(logits, ids[1:]).item(), rel=1e-12)


# ----------------------------------------------------------------------------- every LM
POSITIONS = ["learned", "sinusoidal", "rope", "relative", "none"]
LANGUAGE_MODELS = {
    "feedforward": lambda V: FeedForwardLM(V, 3, 8, 32),
    "rnnlm-lstm": lambda V: RNNLM(V, 16, 32, cell="lstm"),
    "rnnlm-rnn": lambda V: RNNLM(V, 16, 32, cell="rnn"),
    **{f"transformer-{pos}": (lambda V, pos=pos: TransformerLM(V, 8, 16, 2, 1, pos=pos))
       for pos in POSITIONS},
}


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_every_language_model_of_the_course_trains_evaluates_and_generates(name):
    """One training loop, one evaluation and one sampler for every neural LM of the course."""
    torch.manual_seed(0)
    model = LANGUAGE_MODELS[name](5)
    ids, val = repetitive_ids(400), repetitive_ids(60)
    before = evaluate(model, val, block_size=8)
    history = train(model, ids, val, steps=30, batch_size=8, block_size=8, lr=3e-2,
                    progress=False)
    # measured: 1.6-2.1 nats before, held-out 0.0007-0.0029 after 30 steps
    assert before > 1.4 and history.train_loss[0] > 1.4
    assert history.val_loss[-1] < 0.05
    assert history.val_loss[-1] == pytest.approx(evaluate(model, val, block_size=8), rel=1e-6)
    assert not model.training
    out = generate(model, torch.tensor([[0, 1, 2], [4, 0, 1]]), 12, temperature=0)
    assert out.tolist() == [([0, 1, 2, 3, 4] * 3)[:15], ([4, 0, 1, 2, 3] * 3)[:15]]
    a = generate(model, torch.tensor([[0]]), 10, generator=gen(1))
    assert torch.equal(a, generate(model, torch.tensor([[0]]), 10, generator=gen(1)))


@pytest.mark.parametrize("pos", POSITIONS)
def test_generate_crops_a_long_prompt_to_the_transformer_s_block_size(pos):
    """A prompt longer than block_size works for every encoding, "learned" included: the
    sampler feeds the model its last block_size tokens."""
    torch.manual_seed(0)
    lm = TransformerLM(11, 6, 16, 2, 1, pos=pos).eval()
    prompt = torch.randint(0, 11, (2, 15), generator=gen(0))
    lengths = []
    handle = lm.register_forward_pre_hook(lambda module, args: lengths.append(args[0].shape[1]))
    out = generate(lm, prompt, 5, temperature=0)
    handle.remove()
    assert lengths == [6] * 5
    assert out.shape == (2, 20) and torch.equal(out[:, :15], prompt)
    with torch.no_grad():
        for t in range(15, 20):
            assert torch.equal(out[:, t], lm(out[:, t - 6 : t])[:, -1].argmax(-1))


def test_evaluate_a_transformer_lm_by_hand():
    """Consecutive windows of block_size + 1 tokens overlapping by one, the last shorter."""
    torch.manual_seed(0)
    lm = TransformerLM(7, 5, 16, 2, 1, pos="learned").double().eval()
    ids = torch.randint(0, 7, (23,), generator=gen(0))
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, 22, 5):  # windows 0-5, 5-10, 10-15, 15-20, 20-22
            window = ids[start : start + 6]
            logits = lm(window[None, :-1])[0]
            total += F.cross_entropy(logits, window[1:], reduction="sum").item()
            count += len(window) - 1
    assert count == 22
    assert evaluate(lm, ids, block_size=5, batch_size=2) == pytest.approx(total / count,
                                                                          rel=1e-12)


def test_a_learned_position_lm_refuses_windows_longer_than_its_block_size():
    torch.manual_seed(0)
    lm = TransformerLM(5, 8, 16, 2, 1, pos="learned")
    with pytest.raises(ValueError, match="max_len=8"):
        train(lm, repetitive_ids(100), steps=1, batch_size=2, block_size=9, lr=1e-3,
              progress=False)
    rope = TransformerLM(5, 8, 16, 2, 1, pos="rope")  # the other encodings read longer windows
    history = train(rope, repetitive_ids(100), steps=1, batch_size=2, block_size=9, lr=1e-3,
                    progress=False)
    assert len(history.train_loss) == 1 and math.isfinite(history.train_loss[0])


@pytest.mark.parametrize("block_size", [0, -3])
def test_generate_rejects_a_block_size_below_one(block_size):
    model = RNNLM(5, d_embed=4, d_hidden=6)
    with pytest.raises(ValueError, match=rf"block_size must be >= 1 or None, got {block_size}"):
        generate(model, torch.zeros(1, 3, dtype=torch.long), 2, block_size=block_size)


# ----------------------------------------------------------------------------- the cache
class Recording(nn.Module):
    """A language model that notes the logits it gives for the next token, and how it was
    called: ``("forward", T)`` for a recomputation over T tokens, ``("step", T, P)`` for T new
    tokens after P cached ones."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm
        self.block_size = lm.block_size
        self.logits: list[torch.Tensor] = []
        self.calls: list[tuple] = []

    def forward(self, idx):
        out = self.lm(idx)
        self.logits.append(out[:, -1])
        self.calls.append(("forward", idx.shape[1]))
        return out

    def decode_step(self, idx, cache=None):
        out, new_cache = self.lm.decode_step(idx, cache)
        self.logits.append(out[:, -1])
        self.calls.append(("step", idx.shape[1], 0 if cache is None else cache.length))
        return out, new_cache


def small_transformer(pos: str, *, block_size: int = 9, norm_first: bool = True,
                      fused: bool = False, seed: int = 0, V: int = 11) -> TransformerLM:
    """A tiny float64 TransformerLM in eval mode; relative biases random (not 0)."""
    torch.manual_seed(seed)
    model = TransformerLM(V, block_size, 16, 2, 2, pos=pos, norm_first=norm_first,
                          fused=fused).double().eval()
    if model.relative is not None:
        with torch.no_grad():
            for table in model.relative:
                table.bias.normal_(generator=gen(seed + 1))
    return model


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("norm_first, fused", [(True, False), (False, False), (True, True)],
                         ids=["pre-norm", "post-norm", "fused"])
def test_cached_generation_equals_recomputation_within_and_beyond_block_size(
        pos, norm_first, fused):
    """The same logits (float64, 1e-10) at every step and the same samples under the same
    generator; within block_size the cached model reads one new token per step, beyond it the
    window is computed again, as without a cache."""
    lm_ = small_transformer(pos, norm_first=norm_first, fused=fused)
    prompt = torch.randint(0, 11, (2, 3), generator=gen(1))
    runs = {}
    for use_cache in (True, False):
        model = Recording(lm_)
        out = generate(model, prompt, 14, generator=gen(5), use_cache=use_cache)
        runs[use_cache] = (out, model)
    (cached, with_cache), (plain, without) = runs[True], runs[False]
    assert torch.equal(cached, plain)
    assert len(with_cache.logits) == len(without.logits) == 14
    for a, b in zip(with_cache.logits, without.logits, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    # 3 prompt tokens, then one token per step until the window of 9 is full, then windows
    assert with_cache.calls == ([("step", 3, 0)] + [("step", 1, P) for P in range(3, 9)]
                                + [("forward", 9)] * 7)
    assert without.calls == [("forward", min(T, 9)) for T in range(3, 17)]


@pytest.mark.parametrize("pos", POSITIONS)
def test_cached_generation_gives_the_same_samples_in_float32(pos):
    torch.manual_seed(0)
    lm_ = TransformerLM(11, 12, 16, 2, 2, pos=pos).eval()
    prompt = torch.randint(0, 11, (3, 2), generator=gen(2))
    a = generate(lm_, prompt, 20, temperature=1.3, generator=gen(7))
    b = generate(lm_, prompt, 20, temperature=1.3, generator=gen(7), use_cache=False)
    assert torch.equal(a, b)


def test_a_longer_block_size_than_the_model_s_keeps_the_cache_for_rope():
    """generate(block_size=...) sets the window; a RoPE model reads windows longer than its
    training length, cached as far as the window goes."""
    model = Recording(small_transformer("rope", block_size=4))
    out = generate(model, torch.tensor([[1, 2]]), 10, temperature=0, block_size=20)
    assert [c[0] for c in model.calls] == ["step"] * 10
    plain = generate(small_transformer("rope", block_size=4), torch.tensor([[1, 2]]), 10,
                     temperature=0, block_size=20, use_cache=False)
    assert torch.equal(out, plain)


def test_a_prompt_longer_than_block_size_is_cropped_with_or_without_cache():
    lm_ = small_transformer("learned", block_size=6)
    prompt = torch.randint(0, 11, (2, 15), generator=gen(0))
    a = generate(lm_, prompt, 4, generator=gen(3))
    b = generate(lm_, prompt, 4, generator=gen(3), use_cache=False)
    assert torch.equal(a, b) and torch.equal(a[:, :15], prompt)


@pytest.mark.parametrize("cell", ["lstm", "rnn"])
def test_a_model_without_a_cache_is_recomputed_whatever_use_cache_says(cell):
    torch.manual_seed(0)
    model = RNNLM(7, 8, 16, cell=cell).double()
    prompt = torch.tensor([[1, 2, 3]])
    a = generate(model, prompt, 9, generator=gen(4))
    b = generate(model, prompt, 9, generator=gen(4), use_cache=False)
    assert torch.equal(a, b)
    table = random_table(6, seed=2)  # and a bigram table, with and without block_size
    for block_size in (None, 2):
        a = generate(Bigram(table), prompt % 6, 7, generator=gen(1), block_size=block_size)
        b = generate(Bigram(table), prompt % 6, 7, generator=gen(1), block_size=block_size,
                     use_cache=False)
        assert torch.equal(a, b)


def test_generate_restores_the_mode_with_the_cache():
    lm_ = small_transformer("rope")
    lm_.train()
    generate(lm_, torch.tensor([[1]]), 3)
    assert lm_.training


# ----------------------------------------------------------------------------- top-p
def test_top_p_keeps_the_fewest_most_likely_tokens_that_reach_p():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]], dtype=torch.float64)
    logits = probs.log()
    # ranked: 0.5 (id 1), 0.3 (id 3), 0.15 (id 0), 0.05 (id 2); the mass above: 0, .5, .8, .95
    for top_p, kept in [(0.3, [1]), (0.5, [1]), (0.51, [1, 3]), (0.79, [1, 3]),
                        (0.81, [1, 3, 0]), (0.96, [0, 1, 2, 3])]:
        out = next_token_probs(logits, top_p=top_p)
        expected = torch.zeros_like(probs)
        expected[0, kept] = probs[0, kept] / probs[0, kept].sum()
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_top_p_ranks_equal_probabilities_by_token_id():
    logits = torch.zeros(1, 4, dtype=torch.float64)  # four tokens of 1/4
    assert next_token_probs(logits, top_p=0.5).tolist() == [[0.5, 0.5, 0.0, 0.0]]
    assert next_token_probs(logits, top_p=0.1).tolist() == [[1.0, 0.0, 0.0, 0.0]]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(2, 12), st.floats(0.01, 1.0), st.floats(0.2, 3.0),
       st.one_of(st.none(), st.integers(1, 12)), st.integers(0, 10_000))
def test_top_p_properties(V, top_p, temperature, top_k, seed):
    logits = torch.randn(3, V, generator=gen(seed), dtype=torch.float64) * 3
    out = next_token_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    torch.testing.assert_close(out.sum(-1), torch.ones(3, dtype=torch.float64))
    # the order: temperature, then top-k, then top-p on what top-k left
    before = next_token_probs(logits, temperature=temperature, top_k=top_k)
    assert torch.equal(next_token_probs(logits / temperature, top_k=top_k, top_p=top_p), out)
    for row, full in zip(out, before, strict=True):
        kept = row > 0
        assert kept.sum() >= 1 and kept[full.argmax()]  # the best token always stays
        assert (full[kept] > 0).all()  # top-p only removes
        torch.testing.assert_close(row[kept], full[kept] / full[kept].sum())  # renormalised
        mass = full[kept].sum().item()
        assert mass >= top_p - 1e-12  # the nucleus reaches p ...
        smallest = full[kept].min().item()
        assert mass - smallest < top_p + 1e-12  # ... and is the fewest tokens that do
        assert (full[~kept] <= smallest).all()  # the most likely ones


def test_top_p_one_is_plain_sampling_under_the_same_generator():
    logits = torch.randn(4, 9, generator=gen(0), dtype=torch.float64)
    assert torch.equal(next_token_probs(logits, top_p=1.0), next_token_probs(logits))
    assert torch.equal(next_token_probs(logits, temperature=0.7, top_k=4, top_p=1.0),
                       next_token_probs(logits, temperature=0.7, top_k=4))
    model = small_transformer("rope")
    prompt = torch.tensor([[1, 2], [3, 4]])
    assert torch.equal(generate(model, prompt, 12, top_p=1.0, generator=gen(2)),
                       generate(model, prompt, 12, generator=gen(2)))


def test_generate_with_top_p_samples_only_inside_the_nucleus():
    table = random_table(8, seed=6)
    prompt = torch.arange(8)[:, None]  # every previous token once
    model = Bigram(table)
    out = generate(model, prompt.repeat(20, 1), 1, top_p=0.6, temperature=0.8,
                   generator=gen(9))
    allowed = next_token_probs(table, temperature=0.8, top_p=0.6) > 0  # (V, V)
    assert allowed[out[:, 0], out[:, 1]].all()
    assert not allowed.all()  # the nucleus did remove tokens


@pytest.mark.parametrize("top_p", [0.0, -0.1, 1.5])
def test_top_p_outside_zero_one_is_refused(top_p):
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\] or None"):
        next_token_probs(torch.zeros(1, 3), top_p=top_p)
    with pytest.raises(ValueError, match="top_p"):
        generate(Bigram(chain_table(3)), torch.zeros(1, 1, dtype=torch.long), 2, top_p=top_p)


# ----------------------------------------------------------------------------- beam search
def sequence_logprob(model: nn.Module, seq: torch.Tensor, T: int, eos_id=None) -> tuple:
    """(sum of log p of seq[T:], number of tokens scored), each token's log-probability
    recomputed with forward on the window of at most the model's block_size tokens before it;
    with eos_id, the tokens after the first eos are not scored."""
    window = getattr(model, "block_size", None) or seq.shape[0]
    total, n = 0.0, 0
    for t in range(T, seq.shape[0]):
        with torch.no_grad():
            logits = model(seq[None, max(0, t - window) : t])[0, -1]  # (V,)
        total += torch.log_softmax(logits, dim=-1)[seq[t]].item()
        n += 1
        if eos_id is not None and seq[t].item() == eos_id:
            break
    return total, n


@pytest.mark.parametrize("pos", POSITIONS)
def test_beam_of_one_is_greedy_decoding(pos):
    model = small_transformer(pos, block_size=6)
    prompt = torch.tensor([[4, 1, 7]])
    greedy = generate(model, prompt, 8, temperature=0)  # beyond block_size too
    for use_cache in (True, False):
        sequences, scores = beam_search(model, prompt, 8, 1, use_cache=use_cache)
        assert sequences.shape == (1, 11) and scores.shape == (1,)
        assert torch.equal(sequences, greedy)
        assert scores[0].item() == pytest.approx(sequence_logprob(model, greedy[0], 3)[0],
                                                 abs=1e-10)


def test_beam_of_one_stops_at_eos_and_pads_with_it():
    model = Bigram(chain_table(5))  # 0 1 2 3 4 0 ... greedily
    sequences, scores = beam_search(model, torch.tensor([[1]]), 6, 1, eos_id=4)
    assert sequences.tolist() == [[1, 2, 3, 4, 4, 4, 4]]
    total, n = sequence_logprob(model, sequences[0], 1, eos_id=4)
    assert n == 3 and scores[0].item() == pytest.approx(total, abs=1e-12)


@pytest.mark.parametrize("pos", ["learned", "rope", "relative"])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
@pytest.mark.parametrize("eos_id", [None, 2])
def test_beam_scores_are_the_model_s_log_probabilities_recomputed(pos, length_penalty, eos_id):
    model = small_transformer(pos, block_size=8, V=5)
    prompt = torch.tensor([[3, 1]])
    sequences, scores = beam_search(model, prompt, 5, 4, length_penalty=length_penalty,
                                    eos_id=eos_id)
    assert sequences.shape == (4, 7) and torch.equal(sequences[:, :2], prompt.expand(4, 2))
    assert len({tuple(s) for s in sequences.tolist()}) == 4  # distinct hypotheses
    assert (scores[:-1] >= scores[1:]).all()  # best first
    for seq, score in zip(sequences, scores, strict=True):
        total, n = sequence_logprob(model, seq, 2, eos_id)
        assert score.item() == pytest.approx(total / n**length_penalty, abs=1e-10)
        if eos_id is not None and (seq[2:] == eos_id).any():  # padded with eos after it
            first = int((seq[2:] == eos_id).nonzero()[0]) + 2
            assert (seq[first:] == eos_id).all()
    uncached = beam_search(model, prompt, 5, 4, length_penalty=length_penalty, eos_id=eos_id,
                           use_cache=False)
    assert torch.equal(uncached[0], sequences)
    torch.testing.assert_close(uncached[1], scores, rtol=0, atol=1e-10)


def all_hypotheses(V: int, n: int, eos_id):
    """Every continuation of up to n tokens: those ending at eos (padded with it), and those
    of n tokens without eos."""
    out = []
    for length in range(1, n + 1):
        for tokens in itertools.product(range(V), repeat=length):
            if eos_id is None and length < n:
                continue
            if eos_id is not None and (eos_id in tokens[:-1]
                                       or (length < n and tokens[-1] != eos_id)):
                continue
            pad = [] if eos_id is None else [eos_id] * (n - length)
            out.append(list(tokens) + pad)
    return out


@pytest.mark.parametrize("eos_id", [None, 0])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_a_wide_beam_is_an_exhaustive_search_over_all_short_sequences(eos_id, length_penalty,
                                                                       pos):
    """With V = 3 and 3 new tokens, a beam of 27 keeps every hypothesis: it returns all of
    them (15 with an eos, 27 without), ranked as exhaustive search ranks them; a narrow beam
    returns hypotheses from the same list with the same scores."""
    model = small_transformer(pos, block_size=6, V=3, seed=3)
    prompt = torch.tensor([[1, 2]])
    exhaustive = []
    for tokens in all_hypotheses(3, 3, eos_id):
        seq = torch.tensor([1, 2, *tokens])
        total, n = sequence_logprob(model, seq, 2, eos_id)
        exhaustive.append((total / n**length_penalty, tokens))
    exhaustive.sort(key=lambda item: -item[0])
    assert len(exhaustive) == (27 if eos_id is None else 15)
    sequences, scores = beam_search(model, prompt, 3, 27, length_penalty=length_penalty,
                                    eos_id=eos_id)
    assert sequences[:, 2:].tolist() == [tokens for _, tokens in exhaustive]
    torch.testing.assert_close(scores, torch.tensor([s for s, _ in exhaustive],
                                                    dtype=torch.float64), rtol=0, atol=1e-10)
    narrow, narrow_scores = beam_search(model, prompt, 3, 2, length_penalty=length_penalty,
                                        eos_id=eos_id)
    found = dict((tuple(tokens), score) for score, tokens in exhaustive)
    for seq, score in zip(narrow[:, 2:].tolist(), narrow_scores.tolist(), strict=True):
        assert score == pytest.approx(found[tuple(seq)], abs=1e-10)
    assert narrow_scores[0] <= scores[0] + 1e-12  # never better than the best


def test_beam_search_finds_what_greedy_misses():
    """A bigram chain where the greedy first step leads to a poor second step."""
    table = torch.full((4, 4), -10.0, dtype=torch.float64)
    table[0, 1], table[0, 2] = 0.0, -0.2  # after 0: 1 is a little better than 2
    table[1, :] = 0.0  # after 1: anything, probability 1/4 each
    table[2, 3] = 0.0  # after 2: 3, almost surely
    model = Bigram(table)
    greedy = generate(model, torch.tensor([[0]]), 2, temperature=0)
    sequences, scores = beam_search(model, torch.tensor([[0]]), 2, 2)
    assert greedy[0, 1].item() == 1 and sequences[0].tolist() == [0, 2, 3]
    assert scores[0] > sequence_logprob(model, greedy[0], 1)[0]


def test_batched_beam_search_treats_each_row_on_its_own():
    model = small_transformer("rope", V=7)
    prompts = torch.tensor([[1, 2, 3], [6, 0, 5]])

    def step(seqs, parents):
        with torch.no_grad():
            return torch.log_softmax(model(seqs)[:, -1], dim=-1)

    sequences, scores = batched_beam_search(step, prompts, 4, 3, eos_id=0)
    assert sequences.shape == (2, 3, 7) and scores.shape == (2, 3)
    for b in range(2):
        alone, alone_scores = beam_search(model, prompts[b : b + 1], 4, 3, eos_id=0)
        assert torch.equal(sequences[b], alone)
        torch.testing.assert_close(scores[b], alone_scores, rtol=0, atol=1e-10)


def test_batched_beam_search_passes_the_parents_of_the_kept_hypotheses():
    seen = []

    def step(seqs, parents):
        seen.append((seqs.clone(), parents))
        return torch.log_softmax(torch.randn(seqs.shape[0], 3, generator=gen(len(seen))), -1)

    batched_beam_search(step, torch.tensor([[0], [1]]), 3, 2)
    assert seen[0][1] is None and seen[0][0].shape == (2, 1)
    for (before, _), (after, parents) in zip(seen, seen[1:], strict=False):
        assert after.shape[0] == 4 and parents.shape == (4,)
        assert torch.equal(after[:, :-1], before[parents])  # each extends its parent
        half = before.shape[0] // 2  # row b's hypotheses extend row b's sequences
        assert (parents[:2] < half).all() and (parents[2:] >= half).all()


def test_beam_search_restores_the_mode_and_refuses_bad_arguments():
    model = small_transformer("rope")
    model.train()
    beam_search(model, torch.tensor([[1]]), 2, 2)
    assert model.training
    with pytest.raises(ValueError, match=r"idx must be \(1, T\)"):
        beam_search(model, torch.tensor([[1], [2]]), 2, 2)
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
        beam_search(model, torch.tensor([[1]]), 2, 0)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        beam_search(model, torch.tensor([[1]]), 0, 2)
    with pytest.raises(ValueError, match=r"idx must be \(B, T\) with T >= 1"):
        beam_search(model, torch.zeros(1, 0, dtype=torch.long), 2, 2)
    with pytest.raises(ValueError, match=r"eos_id must be a token id in 0\.\.10, got 11"):
        beam_search(model, torch.tensor([[1]]), 2, 2, eos_id=11)


# ----------------------------------------------------------------------------- devices
class DeviceRecorder(nn.Module):
    """A bigram table that records the device of every input it is given."""

    def __init__(self, V: int = 5) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(V, V))
        self.devices: list[torch.device] = []

    def forward(self, idx):
        self.devices.append(idx.device)
        return self.table[idx]  # (B, T, V)


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_train_accepts_and_respects_a_device(device):
    model = DeviceRecorder()
    ids = repetitive_ids(100)
    history = train(model, ids, ids[:40], steps=3, batch_size=2, block_size=8, lr=0.1,
                    progress=False, device=device)
    assert model.devices and set(model.devices) == {torch.device("cpu")}  # train and eval
    assert model.table.device == torch.device("cpu")
    default = DeviceRecorder()
    same = train(default, ids, ids[:40], steps=3, batch_size=2, block_size=8, lr=0.1,
                 progress=False)
    if not torch.cuda.is_available():  # None is the CPU here: the same history
        assert history.train_loss == same.train_loss and history.val_loss == same.val_loss


def test_resolve_device_takes_cuda_only_when_there_is_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device() == torch.device("cpu") == resolve_device(None)
    with pytest.raises(ValueError, match=r"'cuda' does not exist: this machine has 0 CUDA"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device() == torch.device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("device, match", [
    ("cuda:99", "'cuda:99' does not exist"),
    ("gpu", "'gpu' is not a device"),
    (3.5, "is not a device"),
])
def test_train_names_a_device_that_does_not_exist(device, match):
    with pytest.raises(ValueError, match=match):
        train(DeviceRecorder(), repetitive_ids(50), steps=1, batch_size=2, block_size=4,
              lr=0.1, progress=False, device=device)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
@pytest.mark.parametrize("name", ["feedforward", "rnnlm-lstm", "transformer-rope"])
def test_train_and_evaluate_on_the_gpu(name):
    torch.manual_seed(0)
    model = LANGUAGE_MODELS[name](5)
    ids, val = repetitive_ids(400), repetitive_ids(60)  # on the CPU: train moves the batches
    history = train(model, ids, val, steps=30, batch_size=8, block_size=8, lr=3e-2,
                    progress=False)  # None: CUDA, since there is a GPU
    assert all(p.device.type == "cuda" for p in model.parameters())
    assert history.val_loss[-1] < 0.05
    assert evaluate(model, val, block_size=8) == pytest.approx(history.val_loss[-1], rel=1e-5)
    cpu = LANGUAGE_MODELS[name](5)
    cpu.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    assert evaluate(cpu, val, block_size=8) == pytest.approx(history.val_loss[-1], abs=1e-4)


def test_generate_and_beam_search_feed_the_prompt_where_the_model_is():
    model = DeviceRecorder()
    prompt = torch.tensor([[1, 2]])
    generate(model, prompt, 3, generator=torch.Generator().manual_seed(0))
    beam_search(model, prompt, 2, beam_size=2)
    assert model.devices and set(model.devices) == {model.table.device}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_generate_on_the_gpu_draws_the_cpu_generators_tokens():
    torch.manual_seed(0)
    model = LANGUAGE_MODELS["transformer-rope"](5).double()
    prompt = torch.tensor([[1, 2, 3]])
    on_cpu = generate(model, prompt, 8, generator=torch.Generator().manual_seed(3))
    on_gpu = generate(model.cuda(), prompt, 8, generator=torch.Generator().manual_seed(3))
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), on_cpu)
