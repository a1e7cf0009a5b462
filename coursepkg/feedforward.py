"""Feed-forward models of text: a fixed window for language modelling, an average for classifying.

Chapter 1 counts; this module is its bridge to the neural models of the later chapters. Two
feed-forward networks read text with no recurrence at all:

* :class:`FeedForwardLM`, the neural language model of Bengio et al. (2003): the embeddings of
  the last ``context_size`` tokens, concatenated, go through one hidden layer to the logits of
  the next token. It makes the n-gram model's Markov assumption (a fixed window of history) but
  shares statistical strength between similar histories through the embeddings, where the
  n-gram model counts each history apart.
* :class:`DAN`, the deep averaging network of Iyyer et al. (2015): the mean of the embeddings of
  a text's tokens goes through an MLP to the logits of its class. The mean makes it blind to
  word order, which is what chapter 2's recurrent acceptors add back.

Each idea is a small pure function (:func:`context_windows`, :func:`masked_mean`,
:func:`bag_of_words`) that a thin module calls. The language model has the interface of every
language model of the course, ``forward(idx (B, T)) -> logits (B, T, V)``, so
``coursepkg.lm.train``, ``lm.evaluate`` and ``lm.generate`` serve it unchanged.

Shape letters: B batch, T sequence length, N context size (tokens of history), E embedding
width, Hd hidden width, V vocabulary, C classes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DAN", "FeedForwardLM", "bag_of_words", "context_windows", "masked_mean"]


def context_windows(idx: Tensor, context_size: int, start_id: int) -> Tensor:
    """The window of the last ``context_size`` tokens at every position.

    ``windows[b, t, j] = idx[b, t - context_size + 1 + j]``, the oldest token first and
    ``idx[b, t]`` last; positions before the start of the sequence hold ``start_id``.

    Example:
        >>> context_windows(torch.tensor([[7, 8, 9]]), 2, start_id=0).tolist()
        [[[0, 7], [7, 8], [8, 9]]]

    Args:
        idx: (B, T) token ids.
        context_size: N, the tokens in each window (N >= 1).
        start_id: the id that pads the windows of the first N - 1 positions.

    Returns:
        (B, T, N) ids; a view of the left-padded ids, not a copy.
    """
    if isinstance(context_size, bool) or not isinstance(context_size, int) or context_size < 1:
        raise ValueError(f"context_size must be an int >= 1, got {context_size!r}")
    padded = F.pad(idx, (context_size - 1, 0), value=start_id)  # (B, N - 1 + T)
    return padded.unfold(1, context_size, 1)  # (B, T, N)


class FeedForwardLM(nn.Module):
    """A fixed-window neural language model (Bengio et al., 2003).

    At every position t the embeddings of tokens t - N + 1 .. t (N = ``context_size``) are
    concatenated and go through one tanh hidden layer to the logits of token t + 1:

        logits_t = W_out dropout(tanh(W_h [e(x_{t-N+1}); ...; e(x_t)] + b_h)) + b_out

    so, like an (N + 1)-gram model, it predicts from the last N tokens only, and changing an
    older token never changes its prediction. Unlike the n-gram model, two histories that
    share no n-gram but are made of similar tokens get similar predictions.

    Before the start of the sequence the window holds a *start* token whose id is
    ``vocab_size`` (``start_id``): the embedding table has one extra row for it, so no real
    token stands in for "nothing here", and the logits range over the V real tokens only. The
    start token also fills the first N - 1 windows of every training window that
    ``lm.train`` cuts from the middle of the text, so it learns to mean "history unknown".

    Args:
        vocab_size: V.
        context_size: N, the tokens of history each prediction reads.
        d_embed: E, the width of each token's embedding.
        d_hidden: Hd, the width of the hidden layer.
        dropout: the dropout probability on the hidden layer (in training mode).
    """

    def __init__(
        self, vocab_size: int, context_size: int, d_embed: int, d_hidden: int,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        for name, value in [("vocab_size", vocab_size), ("context_size", context_size),
                            ("d_embed", d_embed), ("d_hidden", d_hidden)]:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.vocab_size = vocab_size
        self.context_size = context_size
        self.start_id = vocab_size
        self.embed = nn.Embedding(vocab_size + 1, d_embed)  # row V is the start token
        self.hidden = nn.Linear(context_size * d_embed, d_hidden)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(d_hidden, vocab_size)

    @property
    def block_size(self) -> int:
        """The longest context that changes a prediction: ``context_size``.

        ``lm.generate`` feeds the model only the last ``block_size`` tokens; for this model
        the last position's logits are the same as with the whole sequence. (``lm.train``'s
        own ``block_size``, the length of its training windows, may be anything.)
        """
        return self.context_size

    def forward(self, idx: Tensor) -> Tensor:
        """Next-token logits at every position, each from the window that ends there.

        Args:
            idx: (B, T) token ids in 0 .. V - 1.

        Returns:
            (B, T, V) logits; position t predicts token t + 1 from tokens t - N + 1 .. t.
        """
        windows = context_windows(idx, self.context_size, self.start_id)  # (B, T, N)
        x = self.embed(windows).flatten(2)  # (B, T, N * E)
        h = torch.tanh(self.hidden(x))  # (B, T, Hd)
        return self.head(self.dropout(h))  # (B, T, V)

    def extra_repr(self) -> str:
        return f"context_size={self.context_size}, start_id={self.start_id}"


def _length_mask(lengths: Tensor, T: int) -> Tensor:
    """(B, T) True at the first ``lengths[b]`` positions of each row."""
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be (B,), got shape {tuple(lengths.shape)}")
    if bool((lengths < 0).any()) or bool((lengths > T).any()):
        raise ValueError(f"lengths must be in 0..T = 0..{T}, got {lengths.tolist()}")
    return torch.arange(T, device=lengths.device) < lengths[:, None]  # (B, T)


def masked_mean(x: Tensor, lengths: Tensor) -> Tensor:
    """The mean of the first ``lengths[b]`` vectors of each row; what follows is ignored.

    Args:
        x: (B, T, D) vectors, right-padded.
        lengths: (B,) how many of each row's vectors count, in 0..T (a row of length 0
            has mean 0).

    Returns:
        (B, D) means; the padding (even inf or nan) never reaches them.
    """
    mask = _length_mask(lengths, x.shape[1])  # (B, T)
    total = x.masked_fill(~mask[..., None], 0.0).sum(dim=1)  # (B, D)
    return total / lengths.clamp(min=1)[:, None].to(x.dtype)  # (B, D)


def bag_of_words(idx: Tensor, lengths: Tensor, vocab_size: int) -> Tensor:
    """The normalised counts of each row's first ``lengths[b]`` tokens (a bag of words).

    ``bag[b, w]`` is the share of the row's tokens that are w, so each row of a non-empty
    text sums to 1. A linear layer on this bag is the average of one learned vector per
    token, the DAN's average without its embedding width or its MLP.

    Args:
        idx: (B, T) token ids, right-padded.
        lengths: (B,) the unpadded lengths.
        vocab_size: V.

    Returns:
        (B, V) float32 shares.
    """
    mask = _length_mask(lengths, idx.shape[1])  # (B, T)
    counts = torch.zeros(idx.shape[0], vocab_size, device=idx.device)  # (B, V)
    counts.scatter_add_(1, idx, mask.float())
    return counts / lengths.clamp(min=1)[:, None].float()  # (B, V)


class DAN(nn.Module):
    """A deep averaging network (Iyyer et al., 2015): classify the mean of the embeddings.

        logits = W_2 relu(W_1 mean(e(x_1), ..., e(x_n)) + b_1) + b_2

    The mean over the first ``lengths[b]`` tokens (:func:`masked_mean`) is the same for any
    order of those tokens, and the padding after them is never read: the model sees a text
    as a bag of words, in a learned embedding space instead of as counts.

    Args:
        vocab_size: V.
        d_embed: E, the width of each token's embedding.
        d_hidden: Hd, the width of the hidden layer.
        n_classes: C.
    """

    def __init__(self, vocab_size: int, d_embed: int, d_hidden: int, n_classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_embed)
        self.hidden = nn.Linear(d_embed, d_hidden)
        self.head = nn.Linear(d_hidden, n_classes)

    def forward(self, idx: Tensor, lengths: Tensor) -> Tensor:
        """Class logits of each text.

        Args:
            idx: (B, T) token ids, right-padded with any ids.
            lengths: (B,) the number of real tokens of each row, in 1..T.

        Returns:
            (B, C) logits.
        """
        average = masked_mean(self.embed(idx), lengths)  # (B, E)
        return self.head(torch.relu(self.hidden(average)))  # (B, C)
