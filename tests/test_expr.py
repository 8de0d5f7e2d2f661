"""The safe expression language: what it computes, and what it refuses."""

from __future__ import annotations

import pytest
import torch

from hookviz.edits.expression import Expression, parse
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
    import math

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
