"""Decoding that knows no model: beam search over a step function.

Greedy decoding keeps the single most likely token at every step; a beam search keeps the
``beam_size`` most likely *hypotheses* (continuations) instead, and so can find a sequence whose
first token was not the best. The search needs nothing of the model but the log-probabilities
of the next token after each hypothesis, given here by a step function, so one implementation
serves chapter 3's ``Seq2Seq.translate`` (an LSTM state per hypothesis), chapter 7's
``Transformer.translate`` (a key/value cache per hypothesis) and ``coursepkg.lm.beam_search``
(any language model). It imports nothing of the course.

Shape letters: B prompts, K hypotheses per prompt (the beam), N = B * K sequences, L their
length, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["StepFunction", "batched_beam_search"]


def _check_prompt(idx: Tensor) -> None:
    if idx.dim() != 2 or idx.shape[1] < 1:
        raise ValueError(f"start must be (B, T) with T >= 1, got {tuple(idx.shape)}")


StepFunction = Callable[[Tensor, "Tensor | None"], Tensor]
"""``step(seqs (N, L), parents (N,) or None) -> log_probs (N, V)``: the log-probabilities of
the token after each of N sequences, for :func:`batched_beam_search`."""


def batched_beam_search(
    step: StepFunction,
    start: Tensor,
    max_new_tokens: int,
    beam_size: int,
    *,
    length_penalty: float = 0.0,
    eos_id: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Beam search from B prompts at once, over any model given as a step function.

    Each row keeps its ``beam_size`` best *hypotheses* (continuations). At every step, each
    hypothesis is extended by every token of the vocabulary, and the ``beam_size`` best of
    these candidates, by score, become the row's hypotheses. The score of a hypothesis is the
    sum of the log-probabilities of its new tokens, divided by ``length ** length_penalty``
    (length: its number of new tokens; 0, the default, leaves the plain sum; 1 gives the mean
    log-probability, which stops the search from preferring short hypotheses). Equal scores
    are ranked by the hypothesis they extend (the better first), then by token id (the
    smaller first), so ``beam_size=1`` is greedy decoding.

    A hypothesis that produces ``eos_id`` is *finished*: it keeps its place among the row's
    hypotheses, its score no longer changes, and it is padded with ``eos_id``; the search ends
    early when every hypothesis of every row has finished. With ``eos_id=None`` every
    hypothesis has ``max_new_tokens`` new tokens.

    Args:
        step: ``step(seqs, parents) -> log_probs``: seqs (N, L) the sequences so far (the
            prompts, then N = B * k hypotheses, row b's k consecutive); log_probs (N, V).
            ``parents`` (N,) gives, for every sequence, the row of the previous call's
            ``seqs`` that it extends (None at the first call, whose rows are the prompts), so
            a model that carries a cache keeps the cache of those rows.
        start: (B, T) the prompts (T >= 1).
        max_new_tokens: how many tokens to add (at most).
        beam_size: K, the hypotheses kept per row.
        length_penalty: the exponent of the length that divides the scores.
        eos_id: the token that finishes a hypothesis, or None.

    Returns:
        ``(sequences, scores)``: sequences (B, K', T + max_new_tokens), each row's hypotheses
        best first (the prompt included); scores (B, K'). K' is ``beam_size``, or fewer when
        there are fewer candidates (K' = min(K, V^n) after n steps). A finished hypothesis has
        one continuation only, so a wide beam can have more slots than hypotheses: the slots
        left over hold the score -inf.
    """
    _check_prompt(start)
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive int, got {beam_size!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or (
            max_new_tokens < 1):
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    B, T = start.shape
    seqs, parents = start, None  # (N, L): N = B * k hypotheses, k per row (1 at first)
    sums = lengths = done = None
    for _ in range(max_new_tokens):
        log_probs = step(seqs, parents)  # (N, V)
        V = log_probs.shape[-1]
        if eos_id is not None and not 0 <= eos_id < V:
            raise ValueError(f"eos_id must be a token id in 0..{V - 1}, got {eos_id!r}")
        log_probs = log_probs.view(B, -1, V)  # (B, k, V)
        k = log_probs.shape[1]
        if sums is None:  # the first step: one empty hypothesis per row
            sums = log_probs.new_zeros(B, 1)
            lengths = torch.zeros(B, 1, dtype=torch.long, device=start.device)
            done = torch.zeros(B, 1, dtype=torch.bool, device=start.device)
        if eos_id is not None:  # a finished hypothesis continues with eos only, for free
            frozen = torch.full((V,), float("-inf"), dtype=log_probs.dtype,
                                device=log_probs.device)
            frozen[eos_id] = 0.0
            log_probs = torch.where(done[..., None], frozen, log_probs)
        candidate_sums = sums[..., None] + log_probs  # (B, k, V)
        candidate_lengths = (lengths + ~done)[..., None].expand(B, k, V)  # (B, k, V)
        scores = _penalised(candidate_sums, candidate_lengths, length_penalty)  # (B, k, V)
        best = torch.sort(scores.reshape(B, k * V), dim=1, descending=True,
                          stable=True).indices[:, :beam_size]  # (B, k'): ties to the first
        beam, token = best // V, best % V  # (B, k') each
        sums = candidate_sums.reshape(B, -1).gather(1, best)
        lengths = candidate_lengths.reshape(B, -1).gather(1, best)
        done = done.gather(1, beam)
        if eos_id is not None:
            done = done | (token == eos_id)
        parents = (torch.arange(B, device=start.device)[:, None] * k + beam).reshape(-1)
        seqs = torch.cat([seqs[parents], token.reshape(-1, 1)], dim=1)  # (B * k', L + 1)
        if eos_id is not None and bool(done.all()):
            break
    k = sums.shape[1]
    missing = T + max_new_tokens - seqs.shape[1]  # every hypothesis finished early
    if missing:
        seqs = torch.cat([seqs, seqs.new_full((seqs.shape[0], missing), eos_id)], dim=1)
    return seqs.view(B, k, -1), _penalised(sums, lengths, length_penalty)


def _penalised(sums: Tensor, lengths: Tensor, length_penalty: float) -> Tensor:
    """Scores: sums of log-probabilities divided by length ** length_penalty."""
    if length_penalty == 0:
        return sums
    return sums / lengths.clamp(min=1).to(sums.dtype) ** length_penalty
