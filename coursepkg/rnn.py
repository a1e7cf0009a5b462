"""Recurrent networks: the Elman RNN and the LSTM, one time step at a time.

A recurrent network reads a sequence ``x_0 ... x_{T-1}`` left to right and keeps a hidden state
``h_t`` of fixed size that it updates after each token, with the same parameters at every
step. Each cell is a pure *step function* (``elman_step``, ``lstm_step``); the modules
(``ElmanRNN``, ``LSTM``) own the parameters and run the step in an explicit Python loop over
time, layers and directions. The loop is the lesson; it is also why these modules are slower
than torch's fused kernels, whose results they reproduce exactly.

Parameter names, shapes, gate order and initialisation follow ``torch.nn.RNN`` and
``torch.nn.LSTM`` (``batch_first=True``), so a state dict of either loads directly:

    h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)                 (Elman)

    i_t = sigmoid(x_t W_ii^T + b_ii + h_{t-1} W_hi^T + b_hi)             (input gate)
    f_t = sigmoid(x_t W_if^T + b_if + h_{t-1} W_hf^T + b_hf)             (forget gate)
    g_t = tanh(x_t W_ig^T + b_ig + h_{t-1} W_hg^T + b_hg)                (candidate cell)
    o_t = sigmoid(x_t W_io^T + b_io + h_{t-1} W_ho^T + b_ho)             (output gate)
    c_t = f_t * c_{t-1} + i_t * g_t
    h_t = o_t * tanh(c_t)                                                 (LSTM)

where ``weight_ih`` stacks ``W_ii, W_if, W_ig, W_io`` (in that order) along dim 0.

Shape letters: B batch, T time steps, I input features, Hs hidden size, L layers,
V vocabulary, E embedding width.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

__all__ = [
    "ElmanRNN",
    "LSTM",
    "LSTMGates",
    "RNNLM",
    "elman_step",
    "lstm_gates",
    "lstm_step",
    "pool",
]


def elman_step(
    x_t: Tensor,
    h_prev: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
    nonlinearity: Literal["tanh", "relu"] = "tanh",
) -> Tensor:
    """One step of an Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_prev W_hh^T + b_hh)``.

    Args:
        x_t: (B, I) the inputs at time t.
        h_prev: (B, Hs) the hidden state after time t - 1.
        weight_ih: (Hs, I) input-to-hidden weights.
        weight_hh: (Hs, Hs) hidden-to-hidden weights.
        bias_ih: (Hs,) or None.
        bias_hh: (Hs,) or None.
        nonlinearity: ``"tanh"`` (Elman's choice, torch's default) or ``"relu"``.

    Returns:
        (B, Hs) the new hidden state h_t.
    """
    pre = x_t @ weight_ih.T + h_prev @ weight_hh.T  # (B, Hs)
    if bias_ih is not None:
        pre = pre + bias_ih
    if bias_hh is not None:
        pre = pre + bias_hh
    return torch.tanh(pre) if nonlinearity == "tanh" else torch.relu(pre)


class LSTMGates(NamedTuple):
    """The four gate activations of one LSTM step, each (B, Hs)."""

    i: Tensor
    """input gate, in (0, 1): how much of the candidate g to write into the cell."""
    f: Tensor
    """forget gate, in (0, 1): how much of the old cell c_{t-1} to keep."""
    g: Tensor
    """candidate cell values, in (-1, 1)."""
    o: Tensor
    """output gate, in (0, 1): how much of tanh(c_t) to show as h_t."""


def lstm_gates(
    x_t: Tensor,
    h_prev: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
) -> LSTMGates:
    """The gates i, f, g, o of one LSTM step, in torch.nn.LSTM's order.

    Args:
        x_t: (B, I) the inputs at time t.
        h_prev: (B, Hs) the hidden state after time t - 1.
        weight_ih: (4 Hs, I) the rows of W_ii, W_if, W_ig, W_io stacked.
        weight_hh: (4 Hs, Hs) the rows of W_hi, W_hf, W_hg, W_ho stacked.
        bias_ih: (4 Hs,) or None.
        bias_hh: (4 Hs,) or None.

    Returns:
        ``LSTMGates(i, f, g, o)``, each (B, Hs).
    """
    pre = x_t @ weight_ih.T + h_prev @ weight_hh.T  # (B, 4 Hs)
    if bias_ih is not None:
        pre = pre + bias_ih
    if bias_hh is not None:
        pre = pre + bias_hh
    i, f, g, o = pre.chunk(4, dim=-1)  # each (B, Hs)
    return LSTMGates(torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o))


def lstm_step(
    x_t: Tensor,
    state: tuple[Tensor, Tensor],
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One LSTM step: ``c_t = f * c_prev + i * g`` and ``h_t = o * tanh(c_t)``.

    Args:
        x_t: (B, I) the inputs at time t.
        state: ``(h_prev, c_prev)``, each (B, Hs).
        weight_ih, weight_hh, bias_ih, bias_hh: as in :func:`lstm_gates`.

    Returns:
        ``(h_t, c_t)``, each (B, Hs).
    """
    h_prev, c_prev = state
    i, f, g, o = lstm_gates(x_t, h_prev, weight_ih, weight_hh, bias_ih, bias_hh)
    c_t = f * c_prev + i * g
    h_t = o * torch.tanh(c_t)
    return h_t, c_t


class _Recurrent(nn.Module):
    """What ElmanRNN and LSTM share: torch's parameter layout and the loops over layers."""

    _gate_count = 1

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        bias: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size),
                            ("num_layers", num_layers)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bidirectional = bool(bidirectional)
        self.bias = bool(bias)
        rows = self._gate_count * hidden_size
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size * self.num_directions
            for suffix in self._suffixes(layer):
                self.register_parameter(
                    f"weight_ih{suffix}", nn.Parameter(torch.empty(rows, layer_input))
                )
                self.register_parameter(
                    f"weight_hh{suffix}", nn.Parameter(torch.empty(rows, hidden_size))
                )
                if self.bias:
                    self.register_parameter(f"bias_ih{suffix}", nn.Parameter(torch.empty(rows)))
                    self.register_parameter(f"bias_hh{suffix}", nn.Parameter(torch.empty(rows)))
        self.reset_parameters()

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self, layer: int) -> list[str]:
        """Torch's parameter suffixes of one layer: ``_l0`` and ``_l0_reverse``."""
        return [f"_l{layer}"] + ([f"_l{layer}_reverse"] if self.bidirectional else [])

    def reset_parameters(self) -> None:
        """torch's initialisation: every parameter uniform in (-1/sqrt(Hs), 1/sqrt(Hs))."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound)

    def cell_parameters(self, layer: int, reverse: bool = False) -> tuple[Tensor | None, ...]:
        """``(weight_ih, weight_hh, bias_ih, bias_hh)`` of one layer and direction."""
        suffix = self._suffixes(layer)[int(reverse)]
        return (
            getattr(self, f"weight_ih{suffix}"),
            getattr(self, f"weight_hh{suffix}"),
            getattr(self, f"bias_ih{suffix}", None),
            getattr(self, f"bias_hh{suffix}", None),
        )

    def extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"bidirectional={self.bidirectional}, bias={self.bias}")

    def _check_input(self, x: Tensor) -> None:
        if x.dim() != 3 or x.shape[-1] != self.input_size:
            raise ValueError(
                f"expected x of shape (B, T, {self.input_size}) (batch first), "
                f"got {tuple(x.shape)}"
            )

    def _check_state(self, name: str, s: Tensor, x: Tensor) -> None:
        expected = (self.num_layers * self.num_directions, x.shape[0], self.hidden_size)
        if tuple(s.shape) != expected:
            raise ValueError(
                f"expected {name} of shape (layers*dirs, B, Hs) = {expected}, got {tuple(s.shape)}"
            )

    def _real_steps(self, x: Tensor, lengths: Tensor | None) -> Tensor | None:
        """(B, T) True on the real (non-padding) steps of each row, or None for no padding."""
        if lengths is None:
            return None
        B, T, _ = x.shape
        lengths = torch.as_tensor(lengths, device=x.device)
        if lengths.shape != (B,) or bool((lengths < 1).any()) or bool((lengths > T).any()):
            raise ValueError(
                f"lengths must be {B} integers between 1 and T={T}, got {lengths.tolist()}"
            )
        return torch.arange(T, device=x.device)[None, :] < lengths[:, None]  # (B, T)

    def _run(
        self,
        x: Tensor,
        state0: tuple[Tensor, ...],
        scan: Callable[[Tensor, tuple[Tensor, ...], tuple, bool], tuple[Tensor, tuple]],
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """Run ``scan`` over every layer and direction; stack the final states like torch."""
        finals: list[tuple[Tensor, ...]] = []
        layer_input = x  # (B, T, I) for layer 0, (B, T, dirs*Hs) above
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self.num_directions):
                k = layer * self.num_directions + direction
                s0 = tuple(s[k] for s in state0)  # each (B, Hs)
                params = self.cell_parameters(layer, reverse=bool(direction))
                out, final = scan(layer_input, s0, params, bool(direction))
                outputs.append(out)  # (B, T, Hs)
                finals.append(final)
            layer_input = torch.cat(outputs, dim=-1)  # (B, T, dirs*Hs)
        stacked = tuple(torch.stack(parts) for parts in zip(*finals, strict=True))
        return layer_input, stacked  # (B, T, dirs*Hs), each (layers*dirs, B, Hs)


def _time_order(T: int, reverse: bool) -> range:
    return range(T - 1, -1, -1) if reverse else range(T)


class ElmanRNN(_Recurrent):
    """A multi-layer (optionally bidirectional) Elman RNN, equal to ``torch.nn.RNN``.

    ``ElmanRNN(I, Hs, L, bidirectional).load_state_dict(nn.RNN(I, Hs, L, batch_first=True,
    bidirectional=...).state_dict())`` works and both give the same outputs.

    Args:
        input_size: I, features per time step.
        hidden_size: Hs.
        num_layers: L stacked layers; layer l > 0 reads the outputs of layer l - 1.
        bidirectional: also run a second RNN right to left and concatenate its outputs.
        nonlinearity: ``"tanh"`` or ``"relu"``.
        bias: use the biases b_ih and b_hh.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        nonlinearity: Literal["tanh", "relu"] = "tanh",
        bias: bool = True,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f'nonlinearity must be "tanh" or "relu", got {nonlinearity!r}')
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bidirectional, bias)

    def forward(
        self, x: Tensor, h0: Tensor | None = None, lengths: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Read the whole sequence.

        Args:
            x: (B, T, I) inputs, batch first.
            h0: (L * dirs, B, Hs) initial hidden states, zeros when None.
            lengths: (B,) real steps per row of a right-padded batch (None: no padding).
                A padding step leaves the state unchanged, so h_n is the state at the
                row's last real step and the reverse direction starts there, as with
                torch's packed sequences.

        Returns:
            ``(out, h_n)``: out (B, T, dirs * Hs) the top layer's hidden state at every step
            (both directions concatenated); h_n (L * dirs, B, Hs) the final state of every
            layer and direction (for the reverse direction, the state after reading x_1).
        """
        self._check_input(x)
        if h0 is None:
            h0 = x.new_zeros(self.num_layers * self.num_directions, x.shape[0], self.hidden_size)
        self._check_state("h0", h0, x)
        real = self._real_steps(x, lengths)  # (B, T) or None

        def scan(inp: Tensor, s0: tuple[Tensor, ...], params: tuple, reverse: bool):
            (h,) = s0  # (B, Hs)
            outs: list[Tensor] = [h] * inp.shape[1]
            for t in _time_order(inp.shape[1], reverse):
                h_t = elman_step(inp[:, t], h, *params, nonlinearity=self.nonlinearity)
                h = h_t if real is None else torch.where(real[:, t, None], h_t, h)
                outs[t] = h
            return torch.stack(outs, dim=1), (h,)  # (B, T, Hs)

        out, (h_n,) = self._run(x, (h0,), scan)
        return out, h_n


class LSTM(_Recurrent):
    """A multi-layer (optionally bidirectional) LSTM, equal to ``torch.nn.LSTM``.

    Parameter names and shapes are torch's (``weight_ih_l0`` is (4 Hs, I), gates stacked in
    the order i, f, g, o), so a ``torch.nn.LSTM(batch_first=True)`` state dict loads directly.

    Args:
        input_size: I, features per time step.
        hidden_size: Hs.
        num_layers: L stacked layers.
        bidirectional: also run a second LSTM right to left and concatenate its outputs.
        bias: use the biases b_ih and b_hh.
    """

    _gate_count = 4

    def forward(
        self,
        x: Tensor,
        state: tuple[Tensor, Tensor] | None = None,
        lengths: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Read the whole sequence.

        Args:
            x: (B, T, I) inputs, batch first.
            state: ``(h0, c0)``, each (L * dirs, B, Hs); zeros when None.
            lengths: (B,) real steps per row of a right-padded batch (None: no padding);
                padding steps leave the state unchanged, as with torch's packed sequences.

        Returns:
            ``(out, (h_n, c_n))``: out (B, T, dirs * Hs) the top layer's h_t at every step;
            h_n and c_n (L * dirs, B, Hs) the final hidden and cell states.
        """
        self._check_input(x)
        if state is None:
            zeros = x.new_zeros(self.num_layers * self.num_directions, x.shape[0],
                                self.hidden_size)
            state = (zeros, zeros)
        if not (isinstance(state, tuple | list) and len(state) == 2):
            raise ValueError("state must be a pair (h0, c0)")
        self._check_state("h0", state[0], x)
        self._check_state("c0", state[1], x)
        real = self._real_steps(x, lengths)  # (B, T) or None

        def scan(inp: Tensor, s0: tuple[Tensor, ...], params: tuple, reverse: bool):
            h, c = s0  # each (B, Hs)
            outs: list[Tensor] = [h] * inp.shape[1]
            for t in _time_order(inp.shape[1], reverse):
                h_t, c_t = lstm_step(inp[:, t], (h, c), *params)
                if real is not None:  # a padding step keeps the previous state
                    h_t = torch.where(real[:, t, None], h_t, h)
                    c_t = torch.where(real[:, t, None], c_t, c)
                h, c = h_t, c_t
                outs[t] = h
            return torch.stack(outs, dim=1), (h, c)  # (B, T, Hs)

        out, (h_n, c_n) = self._run(x, tuple(state), scan)
        return out, (h_n, c_n)

    @torch.no_grad()
    def trace(self, x: Tensor) -> dict[str, Tensor]:
        """Every gate and state of the first layer's left-to-right pass, for pictures.

        Args:
            x: (B, T, I) inputs.

        Returns:
            A dict with keys ``"i", "f", "g", "o", "c", "h"``, each (B, T, Hs): the gate
            activations and the cell and hidden states after every step.
        """
        self._check_input(x)
        params = self.cell_parameters(0)
        h = x.new_zeros(x.shape[0], self.hidden_size)
        c = torch.zeros_like(h)
        rows: dict[str, list[Tensor]] = {k: [] for k in "ifgoch"}
        for t in range(x.shape[1]):
            gates = lstm_gates(x[:, t], h, *params)
            c = gates.f * c + gates.i * gates.g
            h = gates.o * torch.tanh(c)
            for key, value in zip("ifgoch", (*gates, c, h), strict=True):
                rows[key].append(value)
        return {key: torch.stack(values, dim=1) for key, values in rows.items()}


Pooling = Literal["last", "mean", "max"]


def pool(out: Tensor, lengths: Tensor | None = None, how: Pooling = "last") -> Tensor:
    """Summarise a transducer's outputs into one vector per sequence (an acceptor).

    Padding positions (t >= lengths[b]) never contribute: "last" takes the output at the
    sequence's own last token, "mean" averages over its real tokens only, "max" ignores
    the padding.

    Args:
        out: (B, T, F) outputs at every step, e.g. an RNN's ``out``.
        lengths: (B,) the number of real tokens in each row (1..T); all T when None.
        how: ``"last"``, ``"mean"`` or ``"max"``.

    Returns:
        (B, F) one vector per sequence.
    """
    if out.dim() != 3:
        raise ValueError(f"expected out of shape (B, T, F), got {tuple(out.shape)}")
    B, T, _ = out.shape
    if lengths is None:
        lengths = torch.full((B,), T, dtype=torch.long, device=out.device)
    lengths = torch.as_tensor(lengths, device=out.device)
    if lengths.shape != (B,):
        raise ValueError(f"expected lengths of shape ({B},), got {tuple(lengths.shape)}")
    if bool((lengths < 1).any()) or bool((lengths > T).any()):
        raise ValueError(f"every length must be between 1 and T={T}, got {lengths.tolist()}")
    if how == "last":
        return out[torch.arange(B, device=out.device), lengths - 1]  # (B, F)
    real = torch.arange(T, device=out.device)[None, :] < lengths[:, None]  # (B, T)
    if how == "mean":
        total = out.masked_fill(~real[..., None], 0.0).sum(dim=1)  # (B, F)
        return total / lengths[:, None].to(out.dtype)
    if how == "max":
        return out.masked_fill(~real[..., None], float("-inf")).amax(dim=1)  # (B, F)
    raise ValueError(f'how must be "last", "mean" or "max", got {how!r}')


class RNNLM(nn.Module):
    """A recurrent language model: embed each token, run an RNN, predict the next token.

    The same interface as every language model of the course (``forward(idx) -> logits``),
    so ``coursepkg.lm.train`` and ``coursepkg.lm.generate`` serve it.

    Args:
        vocab_size: V.
        d_embed: E, the width of the token embeddings.
        d_hidden: Hs, the RNN's hidden size.
        cell: ``"lstm"`` (:class:`LSTM`) or ``"rnn"`` (:class:`ElmanRNN`).
        num_layers: stacked RNN layers.
    """

    def __init__(
        self,
        vocab_size: int,
        d_embed: int,
        d_hidden: int,
        cell: Literal["lstm", "rnn"] = "lstm",
        num_layers: int = 1,
    ) -> None:
        super().__init__()
        if cell not in ("lstm", "rnn"):
            raise ValueError(f'cell must be "lstm" or "rnn", got {cell!r}')
        self.cell = cell
        self.embed = nn.Embedding(vocab_size, d_embed)
        recurrent = LSTM if cell == "lstm" else ElmanRNN
        self.rnn = recurrent(d_embed, d_hidden, num_layers=num_layers)
        self.head = nn.Linear(d_hidden, vocab_size)

    def forward(self, idx: Tensor) -> Tensor:
        """Next-token logits at every position.

        Args:
            idx: (B, T) token ids.

        Returns:
            (B, T, V) logits; position t predicts token t + 1 from tokens 0..t.
        """
        x = self.embed(idx)  # (B, T, E)
        out, _ = self.rnn(x)  # (B, T, Hs)
        return self.head(out)  # (B, T, V)
