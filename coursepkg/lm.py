"""Training, evaluating and sampling any language model of the course.

Every neural language model of the course (``RNNLM``, later ``TransformerLM``) has the same
interface, ``forward(idx (B, T)) -> logits (B, T, V)`` where position t predicts token t + 1,
so one training loop, one evaluation and one sampler serve them all (the n-gram models of
chapter 1 count instead of training, and have their own ``perplexity`` and ``generate``).

Text is a 1-D LongTensor of token ids. Training draws random windows of ``block_size + 1``
tokens: the first ``block_size`` are the input, the last ``block_size`` the targets.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["TrainHistory", "evaluate", "generate", "get_batch", "next_token_probs", "train"]


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
) -> TrainHistory:
    """Train a language model with AdamW on random windows of the text.

    The learning rate warms up linearly for ``warmup`` steps, then decays to a tenth of
    ``lr`` on a cosine; gradients are clipped to norm ``grad_clip``. The model is left in
    eval mode.

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

    Returns:
        A :class:`TrainHistory`.
    """
    from tqdm.auto import tqdm

    if steps < 1 or batch_size < 1 or block_size < 1:
        raise ValueError("steps, batch_size and block_size must be positive")
    train_ids = _check_ids("train_ids", train_ids, block_size)
    if val_ids is not None:
        val_ids = _check_ids("val_ids", val_ids, block_size)
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
    before it in its window (at most ``block_size`` of them).

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
    ids = _check_ids("ids", ids, 1)
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


def _check_sampling(temperature: float, top_k: int | None) -> None:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 or None, got {top_k}")


def next_token_probs(
    logits: Tensor, *, temperature: float = 1.0, top_k: int | None = None
) -> Tensor:
    """The distribution the next token is drawn from, given the logits of the last position.

    The steps, in this order: divide the logits by the temperature; keep the ``top_k`` largest
    (the others get probability 0); softmax. Temperature 0 is greedy decoding: all the
    probability on the most likely token (the first of them if several tie), as a one-hot row.
    :func:`generate` draws every token from this distribution; a new way of cutting the
    distribution (such as top-p) adds its step here, after top-k.

    Args:
        logits: (B, V) the model's logits for the next token.
        temperature: divides the logits; below 1 sharpens, above 1 flattens, 0 is greedy.
        top_k: keep only the k most likely tokens (None: all of them).

    Returns:
        (B, V) probabilities, each row summing to 1, in the dtype of ``logits``.

    Raises:
        ValueError: for a negative temperature or a top_k below 1.
    """
    _check_sampling(temperature, top_k)
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)  # (B, V)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits, dim=-1)  # (B, V)


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    block_size: int | None = None,
) -> Tensor:
    """Sample a continuation, one token at a time, from :func:`next_token_probs`.

    Args:
        model: any module with ``forward(idx (B, T)) -> logits (B, T, V)``.
        idx: (B, T) the prompt's token ids (T >= 1).
        max_new_tokens: how many tokens to add.
        temperature: divides the logits; below 1 sharpens, above 1 flattens, 0 is greedy.
        top_k: sample only among the k most likely tokens.
        generator: a seeded generator for reproducible samples.
        block_size: the longest context fed to the model (default: the model's
            ``block_size`` attribute if it has one, else the whole sequence so far).

    Returns:
        (B, T + max_new_tokens) the prompt followed by the sampled tokens.
    """
    if idx.dim() != 2 or idx.shape[1] < 1:
        raise ValueError(f"idx must be (B, T) with T >= 1, got {tuple(idx.shape)}")
    _check_sampling(temperature, top_k)
    if block_size is not None and (isinstance(block_size, bool) or block_size < 1):
        raise ValueError(f"block_size must be >= 1 or None, got {block_size}")
    if block_size is None:
        block_size = getattr(model, "block_size", None)
    was_training = model.training
    model.eval()
    for _ in range(max_new_tokens):
        context = idx if block_size is None else idx[:, -block_size:]
        logits = model(context)[:, -1]  # (B, V)
        probs = next_token_probs(logits, temperature=temperature, top_k=top_k)  # (B, V)
        if temperature == 0:  # greedy: the one-hot's token, without drawing from the generator
            nxt = probs.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        idx = torch.cat([idx, nxt], dim=1)
    model.train(was_training)
    return idx
