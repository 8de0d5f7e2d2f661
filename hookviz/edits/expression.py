"""The safe expression language for gradient edits, e.g. ``grad + 888888`` or ``clamp(grad, -1, 1)``.

An expression is parsed with :mod:`ast` and interpreted by walking the tree; Python's ``eval`` and
``exec`` are never called. What is allowed:

* the name ``grad`` (the gradient at the hook site) and the constants ``pi``, ``e``, ``inf``, ``nan``;
* int, float and bool literals, and list/tuple literals of them (they become tensors of ``grad``'s
  dtype and device);
* ``+ - * / // % **`` and unary ``- +``, comparisons ``< <= > >= == !=``, ``a if cond else b`` on
  numbers, and ``&``, ``|``, ``~`` on boolean tensors;
* calls of the functions in :data:`FUNCTIONS` (all map to ``torch`` functions of the same name),
  with positional arguments and the keyword arguments ``min``, ``max``, ``dim``, ``keepdim``, ``p``;
* indexing ``grad[0]``, ``grad[1:3]``, ``grad[:, 0]`` with integer literals.

Everything else (attributes, imports, lambdas, comprehensions, other names, strings) is refused when
the edit is made. Work is bounded: the expression text, its node count and its nesting depth are
capped, a power's exponent must be a number of magnitude at most :data:`MAX_EXPONENT`, and every
intermediate tensor may hold at most :data:`MAX_ELEMENTS_FACTOR` times ``grad``'s element count.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass

import torch

from hookviz.errors import ExpressionError

MAX_SOURCE_LENGTH = 2000
MAX_NODES = 300
MAX_DEPTH = 30
MAX_EXPONENT = 1024
MAX_ELEMENTS_FACTOR = 4
MAX_LITERAL_ELEMENTS = 4096

FUNCTIONS = {
    name: getattr(torch, name)
    for name in (
        "zeros_like",
        "ones_like",
        "full_like",
        "randn_like",
        "rand_like",
        "clamp",
        "where",
        "abs",
        "sign",
        "sqrt",
        "exp",
        "log",
        "log10",
        "mean",
        "sum",
        "norm",
        "tanh",
        "sigmoid",
        "relu",
        "maximum",
        "minimum",
        "isnan",
        "isinf",
        "isfinite",
        "nan_to_num",
        "flip",
        "roll",
        "std",
        "amax",
        "amin",
        "round",
        "floor",
        "ceil",
        "square",
    )
}
CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan}
KEYWORDS = {"min", "max", "dim", "keepdim", "p", "nan", "posinf", "neginf", "shifts", "dims"}
# Arguments that take a list of dimensions or shifts (``flip(grad, [0])``, ``sum(grad, dim=(0, 1))``):
# there a list literal is a Python tuple of ints, not a tensor. Positions count from 0.
_INTEGER_LIST_KEYWORDS = {"dim", "dims", "shifts"}
_INTEGER_LIST_POSITIONS = {
    "flip": (1,),
    "roll": (1, 2),
    "sum": (1,),
    "mean": (1,),
    "amax": (1,),
    "amin": (1,),
    "std": (1,),
    "norm": (2,),
}

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
}
_COMPARE = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}


@dataclass(frozen=True)
class Expression:
    """A parsed, checked edit expression; call it on a gradient.

    Args:
        source: the text, e.g. ``"grad * 3"``.

    Raises:
        ExpressionError: on a syntax error, a forbidden construct, or a bound exceeded.
    """

    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "_tree", parse(self.source))

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        """Evaluate on ``grad``; returns a tensor (a number result is broadcast to grad's shape).

        Raises:
            ExpressionError: for every failure, naming the column of the part that failed and the
                fix: a result larger than the cap (refused from the operands' shapes, before it is
                computed), a number too large for a float, an index or dimension out of range, a
                slice step that is not positive, shapes that do not broadcast, a torch function
                that refuses its arguments.
        """
        result = _Interpreter(grad, self.source).visit(self._tree.body)
        if isinstance(result, torch.Tensor):
            return result
        if isinstance(result, (int, float, bool)):
            try:
                return torch.full_like(grad, result)
            except (RuntimeError, OverflowError) as error:
                raise ExpressionError(
                    f"expression {self.source!r} gave the number {_short(result)}, which a {grad.dtype} "
                    f"tensor cannot hold ({error}); keep numbers within the gradient's dtype"
                ) from None
        raise ExpressionError(
            f"expression {self.source!r} gave a {type(result).__name__}, not a tensor; "
            "write an expression over grad such as 'grad * 3'"
        )

    def as_torch_code(self) -> str:
        """The same expression as plain PyTorch code over a variable named ``grad``."""
        return ast.unparse(_ToTorch().visit(parse(self.source)).body)


def parse(source: str) -> ast.Expression:
    """Parse and check ``source``; returns the tree. Raises ExpressionError."""
    if not isinstance(source, str):
        raise ExpressionError(f"an edit expression must be a string, got {type(source).__name__}")
    if len(source) > MAX_SOURCE_LENGTH:
        raise ExpressionError(
            f"expression is {len(source)} characters long; the limit is {MAX_SOURCE_LENGTH}: "
            "write a shorter expression, or pass a callable grad -> Tensor"
        )
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as error:
        # Parsed without its leading spaces: the column counts them again, as the user typed it.
        column = (error.offset or 1) + len(source) - len(source.lstrip())
        raise ExpressionError(
            f"syntax error in {source!r} at column {column}: {error.msg}; "
            "write an expression over grad such as 'grad * 3' or 'zeros_like(grad)'"
        ) from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ExpressionError(
            f"expression has {len(nodes)} parts; the limit is {MAX_NODES}: write a shorter expression, "
            "or pass a callable grad -> Tensor"
        )
    _check(tree.body, source, depth=0)
    return tree


def _column(node: ast.AST, source: str) -> str:
    """Where ``node`` starts in ``source`` as the user typed it (leading spaces counted)."""
    line = getattr(node, "lineno", 1)
    column = getattr(node, "col_offset", 0) + 1 + (len(source) - len(source.lstrip()) if line == 1 else 0)
    return f"column {column}" if line == 1 else f"line {line}, column {column}"


def _forbidden(node: ast.AST, source: str, what: str) -> ExpressionError:
    return ExpressionError(
        f"{what} is not allowed in edit expressions ({source!r}, at {_column(node, source)}); use grad, "
        f"numbers, arithmetic, comparisons and the functions {', '.join(sorted(FUNCTIONS))}"
    )


def _check(node: ast.AST, source: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ExpressionError(
            f"expression nests deeper than {MAX_DEPTH} levels (at {_column(node, source)}): "
            "write it flatter, or pass a callable grad -> Tensor"
        )
    match node:
        case ast.Constant(value=value):
            if isinstance(value, bool) or isinstance(value, (int, float)):
                return
            raise _forbidden(node, source, f"the literal {value!r}")
        case ast.Name(id=name):
            if name != "grad" and name not in CONSTANTS:
                raise _forbidden(node, source, f"the name {name!r}")
        case ast.BinOp(left=left, op=op, right=right):
            if type(op) not in _BINARY:
                raise _forbidden(node, source, f"the operator {type(op).__name__}")
            _check(left, source, depth + 1)
            _check(right, source, depth + 1)
        case ast.UnaryOp(op=op, operand=operand):
            if type(op) not in _UNARY:
                raise _forbidden(node, source, f"the operator {type(op).__name__}")
            _check(operand, source, depth + 1)
        case ast.Compare(left=left, ops=ops, comparators=comparators):
            if len(ops) != 1 or type(ops[0]) not in _COMPARE:
                raise _forbidden(node, source, "a chained or non-numeric comparison")
            _check(left, source, depth + 1)
            _check(comparators[0], source, depth + 1)
        case ast.IfExp(test=test, body=body, orelse=orelse):
            for part in (test, body, orelse):
                _check(part, source, depth + 1)
        case ast.Call(func=func, args=args, keywords=keywords):
            if isinstance(func, ast.Attribute):
                raise _forbidden(node, source, f"attribute access ('.{func.attr}')")
            if not isinstance(func, ast.Name) or func.id not in FUNCTIONS:
                what = f"the function {func.id!r}" if isinstance(func, ast.Name) else "this call"
                raise _forbidden(node, source, what)
            for keyword in keywords:
                if keyword.arg not in KEYWORDS:
                    raise _forbidden(node, source, f"the keyword argument {keyword.arg!r}")
                _check(keyword.value, source, depth + 1)
            for arg in args:
                if isinstance(arg, ast.Starred):
                    raise _forbidden(node, source, "argument unpacking")
                _check(arg, source, depth + 1)
        case ast.List(elts=elements) | ast.Tuple(elts=elements):
            for element in elements:
                _check(element, source, depth + 1)
        case ast.Subscript(value=value, slice=index):
            _check(value, source, depth + 1)
            _check_index(index, source)
        case ast.Attribute(attr=attr):
            raise _forbidden(node, source, f"attribute access ('.{attr}')")
        case _:
            raise _forbidden(node, source, f"the construct {type(node).__name__}")


def _check_index(index: ast.AST, source: str) -> None:
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    for part in parts:
        if isinstance(part, ast.Slice):
            for bound in (part.lower, part.upper, part.step):
                if bound is not None:
                    _check_integer_literal(bound, source)
            if part.step is not None and _literal_int(part.step) <= 0:
                raise ExpressionError(
                    f"a slice step must be a positive integer, got {_literal_int(part.step)} in {source!r} "
                    f"(at {_column(part.step, source)}); to reverse, use flip(grad, [0])"
                )
        else:
            _check_integer_literal(part, source)


def _check_integer_literal(node: ast.AST, source: str) -> None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    if not (isinstance(node, ast.Constant) and type(node.value) is int):
        raise _forbidden(node, source, "an index that is not an integer literal")


class _Interpreter:
    """Walks a checked tree; every operation is a torch or float operation with bounded cost.

    The size of every tensor result is known from its operands' shapes (:func:`broadcast_shape`, the rule of
    https://pytorch.org/docs/stable/notes/broadcasting.html) and checked against the cap before the
    operation runs; every failure is an ExpressionError naming the column of the part that failed.
    """

    def __init__(self, grad: torch.Tensor, source: str):
        self.grad, self.source = grad, source
        self.max_elements = max(grad.numel() * MAX_ELEMENTS_FACTOR, MAX_LITERAL_ELEMENTS)

    def error(self, node: ast.AST, problem: str, fix: str) -> ExpressionError:
        """``problem`` at ``node``'s place in the source, and how to fix it."""
        part = ast.get_source_segment(self.source.strip(), node) or ""
        return ExpressionError(
            f"{problem}, at {_column(node, self.source)} of {self.source!r} ({part}); {fix}"
        )

    def visit(self, node: ast.AST):
        result = getattr(self, f"_{type(node).__name__}")(node)
        if isinstance(result, torch.Tensor) and result.numel() > self.max_elements:
            raise self.error(
                node,
                f"an intermediate result has {result.numel()} elements, more than "
                f"{MAX_ELEMENTS_FACTOR}x grad's {self.grad.numel()}; refused",
                "index or reduce so that results stay at grad's size",
            )
        if isinstance(result, complex):
            raise self.error(
                node, "the result is a complex number", "keep powers of negative numbers integral"
            )
        return result

    def _Constant(self, node: ast.Constant):
        return node.value

    def _Name(self, node: ast.Name):
        return self.grad if node.id == "grad" else CONSTANTS[node.id]

    def _List(self, node: ast.List | ast.Tuple):
        values = [self.visit(element) for element in node.elts]
        # Counted before anything is built: [grad, grad, ...] of a large grad must not get copied.
        elements = sum(v.numel() if isinstance(v, torch.Tensor) else 1 for v in values)
        if elements > MAX_LITERAL_ELEMENTS:
            raise self.error(
                node,
                f"a list literal may hold at most {MAX_LITERAL_ELEMENTS} numbers; this one holds {elements}",
                "use grad itself or a function of it instead of listing its values",
            )
        try:
            return torch.tensor(
                [v.tolist() if isinstance(v, torch.Tensor) else v for v in values],
                dtype=self.grad.dtype,
                device=self.grad.device,
            )
        except (TypeError, ValueError, RuntimeError, OverflowError) as error:
            raise self.error(
                node,
                f"list literal is not a rectangular list of numbers a {self.grad.dtype} tensor holds "
                f"({_first_line(error)})",
                "write rows of equal length, with numbers in the gradient's range",
            ) from None

    _Tuple = _List

    def _BinOp(self, node: ast.BinOp):
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(node.op, ast.Pow):
            self.check_power(node, left, right)
        self.check_size(node, left, right)
        return self.apply(node, _BINARY[type(node.op)], left, right)

    def _UnaryOp(self, node: ast.UnaryOp):
        operand = self.visit(node.operand)
        if isinstance(node.op, ast.Invert) and not (
            isinstance(operand, torch.Tensor) and operand.dtype == torch.bool
        ):
            raise self.error(
                node, "'~' applies only to boolean tensors", "write it on a comparison: ~(grad > 0)"
            )
        try:
            return _UNARY[type(node.op)](operand)
        except (TypeError, RuntimeError) as error:
            raise self.error(
                node,
                f"operation failed: {_first_line(error)}",
                "negate numbers, not comparisons: ~(grad > 0)",
            ) from None

    def _Compare(self, node: ast.Compare):
        left, right = self.visit(node.left), self.visit(node.comparators[0])
        self.check_size(node, left, right)
        return self.apply(node, _COMPARE[type(node.ops[0])], left, right)

    def _IfExp(self, node: ast.IfExp):
        test = self.visit(node.test)
        if isinstance(test, torch.Tensor):
            if test.numel() != 1:
                raise self.error(
                    node,
                    "'a if cond else b' needs a single truth value",
                    "for elementwise choice use where(cond, a, b)",
                )
            test = bool(test)
        return self.visit(node.body) if test else self.visit(node.orelse)

    def _Call(self, node: ast.Call):
        name = node.func.id
        positions = _INTEGER_LIST_POSITIONS.get(name, ())
        args = [self.argument(arg, i in positions) for i, arg in enumerate(node.args)]
        kwargs = {kw.arg: self.argument(kw.value, kw.arg in _INTEGER_LIST_KEYWORDS) for kw in node.keywords}
        if name == "where" and len(args) == 3:
            args = [self.as_tensor(node, a) for a in args]
        elif name in {"maximum", "minimum"}:
            args = [self.as_tensor(node, a) for a in args]
        elif not any(isinstance(a, torch.Tensor) for a in args):
            raise self.error(node, f"{name}(...) needs a tensor argument", f"pass grad, e.g. {name}(grad)")
        # Every function here is elementwise over its broadcast tensor operands (positional, and
        # clamp's min / max) or reduces one tensor: its result is at most as large as its operands
        # broadcast together.
        self.check_size(node, *args, *(kwargs[k] for k in ("min", "max") if k in kwargs))
        try:
            return FUNCTIONS[name](*args, **kwargs)
        except (TypeError, RuntimeError, ValueError, IndexError, OverflowError) as error:
            raise self.error(
                node,
                f"{name}(...) failed: {_first_line(error)}",
                f"check its arguments against torch.{name} (https://pytorch.org/docs/stable/generated/"
                f"torch.{name}.html); grad has shape {list(self.grad.shape)}",
            ) from None

    def _Subscript(self, node: ast.Subscript):
        value = self.visit(node.value)
        if not isinstance(value, torch.Tensor):
            raise self.error(node, "only tensors can be indexed", "index grad or a tensor made from it")
        try:
            return value[_index(node.slice)]
        except (IndexError, ValueError, TypeError, RuntimeError, OverflowError) as error:
            raise self.error(
                node,
                f"index out of range for shape {list(value.shape)}: {_first_line(error)}",
                "index within the shape (negative indices count from the end)",
            ) from None

    def argument(self, node: ast.AST, integers: bool):
        """A call's argument; a list literal where the function takes dimensions is a tuple of ints."""
        if not (integers and isinstance(node, (ast.List, ast.Tuple))):
            return self.visit(node)
        values = [self.visit(element) for element in node.elts]
        if not all(type(v) is int for v in values):
            raise self.error(node, "a list of dimensions must hold integers", "write e.g. [0] or (0, 1)")
        return tuple(values)

    def as_tensor(self, node: ast.AST, value) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value
        try:
            return torch.tensor(value, dtype=self.grad.dtype, device=self.grad.device)
        except (TypeError, RuntimeError, OverflowError) as error:
            raise self.error(
                node,
                f"the number {_short(value)} does not fit a {self.grad.dtype} tensor ({_first_line(error)})",
                "keep numbers within the gradient's dtype",
            ) from None

    def check_size(self, node: ast.AST, *operands) -> None:
        """Refuse, before computing, a result larger than the cap, from the operands' shapes."""
        shapes = [o.shape for o in operands if isinstance(o, torch.Tensor)]
        if len(shapes) < 2:
            return
        shown = [str(list(s)) for s in shapes]
        try:
            shape = broadcast_shape(*shapes)
        except ExpressionError as error:
            raise self.error(
                node,
                f"shapes {' and '.join(shown)} do not broadcast ({error})",
                "index so that the shapes match (https://pytorch.org/docs/stable/notes/broadcasting.html)",
            ) from None
        if math.prod(shape) > self.max_elements:
            raise self.error(
                node,
                f"broadcasting {' with '.join(shown)} gives {math.prod(shape)} elements, "
                f"more than {MAX_ELEMENTS_FACTOR}x grad's {self.grad.numel()}; refused",
                "index so that the shapes match, e.g. grad[:, 0:1] with grad[:, 1:2], not grad[:, 0] with "
                "grad[:, 0:1]",
            )

    def check_power(self, node: ast.BinOp, base, exponent) -> None:
        if isinstance(exponent, torch.Tensor):
            raise self.error(node, "a power's exponent must be a number, not a tensor", "write grad ** 2")
        if abs(exponent) > MAX_EXPONENT:
            raise self.error(
                node,
                f"exponent {exponent} is larger than {MAX_EXPONENT} in magnitude; refused",
                f"use an exponent between -{MAX_EXPONENT} and {MAX_EXPONENT}",
            )
        if not isinstance(base, torch.Tensor) and isinstance(base, int) and isinstance(exponent, int):
            if abs(base) > 2**64:
                raise self.error(
                    node, "integer power of a huge number refused", "use a float, e.g. 1e20 ** 2"
                )

    def apply(self, node: ast.AST, function, left, right):
        try:
            return function(left, right)
        except ZeroDivisionError:
            raise self.error(
                node, "division by zero between two numbers", "divide by a non-zero number"
            ) from None
        except OverflowError:
            raise self.error(
                node,
                "a number is too large for a float",
                "keep numbers below 1.8e308 (float64's largest), or use inf",
            ) from None
        except (TypeError, RuntimeError, ValueError) as error:
            raise self.error(
                node,
                f"operation failed: {_first_line(error)}",
                f"combine tensors whose shapes broadcast with grad's {list(self.grad.shape)}, and numbers "
                "within the gradient's dtype",
            ) from None


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape that tensors of ``shapes`` broadcast to, as ``torch.broadcast_shapes`` gives it
    (https://pytorch.org/docs/stable/notes/broadcasting.html: align from the last dimension; sizes
    must be equal or 1), in plain Python: ``torch.broadcast_shapes`` imports ``torch._refs`` on its first
    call, which costs more than the refusal this check exists for.

    Raises:
        ExpressionError: two sizes of one dimension differ and neither is 1, naming the dimension.
    """
    result: list[int] = []
    for dimension in range(1, max(len(shape) for shape in shapes) + 1):
        sizes = {shape[-dimension] for shape in shapes if len(shape) >= dimension} - {1}
        if len(sizes) > 1:
            raise ExpressionError(f"sizes {sorted(sizes)} at dimension -{dimension} differ and neither is 1")
        result.append(sizes.pop() if sizes else 1)
    return tuple(reversed(result))


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _short(number) -> str:
    """A number for a message: a huge integer by its digit count, not its digits."""
    if isinstance(number, int) and number.bit_length() > 100:
        return f"of {number.bit_length()} bits"
    return repr(number)


def _index(node: ast.AST):
    if isinstance(node, ast.Tuple):
        return tuple(_index(part) for part in node.elts)
    if isinstance(node, ast.Slice):
        return slice(*(None if b is None else _literal_int(b) for b in (node.lower, node.upper, node.step)))
    return _literal_int(node)


def _literal_int(node: ast.AST) -> int:
    if isinstance(node, ast.UnaryOp):
        return -node.operand.value
    return node.value


class _ToTorch(ast.NodeTransformer):
    """Rewrites names of whitelisted functions and constants to ``torch.`` / ``math.`` ones."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        positions = _INTEGER_LIST_POSITIONS.get(node.func.id, ())
        node.args = [
            arg if i in positions and isinstance(arg, (ast.List, ast.Tuple)) else self.visit(arg)
            for i, arg in enumerate(node.args)
        ]
        for keyword in node.keywords:
            if not (
                keyword.arg in _INTEGER_LIST_KEYWORDS and isinstance(keyword.value, (ast.List, ast.Tuple))
            ):
                keyword.value = self.visit(keyword.value)
        node.func = ast.Attribute(value=ast.Name("torch", ast.Load()), attr=node.func.id, ctx=ast.Load())
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in CONSTANTS:
            return ast.Attribute(value=ast.Name("math", ast.Load()), attr=node.id, ctx=ast.Load())
        return node

    def visit_List(self, node: ast.List | ast.Tuple) -> ast.AST:
        return ast.Call(
            func=ast.Attribute(value=ast.Name("torch", ast.Load()), attr="tensor", ctx=ast.Load()),
            args=[ast.List(elts=node.elts, ctx=ast.Load())],
            keywords=[
                ast.keyword("dtype", ast.parse("grad.dtype", mode="eval").body),
                ast.keyword("device", ast.parse("grad.device", mode="eval").body),
            ],
        )

    visit_Tuple = visit_List

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        node.value = self.visit(node.value)
        return node
