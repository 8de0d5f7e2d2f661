"""The safe expression language: what it computes, and what it refuses."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from hookviz.edits.expression import FUNCTIONS, Expression, broadcast_shape, parse
from hookviz.errors import ExpressionError

GRAD = torch.tensor([8.0, -6.0])


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("grad + 888888", GRAD + 888888),
        ("grad * 3", GRAD * 3),
        ("zeros_like(grad)", torch.zeros(2)),
        ("0", torch.zeros(2)),
        ("clamp(grad, -1, 1)", torch.tensor([1.0, -1.0])),
        ("clamp(grad, min=0)", torch.tensor([8.0, 0.0])),
        ("where(grad > 0, grad, 0)", torch.tensor([8.0, 0.0])),
        ("grad / norm(grad)", GRAD / GRAD.norm()),
        ("-grad ** 2", -(GRAD**2)),
        ("grad * [1, 0]", torch.tensor([8.0, 0.0])),
        ("abs(grad) + sign(grad) * mean(grad)", GRAD.abs() + GRAD.sign() * GRAD.mean()),
        ("grad if sum(grad) > 0 else -grad", GRAD),
        ("grad * (abs(grad) < 7)", torch.tensor([0.0, -6.0])),
        ("exp(log(abs(grad)))", GRAD.abs().log().exp()),
        ("grad[0] + grad * 0", torch.tensor([8.0, 8.0])),
    ],
)
def test_expressions_compute_what_torch_computes(source, expected):
    assert torch.equal(Expression(source)(GRAD), expected)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("grad +", "syntax error"),
        ("import os", "syntax error"),
        ("__import__('os').system('true')", "not allowed"),
        ("grad.__class__", "attribute access"),
        ("grad.numpy()", "attribute access"),
        ("open('/etc/passwd')", "the function 'open'"),
        ("eval('1')", "the function 'eval'"),
        ("(lambda: 1)()", "this call"),
        ("[x for x in grad]", "ListComp"),
        ("'text'", "the literal 'text'"),
        ("os", "the name 'os'"),
        ("grad[grad > 0]", "index that is not an integer literal"),
        ("grad ** 5000", "exponent 5000"),
        ("9 ** 9 ** 9", "exponent 387420489"),
        ("grad " + "+ 1 " * 400, "parts; the limit"),
        ("x" * 3000, "characters long"),
        ("zeros_like(grad, **{})", "keyword argument None"),
    ],
)
def test_forbidden_or_unbounded_expressions_are_refused(source, message):
    with pytest.raises(ExpressionError, match=message):
        Expression(source)(GRAD)


def test_work_is_bounded_at_run_time():
    column = [[1.0]] * 50  # broadcasting [2000] with [50, 1] would make 100,000 elements
    with pytest.raises(ExpressionError, match="gives 100000 elements, more than"):
        Expression(f"grad * {column}")(torch.ones(2000))
    with pytest.raises(ExpressionError, match="division by zero"):
        Expression("1 // 0")(GRAD)


def test_as_torch_code_is_plain_pytorch():
    code = Expression("clamp(grad * [1, 2], min=0) + pi").as_torch_code()
    assert (
        code
        == "torch.clamp(grad * torch.tensor([1, 2], dtype=grad.dtype, device=grad.device), min=0) + math.pi"
    )

    assert torch.equal(
        eval(code, {"torch": torch, "math": math, "grad": GRAD}),
        Expression("clamp(grad * [1, 2], min=0) + pi")(GRAD),
    )


def test_a_syntax_error_names_the_column_as_typed_leading_spaces_included():
    # "grad +* 2": the parser stops at the "*", column 7; three leading spaces move it to 10.
    for source, column in (("grad +* 2", 7), ("   grad +* 2", 10)):
        with pytest.raises(ExpressionError, match=f"at column {column}:"):
            parse(source)
        assert source[column - 1] == "*"


def _peak_rss_since_reset() -> tuple[int, int]:
    """(current, peak) resident memory in bytes, the peak counted since the last reset (Linux)."""
    status = dict(
        line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if line.startswith("Vm")
    )
    return int(status["VmRSS"].split()[0]) * 1024, int(status["VmHWM"].split()[0]) * 1024


class _Outputs(TorchFunctionMode):
    """Every torch call made from Python inside it (functions, Tensor methods, indexing), each
    with the largest number of elements of a tensor it returned: the work an expression did."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, (tuple, list)) else [out]
        largest = max((t.numel() for t in outputs if isinstance(t, torch.Tensor)), default=0)
        self.calls.append((getattr(func, "__name__", str(func)), largest))
        return out


@pytest.mark.parametrize(
    "source",
    [
        "maximum(grad[:, 0], grad[:, 0:1])",
        "minimum(grad[:, 0], grad[:, 0:1])",
        "where(grad[:, 0] > 0, grad[:, 0:1], 0)",
        "where(grad[:, 0:1] > 0, 1, grad[:, 0])",
        "clamp(grad[:, 0], min=grad[:, 0:1])",
        "clamp(grad[:, 0], grad[:, 0:1], grad[:, 1:2])",
        "grad[:, 0] + grad[:, 0:1]",
        "grad[:, 0] > grad[:, 0:1]",
    ],
)
def test_a_broadcast_over_the_cap_is_refused_before_it_is_computed(source):
    # A 20000x4 embedding gradient: [20000] against [20000, 1] broadcasts to 4e8 elements (1.6 GB of
    # float32); the cap is 4x grad's 80000. Refused from the shapes: no torch call made a tensor over
    # the cap, and the peak memory stays under 50 MB (computing the result first took +1.5 GB).
    grad = torch.randn(20000, 4)
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the current RSS
    before, _ = _peak_rss_since_reset()
    with (
        _Outputs() as work,
        pytest.raises(
            ExpressionError, match=r"gives 400000000 elements, more than 4x grad's 80000; refused, at column"
        ),
    ):
        Expression(source)(grad)
    _, peak = _peak_rss_since_reset()
    assert peak - before < 50 * 2**20, peak - before
    assert max((n for _, n in work.calls), default=0) <= 4 * grad.numel(), work.calls
    # the same shapes within the cap are computed, as torch computes them; the calls are seen
    small = grad[:2]
    with _Outputs() as work:
        Expression(source)(small)
    assert any(n == 4 for _, n in work.calls), work.calls  # the [2] x [2, 1] broadcast: 4 elements
    assert torch.equal(
        Expression("maximum(grad[:, 0], grad[:, 0:1])")(small), torch.maximum(small[:, 0], small[:, 0:1])
    )


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "grad + 10.0 ** 400",
            r"too large for a float, at column 8 .*\(10\.0 \*\* 400\); keep numbers below",
        ),
        ("2 ** 1024", r"gave the number of 1025 bits, which a torch.float32 tensor cannot hold"),
        ("grad + 2 ** 1024", r"too large for a float, at column 1"),
        ("grad * 99999999999999999999999999999999999999999", r"too large for a float"),
        ("full_like(grad, 10 ** 400)", r"full_like\(\.\.\.\) failed: .*at column 1.*torch\.full_like"),
        ("[10 ** 400]", r"list literal .*at column 1"),
        ("grad[::-1]", r"slice step must be a positive integer, got -1 .*column 8.*use flip\(grad, \[0\]\)"),
        ("grad[::0]", r"slice step must be a positive integer, got 0"),
        ("grad[5]", r"index out of range for shape \[2\].*at column 1.*index within the shape"),
        ("sum(grad, dim=7)", r"sum\(\.\.\.\) failed: Dimension out of range.*at column 1"),
        ("grad + [1, 2, 3]", r"shapes \[2\] and \[3\] do not broadcast.*at column 1"),
        ("(-8) ** 0.5", r"complex number, at column 1"),
        ("sum(grad, [1.5])", r"list of dimensions must hold integers, at column 11"),
    ],
)
def test_every_failure_is_an_expression_error_naming_the_column_and_the_fix(source, message):
    with pytest.raises(ExpressionError, match=message):
        Expression(source)(GRAD)


def test_a_list_of_dimensions_is_a_tuple_of_ints_as_torch_takes_it():
    grad = torch.arange(6.0).reshape(2, 3)
    compared = 0
    for source, expected in (
        ("flip(grad, [0])", torch.flip(grad, [0])),
        ("flip(grad, dims=(0, 1))", torch.flip(grad, (0, 1))),
        ("roll(grad, [1], [1])", torch.roll(grad, [1], [1])),
        ("mean(grad, dim=(0, 1))", torch.mean(grad, dim=(0, 1))),
        ("grad - sum(grad, [1], keepdim=True)", grad - torch.sum(grad, [1], keepdim=True)),
    ):
        expression = Expression(source)
        assert torch.equal(expression(grad), expected), source
        code = expression.as_torch_code()
        assert torch.equal(eval(code, {"torch": torch, "math": math, "grad": grad}), expected), code
        compared += 1
    assert compared == 5


@pytest.mark.filterwarnings("ignore:std.*degrees of freedom:UserWarning")
def test_a_systematic_sweep_raises_only_expression_errors():
    """Every operator and function of the language over hostile operands, on gradients of four
    shapes and dtypes: each expression gives a tensor within the cap or an ExpressionError that names
    a column; nothing else escapes."""
    operands = [
        "grad", "grad[:, 0]", "grad[:, 0:1]", "grad[0]", "grad[-1]", "2", "-1.5", "0", "1e308", "inf", "nan",
        "2 ** 1024", "10.0 ** 300", "[1, 2]", "[[1], [2]]", "(grad > 0)", "True",
    ]  # fmt: skip
    binary = ["+", "-", "*", "/", "//", "%", "**", "<", "==", "&", "|"]
    sources = [f"{a} {op} {b}" for a in operands for op in binary for b in operands]
    sources += [f"{name}({a})" for name in FUNCTIONS for a in operands]
    sources += [
        f"{name}({a}, {b})" for name in ("maximum", "minimum", "clamp") for a in operands for b in operands
    ]
    sources += [f"where({a} > 0, {a}, {b})" for a in operands for b in operands]
    sources += [
        f"{name}(grad, dim={d})" for name in ("sum", "mean", "amax", "std", "norm") for d in (7, -3, 1)
    ]
    sources += ["grad[9]", "grad[-9]", "grad[:, 9]", "grad[1:0]", "grad[0, 0, 0]", "~grad", "-(grad > 0)"]
    grads = [torch.randn(50, 4), torch.tensor(3.0), torch.randn(3, dtype=torch.bfloat16), torch.zeros(0, 4)]
    outcomes = {"tensor": 0, "refused": 0}
    for grad in grads:
        cap = max(grad.numel() * 4, 4096)
        for source in sources:
            try:
                result = Expression(source)(grad)
            except ExpressionError as error:
                assert "column" in str(error) or "expression '" in str(error), (source, str(error))
                outcomes["refused"] += 1
                continue
            assert isinstance(result, torch.Tensor) and result.numel() <= cap, source
            outcomes["tensor"] += 1
    assert sum(outcomes.values()) == len(grads) * len(sources) > 10000
    assert outcomes["refused"] > 1000 and outcomes["tensor"] > 1000, outcomes


def test_broadcast_shape_is_torchs_rule():
    rng = random.Random(4)
    compared = refused = 0
    for _ in range(3000):
        shapes = [
            tuple(rng.choice([0, 1, 1, 2, 3]) for _ in range(rng.randrange(4)))
            for _ in range(rng.randint(1, 3))
        ]
        try:
            expected = tuple(torch.broadcast_shapes(*shapes))
        except RuntimeError:
            with pytest.raises(ExpressionError, match="sizes .* at dimension -"):
                broadcast_shape(*shapes)
            refused += 1
            continue
        assert broadcast_shape(*shapes) == expected, shapes
        compared += 1
    assert compared + refused == 3000 and compared > 500 and refused > 500
