"""Training, evaluating and sampling any language model of the course.

Every neural language model of the course (``RNNLM``, later ``TransformerLM``) has the same
interface, ``forward(idx (B, T)) -> logits (B, T, V)`` where position t predicts token t + 1,
so one training loop, one evaluation and one sampler serve them all (the n-gram models of
chapter 1 count instead of training, and have their own ``perplexity`` and ``generate``).

Text is a 1-D LongTensor of token ids. Training draws random windows of ``block_size + 1``
tokens: the first ``block_size`` are the input, the last ``block_size`` the targets.

Decoding: :func:`generate` samples (or decodes greedily) from :func:`next_token_probs`;
:func:`beam_search` keeps the best few hypotheses instead (the search itself,
``coursepkg.decoding.batched_beam_search``, takes any step function: the translation models use
it too). A model may
also decode incrementally: one with a method ``decode_step(idx (B, T), cache) -> (logits
(B, T, V), cache)`` (``TransformerLM`` has it) reads only the T new tokens after the
``cache.length`` it has read, and ``cache.select(rows)`` keeps some rows of its batch; the
decoders use it when asked to (``use_cache=True``) and recompute the whole context otherwise,
or for a model without it.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursepkg.decoding import batched_beam_search

__all__ = [
    "TrainHistory",
    "beam_search",
    "evaluate",
    "generate",
    "get_batch",
    "next_token_probs",
    "resolve_device",
    "train",
]


def _check_ids(name: str, ids: Tensor, block_size: int) -> Tensor:
    ids = torch.as_tensor(ids)
    if ids.dim() != 1 or ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"{name} must be a 1-D tensor of token ids, got dtype {ids.dtype} and shape "
            f"{tuple(ids.shape)}; encode the text first, e.g. torch.tensor(tok.encode(text))"
        )
    if ids.numel() < block_size + 1:
        raise ValueError(
            f"{name} has {ids.numel()} tokens, fewer than block_size + 1 = {block_size + 1}"
        )
    return ids.long()


def get_batch(
    ids: Tensor, batch_size: int, block_size: int, *, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Random training windows.

    Args:
        ids: (N,) the token ids of the text.
        batch_size: B windows.
        block_size: T tokens of input per window.
        generator: a seeded generator choosing the window starts.

    Returns:
        ``(x, y)``, each (B, T): ``y[b, t] = ids[start_b + t + 1]`` is the token after
        ``x[b, t] = ids[start_b + t]``.
    """
    starts = torch.randint(0, ids.numel() - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size + 1)
    windows = ids[starts[:, None] + offsets]  # (B, T + 1)
    return windows[:, :-1], windows[:, 1:]


@dataclass
class TrainHistory:
    """What :func:`train` measured: losses in nats per token."""

    steps: list[int] = field(default_factory=list)
    """the step number of each entry of ``train_loss``."""
    train_loss: list[float] = field(default_factory=list)
    """the training loss of each step's batch."""
    val_steps: list[int] = field(default_factory=list)
    """the steps after which the model was evaluated on ``val_ids``."""
    val_loss: list[float] = field(default_factory=list)
    """the held-out loss at each of ``val_steps``."""
    seconds: float = 0.0
    """wall-clock training time, evaluations excluded."""
    tokens: int = 0
    """the number of target tokens the model was trained on."""

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """The device to compute on: ``device``, checked, or by default CUDA if there is a GPU.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``, or None for the first
            CUDA device when ``torch.cuda.is_available()``, else the CPU.

    Returns:
        A ``torch.device``.

    Raises:
        ValueError: for a name torch does not know as a device, or a device this machine
            does not have (``"cuda"`` without a GPU, ``"cuda:3"`` with fewer GPUs).
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(
            f"{device!r} is not a device: use 'cpu', 'cuda', 'cuda:1' or None (CUDA when "
            "available, else the CPU)"
        ) from err
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise ValueError(
                f"device {str(device)!r} does not exist: this machine has {count} CUDA "
                "device(s); use device='cpu', or None to take a GPU only when there is one"
            )
    elif device.type != "cpu":
        try:
            torch.empty(0, device=device)
        except (RuntimeError, AssertionError) as err:
            raise ValueError(f"device {str(device)!r} is not available here: {err}") from None
    return device


def _model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (or buffer); the CPU if it has none."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device
    return torch.device("cpu")


def train(
    model: nn.Module,
    train_ids: Tensor,
    val_ids: Tensor | None = None,
    *,
    steps: int,
    batch_size: int,
    block_size: int,
    lr: float,
    weight_decay: float = 0.0,
    grad_clip: float | None = 1.0,
    warmup: int = 0,
    eval_every: int | None = None,
    eval_tokens: int = 20_000,
    seed: int = 0,
    progress: bool = True,
    device: str | torch.device | None = None,
) -> TrainHistory:
    """Train a language model with AdamW on random windows of the text.

    The learning rate warms up linearly for ``warmup`` steps, then decays to a tenth of
    ``lr`` on a cosine; gradients are clipped to norm ``grad_clip``. The model is moved to
    ``device`` (in place, as ``model.to`` does) and left there, in eval mode. The batches are
    drawn on the CPU, so a seed gives the same batches on every device, and each is moved to
    the device for its step; evaluations run there too.

    Args:
        model: any module with ``forward(idx (B, T)) -> logits (B, T, V)``.
        train_ids: (N,) token ids to train on.
        val_ids: (M,) held-out token ids, evaluated every ``eval_every`` steps and at the end.
        steps: optimiser steps.
        batch_size: B windows per step.
        block_size: T tokens per window.
        lr: peak learning rate.
        weight_decay: AdamW's decoupled weight decay.
        grad_clip: the largest gradient norm, or None for no clipping.
        warmup: linear warm-up steps.
        eval_every: evaluate on ``val_ids`` every this many steps (only at the end if None).
        eval_tokens: how many held-out tokens each evaluation reads (from the start).
        seed: seeds the batch order (the model's initialisation is the caller's).
        progress: show a tqdm progress bar with the running loss.
        device: where to train (see :func:`resolve_device`): None takes CUDA when a GPU is
            available, else the CPU.

    Returns:
        A :class:`TrainHistory`.

    Raises:
        ValueError: for bad sizes or ids, or a device that does not exist here.
    """
    from tqdm.auto import tqdm

    if steps < 1 or batch_size < 1 or block_size < 1:
        raise ValueError("steps, batch_size and block_size must be positive")
    train_ids = _check_ids("train_ids", train_ids, block_size).cpu()
    if val_ids is not None:
        val_ids = _check_ids("val_ids", val_ids, block_size)
    device = resolve_device(device)
    model.to(device)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def lr_at(step: int) -> float:
        if step < warmup:
            return lr * (step + 1) / warmup
        progress_ = (step - warmup) / max(1, steps - warmup)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress_)))

    history = TrainHistory()
    bar = tqdm(range(steps), desc="training", disable=not progress, leave=False)
    for step in bar:
        started = time.perf_counter()
        model.train()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        x, y = get_batch(train_ids, batch_size, block_size, generator=generator)
        x, y = x.to(device), y.to(device)  # (B, T) each
        logits = model(x)  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        history.seconds += time.perf_counter() - started
        history.tokens += y.numel()
        history.steps.append(step + 1)
        history.train_loss.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
        last = step + 1 == steps
        if val_ids is not None and (last or (eval_every and (step + 1) % eval_every == 0)):
            history.val_steps.append(step + 1)
            history.val_loss.append(
                evaluate(model, val_ids[: eval_tokens + 1], block_size=block_size)
            )
    bar.close()
    model.eval()
    return history


@torch.no_grad()
def evaluate(
    model: nn.Module, ids: Tensor, *, block_size: int, batch_size: int = 64
) -> float:
    """The mean loss in nats per token on a text, over consecutive windows.

    The text is cut into consecutive windows of ``block_size + 1`` tokens overlapping by
    one, so that every token after the first is predicted exactly once, from the tokens
    before it in its window (at most ``block_size`` of them). The windows go to the model's
    device (that of its first parameter), wherever ``ids`` are.

    Args:
        model: any module with ``forward(idx (B, T)) -> logits (B, T, V)``.
        ids: (N,) token ids.
        block_size: T, the longest context the model sees.
        batch_size: windows per forward pass (memory only; the result does not change).

    Returns:
        The mean cross-entropy (natural log) over the N - 1 predicted tokens.
    """
    if block_size < 1 or batch_size < 1:
        raise ValueError(
            f"block_size and batch_size must be positive, got {block_size} and {batch_size}"
        )
    ids = _check_ids("ids", ids, 1).to(_model_device(model))
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    starts = list(range(0, ids.numel() - 1, block_size))
    for first in range(0, len(starts), batch_size):
        chunk = starts[first : first + batch_size]
        full = [s for s in chunk if s + block_size + 1 <= ids.numel()]
        windows = [ids[s : s + block_size + 1] for s in full]
        if windows:
            w = torch.stack(windows)  # (B, T + 1)
            logits = model(w[:, :-1])  # (B, T, V)
            total += F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum"
            ).item()
            count += w[:, 1:].numel()
        for s in chunk[len(full):]:  # the last, shorter window
            w = ids[s:][None]  # (1, T' + 1)
            logits = model(w[:, :-1])
            total += F.cross_entropy(logits[0], w[0, 1:], reduction="sum").item()
            count += w.shape[1] - 1
    model.train(was_training)
    return total / count


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None = None) -> None:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p}")


def next_token_probs(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Tensor:
    """The distribution the next token is drawn from, given the logits of the last position.

    The steps, in this order: divide the logits by the temperature; keep the ``top_k`` largest
    (the others get probability 0); keep the *nucleus*, the fewest most likely tokens whose
    probabilities (after the first two steps) add up to at least ``top_p``; softmax over what
    is kept. Temperature 0 is greedy decoding: all the probability on the most likely token
    (the first of them if several tie), as a one-hot row. :func:`generate` draws every token
    from this distribution.

    Top-p keeps a token when the tokens ranked above it hold less than ``top_p`` of the
    probability, so the most likely token is always kept, and equal probabilities are ranked
    by token id (the smaller first). ``top_p=1.0`` (like None) keeps every token: the
    distribution is exactly the one without top-p.

    Args:
        logits: (B, V) the model's logits for the next token.
        temperature: divides the logits; below 1 sharpens, above 1 flattens, 0 is greedy.
        top_k: keep only the k most likely tokens (None: all of them).
        top_p: keep only the nucleus of probability ``top_p``, in (0, 1] (None: all).

    Returns:
        (B, V) probabilities, each row summing to 1, in the dtype of ``logits``.

    Raises:
        ValueError: for a negative temperature, a top_k below 1 or a top_p outside (0, 1].
    """
    _check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)  # (B, V)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = torch.softmax(logits, dim=-1)  # (B, V)
        ranked, order = torch.sort(probs, dim=-1, descending=True, stable=True)  # (B, V) each
        above = torch.cumsum(ranked, dim=-1) - ranked  # (B, V): the mass ranked above each
        outside = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, above >= top_p)
        logits = logits.masked_fill(outside, float("-inf"))
    return torch.softmax(logits, dim=-1)  # (B, V)


def _check_prompt(idx: Tensor) -> None:
    if idx.dim() != 2 or idx.shape[1] < 1:
        raise ValueError(f"idx must be (B, T) with T >= 1, got {tuple(idx.shape)}")


def _window(model: nn.Module, block_size: int | None) -> int | None:
    """The longest context to feed: ``block_size``, else the model's, else None (all)."""
    if block_size is not None and (isinstance(block_size, bool) or block_size < 1):
        raise ValueError(f"block_size must be >= 1 or None, got {block_size}")
    return getattr(model, "block_size", None) if block_size is None else block_size


def _last_logits(
    model: nn.Module, idx: Tensor, cache: Any, block_size: int | None, use_cache: bool
) -> tuple[Tensor, Any]:
    """The logits (B, V) of the token after ``idx`` (B, L), and the cache of ``idx``.

    With a cache (``use_cache`` and a model with ``decode_step``), only the tokens the cache has
    not read are fed. Once L exceeds ``block_size``, the window ``idx[:, -block_size:]`` has
    slid and the whole window is computed again (the result is None: there is nothing to
    keep); without a cache, the window is always computed again.
    """
    window = idx if block_size is None else idx[:, -block_size:]  # (B, <= block_size)
    if not use_cache or not hasattr(model, "decode_step") or window.shape[1] < idx.shape[1]:
        return model(window)[:, -1], None
    new = idx if cache is None else idx[:, cache.length:]  # (B, L - P)
    logits, cache = model.decode_step(new, cache)  # (B, L - P, V)
    return logits[:, -1], cache


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    block_size: int | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Sample a continuation, one token at a time, from :func:`next_token_probs`.

    With ``use_cache`` and a model that has ``decode_step`` (``TransformerLM``), each step
    feeds the model only the new token and reuses what it computed for the earlier ones (its
    key/value cache, ``coursepkg.transformer.KVCache``); the logits are those of the
    recomputation to rounding (float64: to about 1e-15), so the same generator draws the same
    tokens (in float32 a draw that falls within rounding of a boundary between two tokens
    could differ, which the tests have not seen happen).

    The context is the last ``block_size`` tokens. Once the sequence is longer, the window
    slides, and the cache is *cropped to the window* in the only exact way: the window is
    computed again from scratch at every step, as without a cache, so cached and uncached
    decoding stay equal for every ``pos``. A cache that merely dropped its oldest entry would
    be wrong for all of them: with learned or sinusoidal positions every token of the window
    moves to a new position (0 .. block_size-1 again); with RoPE, relative biases or no
    positions the first layer's keys would still be right (their scores depend on offsets
    only), but from the second layer on each cached entry summarises everything its token
    attended to, tokens that have left the window included. So the cache speeds up the first
    ``block_size`` positions; beyond them a step costs what a recomputation costs.

    Args:
        model: any module with ``forward(idx (B, T)) -> logits (B, T, V)``.
        idx: (B, T) the prompt's token ids (T >= 1).
        max_new_tokens: how many tokens to add.
        temperature: divides the logits; below 1 sharpens, above 1 flattens, 0 is greedy.
        top_k: sample only among the k most likely tokens.
        top_p: sample only from the nucleus of probability ``top_p`` (after top-k).
        generator: a seeded generator for reproducible samples.
        block_size: the longest context fed to the model (default: the model's
            ``block_size`` attribute if it has one, else the whole sequence so far).
        use_cache: decode incrementally with the model's ``decode_step`` if it has one;
            False recomputes the whole context at every step.

    Returns:
        (B, T + max_new_tokens) the prompt followed by the sampled tokens.
    """
    _check_prompt(idx)
    _check_sampling(temperature, top_k, top_p)
    block_size = _window(model, block_size)
    idx = idx.to(_model_device(model))  # the prompt goes where the model is (a GPU, say)
    was_training = model.training
    model.eval()
    cache = None
    for _ in range(max_new_tokens):
        logits, cache = _last_logits(model, idx, cache, block_size, use_cache)  # (B, V)
        probs = next_token_probs(logits, temperature=temperature, top_k=top_k,
                                 top_p=top_p)  # (B, V)
        if temperature == 0:  # greedy: the one-hot's token, without drawing from the generator
            nxt = probs.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            nxt = _draw(probs, generator)  # (B, 1)
        idx = torch.cat([idx, nxt], dim=1)
    model.train(was_training)
    return idx


def _draw(probs: Tensor, generator: torch.Generator | None) -> Tensor:
    """One token per row from ``probs`` (B, V): (B, 1). A CPU generator draws on the CPU even
    when the model is on a GPU, so a seed gives the same tokens on every device."""
    if generator is not None and generator.device != probs.device:
        return torch.multinomial(probs.to(generator.device), 1, generator=generator).to(
            probs.device)
    return torch.multinomial(probs, 1, generator=generator)


@torch.no_grad()
def beam_search(
    model: nn.Module,
    idx: Tensor,
    max_new_tokens: int,
    beam_size: int,
    *,
    length_penalty: float = 0.0,
    eos_id: int | None = None,
    block_size: int | None = None,
    use_cache: bool = True,
) -> tuple[Tensor, Tensor]:
    """The ``beam_size`` most likely continuations of one prompt, as a beam search finds them.

    The search, its scores, its ties and its finished hypotheses are those of
    ``coursepkg.decoding.batched_beam_search``; the model is read as by :func:`generate` (the last
    ``block_size`` tokens, with its ``decode_step`` cache when ``use_cache``, which the
    search reorders as it keeps hypotheses). ``beam_size=1`` is greedy decoding,
    ``generate(model, idx, n, temperature=0)`` (up to ``eos_id``).

    Args:
        model: any module with ``forward(idx (B, T)) -> logits (B, T, V)``.
        idx: (1, T) the prompt.
        max_new_tokens: how many tokens to add (at most, with ``eos_id``).
        beam_size: K, the hypotheses kept.
        length_penalty: scores are divided by (number of new tokens) ** length_penalty.
        eos_id: the token that ends a hypothesis (it is then padded with ``eos_id``).
        block_size: the longest context fed to the model (default: the model's).
        use_cache: decode incrementally when the model has ``decode_step``.

    Returns:
        ``(sequences, scores)``: sequences (K', T + max_new_tokens), the prompt and each
        hypothesis, best first; scores (K',), each the sum of the model's log-probabilities
        of the hypothesis's new tokens (up to and including ``eos_id``), divided by its
        length ** length_penalty. K' = min(K, the number of possible hypotheses).
    """
    _check_prompt(idx)
    if idx.shape[0] != 1:
        raise ValueError(f"beam_search decodes one prompt: idx must be (1, T), got "
                         f"{tuple(idx.shape)}")
    block_size = _window(model, block_size)
    idx = idx.to(_model_device(model))
    cache = None

    def step(seqs: Tensor, parents: Tensor | None) -> Tensor:
        nonlocal cache
        if cache is not None and parents is not None:
            cache = cache.select(parents)  # the rows of the hypotheses kept
        logits, cache = _last_logits(model, seqs, cache, block_size, use_cache)  # (N, V)
        return torch.log_softmax(logits, dim=-1)

    was_training = model.training
    model.eval()
    try:
        sequences, scores = batched_beam_search(
            step, idx, max_new_tokens, beam_size, length_penalty=length_penalty, eos_id=eos_id
        )
    finally:
        model.train(was_training)
    found = scores[0] > float("-inf")
    return sequences[0][found], scores[0][found]
