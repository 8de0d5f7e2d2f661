"""The model zoo of the conformance suite: small models with the hard cases of PyTorch's hooks.

Each entry builds ``(model, args, kwargs, loss_fn)`` from a fixed seed. Hugging Face models are built
from a config (no weights are downloaded).
"""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class TwoInputs(nn.Module):
    """``tanh(a(u)) * b(v)``: the data input ``v`` does not require grad."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 4), nn.Linear(3, 4)

    def forward(self, u, v):
        return torch.tanh(self.a(u)) * self.b(v)


class CalledTwiceShared(nn.Module):
    """One module called twice, and one parameter shared by two modules."""

    def __init__(self):
        super().__init__()
        self.twice = nn.Linear(4, 4)
        self.first, self.second = nn.Linear(4, 4), nn.Linear(4, 4)
        self.second.weight = self.first.weight

    def forward(self, x):
        return self.second(torch.tanh(self.first(self.twice(torch.tanh(self.twice(x))))))


class Cube(torch.autograd.Function):
    """``a * b * b`` with a hand-written backward and two saved tensors."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b * b, grad * 2 * a * b


class CubeModule(nn.Module):
    def forward(self, a, b):
        return Cube.apply(a, b)


class CustomFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.cube, self.out = nn.Linear(3, 3), nn.Linear(3, 3), CubeModule(), nn.Linear(3, 1)

    def forward(self, x):
        return self.out(self.cube(self.a(x), self.b(x)))


class PassThrough(nn.Module):
    """``nn.Identity`` and ``nn.Dropout`` in eval mode return their input itself."""

    def __init__(self):
        super().__init__()
        self.fc, self.identity, self.dropout, self.head = (
            nn.Linear(3, 4),
            nn.Identity(),
            nn.Dropout(0.3),
            nn.Linear(4, 1),
        )

    def forward(self, x):
        return self.head(self.dropout(self.identity(self.fc(x))))


class Frozen(nn.Module):
    def __init__(self):
        super().__init__()
        self.frozen, self.head = nn.Sequential(nn.Linear(3, 4), nn.ReLU()), nn.Linear(4, 2)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        return self.head(self.frozen(x))


class Checkpointed(nn.Module):
    def __init__(self, reentrant: bool = False):
        super().__init__()
        self.reentrant = reentrant
        self.block, self.head = nn.Sequential(nn.Linear(3, 4), nn.Tanh()), nn.Linear(4, 1)

    def forward(self, x):
        return self.head(checkpoint(self.block, x, use_reentrant=self.reentrant))


class Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn, self.head = cell(3, 5, batch_first=True), nn.Linear(5, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class LSTMState(nn.Module):
    """Returns LSTM's nested ``(out, (h, c))`` and uses all three."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, batch_first=True)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return out.sum() + (h * 2).sum() + c.pow(2).sum()


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention, self.head = nn.MultiheadAttention(8, 2, batch_first=True), nn.Linear(8, 1)

    def forward(self, x):
        out, _ = self.attention(x, x, x)
        return self.head(out)


class Embedded(nn.Module):
    def __init__(self, sparse: bool):
        super().__init__()
        self.embedding, self.head = nn.Embedding(10, 4, sparse=sparse), nn.Linear(4, 1)

    def forward(self, tokens):
        return self.head(self.embedding(tokens))


class ScaledEmbedding(nn.Module):
    """``x * embedding(tokens)``: a full hook on this module sees int64 zeros for ``tokens``."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, 3)

    def forward(self, x, tokens):
        return x * self.embedding(tokens)


class InPlace(nn.Module):
    """In-place ops on the data input, on an intermediate, by ``ReLU(inplace=True)`` and on a view."""

    def __init__(self):
        super().__init__()
        self.fc1, self.relu, self.fc2 = nn.Linear(3, 4), nn.ReLU(inplace=True), nn.Linear(4, 2)

    def forward(self, x):
        x.add_(1)
        h = self.fc1(x)
        h.mul_(2)
        h[:, 0].add_(3)  # in place on a view
        return self.fc2(self.relu(h))


@dataclasses.dataclass
class Result:
    logits: torch.Tensor
    hidden: torch.Tensor


class Outputs(nn.Module):
    """Submodules that return a tuple (also used inside), a dict, a nested tuple and a dataclass."""

    class Tuple(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            h = self.fc(x)
            return h, (h * h).sum()  # h is returned and also used inside

    class Dict(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return {"h": self.fc(x)}

    class Nested(nn.Module):
        def forward(self, x):
            return x * 2, (x * 3, None)

    class Data(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            h = self.fc(x)
            return Result(h.sum(1), h)

    def __init__(self):
        super().__init__()
        self.tuple, self.dict, self.nested, self.data = self.Tuple(), self.Dict(), self.Nested(), self.Data()

    def forward(self, x):
        h, inside = self.tuple(x)
        h = self.dict(h)["h"]
        a, (b, _) = self.nested(h)
        result = self.data(a + b)
        return (result.logits.sum() + result.hidden.pow(2).sum() + inside,)


class KeywordsOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, *, x, scale):
        return self.fc(x) * scale


class NoGradDetach(nn.Module):
    def __init__(self):
        super().__init__()
        self.stats, self.fc, self.head = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 1)

    def forward(self, x):
        with torch.no_grad():
            gate = torch.sigmoid(self.stats(x))
        h = self.fc(x)
        return self.head(h * gate + h.detach())


class NoGradGate(nn.Module):
    """``fc(x) * sigmoid(gate(x))`` with the gate computed under ``torch.no_grad()``: module ``gate``
    gets no gradient, so none of its backward hooks fire."""

    def __init__(self):
        super().__init__()
        self.gate, self.fc = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            gate = torch.sigmoid(self.gate(x))
        return (self.fc(x) * gate).sum()


class TanhMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class Shared(nn.Module):
    """``two(h, h)``: one tensor passed as two arguments, each used differently."""

    class Two(nn.Module):
        def forward(self, a, b):
            return a * 2 + b * 3

    def __init__(self):
        super().__init__()
        self.fc, self.two = nn.Linear(3, 3), self.Two()

    def forward(self, x):
        h = self.fc(x)
        return self.two(h, h)


class StepCounter(nn.Module):
    """A step counter used in the output: ``mul`` saves the buffer itself, at the value forward gave it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.register_buffer("n", torch.zeros(()))

    def forward(self, x):
        self.n += 1
        return self.lin(x) * self.n


class EMANormaliser(nn.Module):
    """Running mean and inverse scale updated in place under ``no_grad`` (an EMA), then used."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_buffer("mean", torch.zeros(3))
        self.register_buffer("inverse_scale", torch.ones(3))

    def forward(self, x):
        with torch.no_grad():
            self.mean.mul_(0.9).add_(0.1 * x.mean(0))
            self.inverse_scale.mul_(0.9).add_(0.1 / (x.std(0) + 1e-5))
        return self.lin((x - self.mean) * self.inverse_scale)


class BatchNormTrain(nn.Module):
    """BatchNorm in train mode: running statistics and ``num_batches_tracked`` change every forward."""

    def __init__(self):
        super().__init__()
        self.fc, self.norm, self.head = nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.norm(self.fc(x))))


class BufferReassigned(nn.Module):
    """A buffer reassigned in forward (``self.n = self.n + 1``): a new tensor takes its name."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.register_buffer("n", torch.ones(4))

    def forward(self, x):
        self.n = self.n * 2 + 1
        return self.lin(x) * self.n


class ParameterWrittenUnderNoGrad(nn.Module):
    """Parameters changed in place in forward, under ``no_grad`` and through ``.data``."""

    def __init__(self):
        super().__init__()
        self.lin, self.head = nn.Linear(3, 4), nn.Linear(4, 2)
        self.gain = nn.Parameter(torch.ones(4))

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.mul_(0.5)
            self.head.bias[0] = 3.0
        self.gain.data.add_(1)
        return self.head(torch.tanh(self.lin(x)) * self.gain)


def _with_user_hooks():
    model = TanhMLP()
    model.fc1.register_forward_pre_hook(lambda m, args: (args[0] * 1.5,))
    model.fc1.register_forward_hook(lambda m, args, out: out + 0.25)
    model.fc2.register_full_backward_hook(lambda m, grad_input, grad_output: (grad_input[0] * 2,))
    model.fc2.register_full_backward_pre_hook(lambda m, grad_output: (grad_output[0] * 3,))
    model.fc1.register_backward_hook(lambda m, grad_input, grad_output: None)
    model.fc2.weight.register_hook(lambda grad: grad * 0.5)
    return model


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, attn_implementation="eager"
    )
    model = GPT2LMHeadModel(config)
    tokens = torch.randint(0, 64, (2, 8))
    return model, (), {"input_ids": tokens, "labels": tokens}, lambda out: out.loss


def _bert():
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=64,
        max_position_embeddings=16,
        attn_implementation="eager",
    )
    model = BertForSequenceClassification(config)
    tokens = torch.randint(0, 64, (2, 8))
    labels = torch.tensor([0, 1])
    return model, (), {"input_ids": tokens, "labels": labels}, lambda out: out.loss


def _sum(out):
    return out.sum()


def twin_of(model: nn.Module) -> nn.Module:
    """A deep copy with the user's tensor hooks on its parameters too (deepcopy drops those)."""
    twin = copy.deepcopy(model)
    twins = dict(twin.named_parameters())
    for name, parameter in model.named_parameters():
        for hook in (parameter._backward_hooks or {}).values():
            twins[name].register_hook(hook)
    return twin


def build(name: str):
    """``(model, args, kwargs, loss_fn)`` of zoo entry ``name``, built from seed 0."""
    torch.manual_seed(0)
    x = torch.randn(4, 3)
    builders = {
        "input_without_grad": lambda: (TwoInputs(), (torch.randn(4, 3, requires_grad=True), x), {}, _sum),
        "called_twice_shared_parameter": lambda: (CalledTwiceShared(), (torch.randn(2, 4),), {}, _sum),
        "custom_function": lambda: (CustomFunction(), (x,), {}, _sum),
        "identity_eval_dropout": lambda: (PassThrough().eval(), (x,), {}, _sum),
        "frozen_submodule": lambda: (
            Frozen(),
            (x,),
            {},
            lambda out: F.cross_entropy(out, torch.tensor([0, 1, 1, 0])),
        ),
        "checkpoint_non_reentrant": lambda: (Checkpointed(), (x,), {}, _sum),
        "lstm": lambda: (Recurrent(nn.LSTM), (torch.randn(2, 5, 3),), {}, _sum),
        "lstm_nested_output": lambda: (LSTMState(), (torch.randn(2, 5, 3),), {}, None),
        "gru": lambda: (Recurrent(nn.GRU), (torch.randn(2, 5, 3),), {}, _sum),
        "multihead_attention_xxx": lambda: (SelfAttention(), (torch.randn(2, 5, 8),), {}, _sum),
        "embedding_dense": lambda: (Embedded(False), (torch.tensor([[1, 2, 4], [4, 3, 9]]),), {}, _sum),
        "embedding_sparse": lambda: (Embedded(True), (torch.tensor([[1, 2, 4], [4, 3, 9]]),), {}, _sum),
        "token_ids_beside_a_float_input": lambda: (
            ScaledEmbedding(),
            (torch.randn(4, 3, requires_grad=True), torch.tensor([1, 2, 4, 9])),
            {},
            _sum,
        ),
        "in_place": lambda: (InPlace(), (x,), {}, _sum),
        "outputs_tuple_dict_nested_dataclass": lambda: (Outputs(), (x,), {}, lambda out: out[0]),
        "keywords_only": lambda: (KeywordsOnly(), (), {"x": x, "scale": torch.tensor(2.0)}, _sum),
        "no_grad_and_detach": lambda: (NoGradDetach(), (x,), {}, _sum),
        "float64": lambda: (TanhMLP().double(), (x.double(),), {}, _sum),
        "bfloat16": lambda: (TanhMLP().to(torch.bfloat16), (x.to(torch.bfloat16),), {}, _sum),
        "complex64": lambda: (
            nn.Linear(3, 2).to(torch.complex64),
            (x.to(torch.complex64),),
            {},
            lambda out: out.abs().sum(),
        ),
        "shared_input": lambda: (Shared(), (x,), {}, _sum),
        "user_hooks_of_every_kind": lambda: (_with_user_hooks(), (x,), {}, _sum),
        "step_counter": lambda: (StepCounter(), (torch.randn(4, 3, requires_grad=True),), {}, _sum),
        "ema_normaliser": lambda: (EMANormaliser(), (torch.randn(4, 3, requires_grad=True),), {}, _sum),
        "batchnorm_train": lambda: (BatchNormTrain(), (torch.randn(4, 3, requires_grad=True),), {}, _sum),
        "buffer_reassigned": lambda: (BufferReassigned(), (torch.randn(4, 3, requires_grad=True),), {}, _sum),
        "parameter_written_under_no_grad": lambda: (
            ParameterWrittenUnderNoGrad(),
            (torch.randn(4, 3, requires_grad=True),),
            {},
            _sum,
        ),
        "transformer_encoder_layer": lambda: (
            nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True),
            (torch.randn(2, 5, 8, requires_grad=True),),
            {},
            _sum,
        ),
        "gpt2": _gpt2,
        "bert": _bert,
    }
    return builders[name]()


# Models whose forward changes their own state (buffers, parameters): hookviz must compute what a plain
# forward + backward computes, and leave the state as it was.
STATEFUL = [
    "step_counter",
    "ema_normaliser",
    "batchnorm_train",
    "buffer_reassigned",
    "parameter_written_under_no_grad",
]

NAMES = [
    "input_without_grad",
    "called_twice_shared_parameter",
    "custom_function",
    "identity_eval_dropout",
    "frozen_submodule",
    "checkpoint_non_reentrant",
    "lstm",
    "lstm_nested_output",
    "gru",
    "multihead_attention_xxx",
    "embedding_dense",
    "embedding_sparse",
    "token_ids_beside_a_float_input",
    "in_place",
    "outputs_tuple_dict_nested_dataclass",
    "keywords_only",
    "no_grad_and_detach",
    "float64",
    "bfloat16",
    "complex64",
    "shared_input",
    "user_hooks_of_every_kind",
    "step_counter",
    "ema_normaliser",
    "batchnorm_train",
    "buffer_reassigned",
    "parameter_written_under_no_grad",
    "transformer_encoder_layer",
    "gpt2",
    "bert",
]
