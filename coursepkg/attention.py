"""Attention: a soft, differentiable lookup of one query among keys and values.

A query q is compared with every key k_s by a score; the softmax of the scores gives
weights that are positive and sum to one; the result is the weighted average of the values:

    e_s = score(q, k_s),    a = softmax(e),    context = sum_s a_s v_s.

Two scores are implemented: the dot product ``e_s = scale * k_s . q`` (:func:`attend`) and
the additive (MLP, Bahdanau) score ``e_s = v_a^T tanh(W_q q + W_k k_s + b)``
(:class:`AdditiveAttention`). :class:`Seq2Seq` is an LSTM encoder-decoder that uses
either one to translate a source sequence into a target sequence, or, with
``attention="none"``, squeezes the whole source into the encoder's final state.

Masks are boolean with **True = may attend**; every row must allow at least one key.
Shape letters: B batch, S keys (source length), T target length, D query/key width,
Dv value width, Hs hidden size, V vocabulary.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursepkg.decoding import batched_beam_search
from coursepkg.rnn import LSTM, lstm_step, pool

__all__ = [
    "AdditiveAttention",
    "Seq2Seq",
    "additive_scores",
    "attend",
    "check_mask_fits",
    "weighted_average",
]


def check_mask_fits(mask: Tensor, scores_shape: torch.Size, name: str = "mask") -> None:
    """Raise a ValueError naming both shapes unless ``mask`` broadcasts to the scores' shape
    (and would not grow it); ``name`` names the tensor in the message."""
    try:
        fits = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)}"
        )


def weighted_average(
    scores: Tensor, values: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Softmax the scores over the keys and average the values with the weights.

    Args:
        scores: (B, S) one score per key.
        values: (B, S, Dv) one value per key.
        mask: (B, S) or broadcastable, True where the key may be attended to; masked keys
            get score -inf, hence weight exactly 0.

    Returns:
        ``(context, weights)``: context (B, Dv) = sum_s weights[b, s] * values[b, s];
        weights (B, S), non-negative, summing to 1 over S.
    """
    if values.dim() != 3 or values.shape[:2] != scores.shape:
        raise ValueError(
            f"expected scores (B, S) and values (B, S, Dv), got {tuple(scores.shape)} and "
            f"{tuple(values.shape)}"
        )
    if mask is not None:
        check_mask_fits(mask, scores.shape)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (B, S)
    context = (weights.unsqueeze(1) @ values).squeeze(1)  # (B, 1, S) @ (B, S, Dv) -> (B, Dv)
    return context, weights


def attend(
    query: Tensor,
    keys: Tensor,
    values: Tensor,
    mask: Tensor | None = None,
    scale: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Dot-product attention of one query per batch row.

    Args:
        query: (B, D) the query of each row.
        keys: (B, S, D) the keys.
        values: (B, S, Dv) the values.
        mask: (B, S) boolean, True = may attend (None: every key).
        scale: multiplies the scores, e.g. ``1 / sqrt(D)``.

    Returns:
        ``(context, weights)``: context (B, Dv), weights (B, S) summing to 1 over S.
    """
    if (query.dim() != 2 or keys.dim() != 3 or query.shape[-1] != keys.shape[-1]
            or query.shape[0] != keys.shape[0]):
        raise ValueError(
            f"expected query (B, D) and keys (B, S, D), got {tuple(query.shape)} and "
            f"{tuple(keys.shape)}"
        )
    scores = scale * (keys @ query.unsqueeze(-1)).squeeze(-1)  # (B, S, D) @ (B, D, 1) -> (B, S)
    return weighted_average(scores, values, mask)


def additive_scores(
    query: Tensor, keys: Tensor, w_q: Tensor, w_k: Tensor, v: Tensor, bias: Tensor | None = None
) -> Tensor:
    """The additive (MLP) score ``e_s = v^T tanh(W_q q + W_k k_s + b)``.

    Args:
        query: (B, Dq).
        keys: (B, S, Dk).
        w_q: (Hd, Dq) query projection.
        w_k: (Hd, Dk) key projection.
        v: (Hd,) the output vector of the one-hidden-layer MLP.
        bias: (Hd,) or None.

    Returns:
        (B, S) scores.
    """
    hidden = (query @ w_q.T).unsqueeze(1) + keys @ w_k.T  # (B, 1, Hd) + (B, S, Hd)
    if bias is not None:
        hidden = hidden + bias
    return torch.tanh(hidden) @ v  # (B, S)


class AdditiveAttention(nn.Module):
    """Bahdanau's additive attention: an MLP scores each (query, key) pair.

    Args:
        d_query: Dq, the query width.
        d_key: Dk, the key width.
        d_hidden: Hd, the MLP's hidden width.
    """

    def __init__(self, d_query: int, d_key: int, d_hidden: int) -> None:
        super().__init__()
        self.w_q = nn.Linear(d_query, d_hidden, bias=False)
        self.w_k = nn.Linear(d_key, d_hidden, bias=True)
        self.v = nn.Parameter(torch.empty(d_hidden).uniform_(-d_hidden**-0.5, d_hidden**-0.5))

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """(B, Dq), (B, S, Dk) -> (B, S) additive scores."""
        return additive_scores(query, keys, self.w_q.weight, self.w_k.weight, self.v,
                               self.w_k.bias)

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Attend with additive scores.

        Args:
            query: (B, Dq).
            keys: (B, S, Dk).
            values: (B, S, Dv).
            mask: (B, S) boolean, True = may attend.

        Returns:
            ``(context, weights)``: (B, Dv) and (B, S).
        """
        return weighted_average(self.scores(query, keys), values, mask)


AttentionKind = Literal["additive", "dot", "none"]


class Seq2Seq(nn.Module):
    """An LSTM encoder-decoder, with or without attention over the encoder's states.

    The encoder is a bidirectional :class:`coursepkg.rnn.LSTM` over the source; its states
    (B, S, 2 Hs) are the keys and values. The decoder is an LSTM cell that reads, at step
    t, the previous target token and a context vector c_t, and predicts token t from its
    new state and c_t:

    * ``"additive"``: c_t is additive attention of the previous decoder state over the
      encoder states (Bahdanau et al., 2015);
    * ``"dot"``: c_t uses the score ``(W_k k_s) . s_{t-1} / sqrt(Hs)``;
    * ``"none"``: c_t is the same for every step, the encoder's summary of the whole source
      (last forward state and first backward state): the bottleneck.

    Args:
        src_vocab: source vocabulary size (id 0 is padding).
        tgt_vocab: target vocabulary size.
        d_embed: E, the token embedding width.
        d_hidden: Hs, the hidden size of each encoder direction and of the decoder.
        attention: ``"additive"``, ``"dot"`` or ``"none"``.
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_embed: int = 32,
        d_hidden: int = 64,
        attention: AttentionKind = "additive",
    ) -> None:
        super().__init__()
        if attention not in ("additive", "dot", "none"):
            raise ValueError(f'attention must be "additive", "dot" or "none", got {attention!r}')
        self.attention = attention
        self.d_hidden = d_hidden
        self.src_embed = nn.Embedding(src_vocab, d_embed, padding_idx=0)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_embed)
        self.encoder = LSTM(d_embed, d_hidden, bidirectional=True)
        self.bridge = nn.Linear(2 * d_hidden, 2 * d_hidden)  # summary -> decoder (h0, c0)
        self.decoder = LSTM(d_embed + 2 * d_hidden, d_hidden)
        if attention == "additive":
            self.attn = AdditiveAttention(d_hidden, 2 * d_hidden, d_hidden)
        elif attention == "dot":
            self.key_proj = nn.Linear(2 * d_hidden, d_hidden, bias=False)
        self.out = nn.Linear(d_hidden + 2 * d_hidden, tgt_vocab)

    def encode(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Read the source.

        Args:
            src: (B, S) source ids, right-padded with 0.
            src_lengths: (B,) unpadded lengths.

        Returns:
            ``(states, summary, mask)``: states (B, S, 2 Hs) the encoder's outputs;
            summary (B, 2 Hs) the forward state at the last real token and the backward
            state at the first; mask (B, S) True on real tokens.
        """
        # With lengths, the right-to-left direction starts at each row's last real token.
        states, _ = self.encoder(self.src_embed(src), lengths=src_lengths)  # (B, S, 2 Hs)
        forward_last = pool(states[..., : self.d_hidden], src_lengths, "last")  # (B, Hs)
        backward_first = states[:, 0, self.d_hidden :]  # (B, Hs)
        summary = torch.cat([forward_last, backward_first], dim=-1)  # (B, 2 Hs)
        positions = torch.arange(src.shape[1], device=src.device)  # (S,)
        mask = positions[None, :] < src_lengths[:, None]  # (B, S)
        return states, summary, mask

    def _context(
        self, s_prev: Tensor, states: Tensor, summary: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """The context vector (B, 2 Hs) and the weights (B, S) for one decoder step."""
        if self.attention == "additive":
            return self.attn(s_prev, states, states, mask)
        if self.attention == "dot":
            keys = self.key_proj(states)  # (B, S, Hs)
            return attend(s_prev, keys, states, mask, scale=self.d_hidden**-0.5)
        weights = torch.zeros(mask.shape, dtype=states.dtype, device=states.device)
        return summary, weights

    def _decode(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor | None, steps: int, bos: int
    ) -> tuple[Tensor, Tensor]:
        """Teacher-forced (``tgt_in`` given) or greedy decoding; (logits, weights)."""
        states, summary, mask = self.encode(src, src_lengths)
        h, c = torch.tanh(self.bridge(summary)).chunk(2, dim=-1)  # each (B, Hs)
        params = self.decoder.cell_parameters(0)
        prev = torch.full((src.shape[0],), bos, dtype=torch.long, device=src.device)  # (B,)
        all_logits, all_weights = [], []
        for t in range(steps):
            if tgt_in is not None:
                prev = tgt_in[:, t]
            context, weights = self._context(h, states, summary, mask)  # (B, 2 Hs), (B, S)
            x_t = torch.cat([self.tgt_embed(prev), context], dim=-1)  # (B, E + 2 Hs)
            h, c = lstm_step(x_t, (h, c), *params)
            logits = self.out(torch.cat([h, context], dim=-1))  # (B, V)
            all_logits.append(logits)
            all_weights.append(weights)
            prev = logits.argmax(dim=-1)
        return torch.stack(all_logits, dim=1), torch.stack(all_weights, dim=1)

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: predict every target token from the true previous ones.

        Args:
            src: (B, S) source ids, right-padded with 0.
            src_lengths: (B,) unpadded source lengths.
            tgt_in: (B, T) the decoder's inputs: BOS followed by the target without its
                last token.

        Returns:
            (B, T, V) logits; position t predicts target token t.
        """
        logits, _ = self._decode(src, src_lengths, tgt_in, tgt_in.shape[1], bos=0)
        return logits

    @torch.no_grad()
    def translate(
        self, src: Tensor, src_lengths: Tensor, max_len: int, bos: int, *,
        beam_size: int = 1, eos_id: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Greedy decoding (or a beam search), with the attention weights of every step.

        Args:
            src: (B, S) source ids; src_lengths: (B,).
            max_len: T, the number of tokens to produce.
            bos: the id that starts every target.
            beam_size: 1 for greedy decoding; more for a beam search of that width
                (``coursepkg.decoding.batched_beam_search``) that returns each row's best
                hypothesis, the one with the largest sum of log-probabilities (the source is
                encoded once; each hypothesis carries its decoder state).
            eos_id: for a beam search, the id that ends a hypothesis (the rest of its row is
                filled with it); None scores all T tokens. Greedy decoding ignores it.

        Returns:
            ``(tokens, weights)``: tokens (B, T) the argmax at each step (the best
            hypothesis); weights (B, T, S) where each step looked (all zeros for
            ``attention="none"``, which has none).
        """
        if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
            raise ValueError(f"beam_size must be a positive int, got {beam_size!r}")
        was_training = self.training
        self.eval()
        if beam_size > 1:
            tokens = self._beam_translate(src, src_lengths, max_len, bos, beam_size, eos_id)
            tgt_in = torch.cat([torch.full_like(tokens[:, :1], bos), tokens[:, :-1]], dim=1)
            _, weights = self._decode(src, src_lengths, tgt_in, max_len, bos)
            self.train(was_training)
            return tokens, weights
        logits, weights = self._decode(src, src_lengths, None, max_len, bos)
        self.train(was_training)
        return logits.argmax(dim=-1), weights

    def _step(
        self, prev: Tensor, state: tuple[Tensor, Tensor], states: Tensor, summary: Tensor,
        mask: Tensor,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """One decoder step, as in :meth:`_decode`'s loop: the previous token (B,) and the
        decoder's state -> the logits (B, V) of the next token and the new state."""
        h, c = state
        context, _ = self._context(h, states, summary, mask)  # (B, 2 Hs)
        x_t = torch.cat([self.tgt_embed(prev), context], dim=-1)  # (B, E + 2 Hs)
        h, c = lstm_step(x_t, (h, c), *self.decoder.cell_parameters(0))
        return self.out(torch.cat([h, context], dim=-1)), (h, c)  # (B, V)

    def _beam_translate(
        self, src: Tensor, src_lengths: Tensor, max_len: int, bos: int, beam_size: int,
        eos_id: int | None,
    ) -> Tensor:
        """The best hypothesis (B, T) of a beam search per source row: the source is encoded
        once, and each hypothesis carries its decoder state (reordered as hypotheses are kept)."""
        states, summary, mask = self.encode(src, src_lengths)  # (B, S, 2 Hs), (B, 2 Hs), (B, S)
        state = tuple(torch.tanh(self.bridge(summary)).chunk(2, dim=-1))  # (B, Hs) each
        rows = torch.arange(src.shape[0], device=src.device)  # the source of each hypothesis

        def step(seqs: Tensor, parents: Tensor | None) -> Tensor:
            nonlocal state, rows
            if parents is not None:  # the hypotheses kept, in their new order
                state, rows = (state[0][parents], state[1][parents]), rows[parents]
            logits, state = self._step(seqs[:, -1], state, states[rows], summary[rows],
                                       mask[rows])
            return torch.log_softmax(logits, dim=-1)  # (N, V)

        start = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        sequences, _ = batched_beam_search(step, start, max_len, beam_size, eos_id=eos_id)
        return sequences[:, 0, 1:]  # (B, T): the best of each row, without BOS

    def loss(self, src: Tensor, src_lengths: Tensor, tgt: Tensor, bos: int) -> Tensor:
        """Teacher-forced cross-entropy of target ids (B, T) (padding 0 ignored)."""
        bos_column = torch.full_like(tgt[:, :1], bos)
        tgt_in = torch.cat([bos_column, tgt[:, :-1]], dim=1)  # (B, T)
        logits = self(src, src_lengths, tgt_in)  # (B, T, V)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                               ignore_index=0)
