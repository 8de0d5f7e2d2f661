"""``edits_as_code(run)``: the plain PyTorch hooks that make a run's edits.

The code defines ``install_edits(model, **inputs) -> list[RemovableHandle]``, to call before the
forward pass, and, when an edit sits on a node made by the loss function, ``install_loss_edits(loss)``,
to call before ``loss.backward()``. Nodes are reached the way a user would: from the output of the
module that made them, through ``grad_fn.next_functions``.

Text that comes from a run (an edit's source, node ids, op names; a loaded file may hold any string
the schema lets through) enters the code only as ``repr``-quoted strings, or in comments as it is
when every character is printable and else ``repr``-quoted, so no newline in it can end a comment
and start a live line. Live code is only what hookviz writes:
an expression's ``as_torch_code()`` (re-printed from its parsed tree, one line) and identifiers.
"""

from __future__ import annotations

from collections import deque

from hookviz.data.run import LOSS_MODULE, Run
from hookviz.edits.edit import Edit
from hookviz.edits.expression import Expression
from hookviz.errors import ExpressionError
from hookviz.text import module_name


def _path(run: Run, start: str, target: str) -> str | None:
    """The ``next_functions`` slots from node ``start`` to ``target`` (breadth first), as the
    arguments after the start in a ``_node(...)`` call of the generated code; None when unreachable."""
    producers = {}
    for producer, consumer, data in run.graph.edges(data=True):
        producers.setdefault(consumer, []).append((data["slot"], producer))
    queue, seen = deque([(start, "")]), {start}
    while queue:
        node, path = queue.popleft()
        if node == target:
            return path
        for slot, producer in sorted(producers.get(node, [])):
            if producer not in seen:
                seen.add(producer)
                queue.append((producer, f"{path}, {slot}"))
    return None


_NODE_HELPER = [
    "def _node(fn, output_nr, *slots):",
    '    """Follow next_functions by slot, looking through full backward hooks\' identity Nodes."""',
    "    def skip(fn, nr):",
    '        while fn is not None and type(fn).__name__ == "BackwardHookFunctionBackward":',
    "            fn, nr = fn.next_functions[nr]",
    "        return fn, nr",
    "    fn, _ = skip(fn, output_nr)",
    "    for slot in slots:",
    "        fn, _ = skip(*fn.next_functions[slot])",
    "    return fn",
    "",
    "def _first_tensor(output):",
    '    """The tensor a legacy module hook hangs on: descend into [0], or a dict\'s first tensor."""',
    "    while not isinstance(output, torch.Tensor):",
    "        output = next(v for v in output.values() if isinstance(v, torch.Tensor)) "
    "if isinstance(output, dict) else output[0]",
    "    return output",
    "",
]


def _input_leaves(run: Run) -> set[str]:
    """Leaves that are forward inputs (named by argument), not parameters (a run read from a file
    written before ``Run.input_names`` existed: the root call's inputs)."""
    if run.input_names or not run.calls:
        return set(run.input_names)
    return set(run.calls[0].inputs or ())


def _module_expression(name: str) -> str:
    return "model" if name == "" else f"model.get_submodule({name!r})"


def _comment(text: str) -> str:
    """``text`` for a comment: as it is when it is one printable line, else ``repr``-quoted (newlines
    and other line breaks escaped)."""
    return text if text.isprintable() else repr(text)


def _recorded_source(edit: Edit) -> str | None:
    """For an edit loaded from a file (its transform only raises), the expression it recorded, or
    None when it recorded a callable's name (see hookviz.files.saving)."""
    source = getattr(edit.transform, "recorded_source", None)
    if source is None:
        return None
    try:
        Expression(source)
    except ExpressionError:
        return None
    return source


def _code(edit: Edit) -> str:
    """The edit as a Python expression over ``grad``."""
    source = _recorded_source(edit)
    return Expression(source).as_torch_code() if source is not None else edit.code()


def _callable_source(edit: Edit) -> str | None:
    """Source defining ``transform_<id>`` for a callable edit; a placeholder for one loaded from a file."""
    if _recorded_source(edit) is not None:
        return None
    if hasattr(edit.transform, "recorded_source"):
        return f"transform_{edit.id} = ...  # your callable {edit.source!r}: define it here (grad -> Tensor)"
    return edit.callable_source()


def _slot_function(name: str, edits: list[Edit], argument: str, signature: str, returns: str) -> list[str]:
    lines = [f"def {name}({signature}):", f"    {argument} = list({argument})"]
    for edit in edits:
        lines += [
            f"    grad = {argument}[{edit.slot.index}]  # {edit.id}: {_comment(edit.source)}",
            f"    {argument}[{edit.slot.index}] = {_code(edit)}",
        ]
    lines.append(f"    return {returns}")
    return lines


def edits_as_code(run: Run | None, edits=None) -> str:
    """Source code (a string) of plain PyTorch hooks equivalent to ``run.edits``.

    Args:
        run: a recorded run; its graph locates the edited Nodes and modules.
        edits: other edits on the same graph instead of ``run.edits`` (``Session.edits_as_code``
            passes the session's current edits, which may be newer than its last run).
    """
    edits = list(run.edits if edits is None and run is not None else edits or [])
    if not edits:
        return "# no edits: nothing to install\n"
    header = [
        '"""Gradient edits made in hookviz, as plain PyTorch hooks."""',
        "import math",
        "import torch",
        "",
        *_NODE_HELPER,
        "",
    ]
    helpers: list[str] = []
    body: list[str] = []
    loss_body: list[str] = []
    input_names: list[str] = []
    for edit in edits:
        source = _callable_source(edit)
        if source:
            helpers += [source, ""]
    by_site: dict[tuple, list[Edit]] = {}
    for edit in edits:
        key = (edit.target, "grad" if edit.slot.name == "grad" else edit.slot.name)
        by_site.setdefault(key, []).append(edit)
    for number, ((target, kind), site_edits) in enumerate(by_site.items()):
        fn = f"edit_{number}"
        if kind in ("grad_input", "grad_output"):
            module = _module_expression(target)
            if kind == "grad_input":
                helpers += _slot_function(
                    fn, site_edits, "grad_input", "module, grad_input, grad_output", "tuple(grad_input)"
                )
                body.append(f"handles.append({module}.register_full_backward_hook({fn}))")
            else:
                helpers += _slot_function(
                    fn, site_edits, "grad_output", "module, grad_output", "tuple(grad_output)"
                )
                body.append(f"handles.append({module}.register_full_backward_pre_hook({fn}))")
            helpers.append("")
            continue
        node = run.nodes[target]
        if node.kind != "op":
            helpers += [f"def {fn}(grad):"]
            helpers += [f"    grad = {_code(e)}  # {e.id}: {_comment(e.source)}" for e in site_edits] + [
                "    return grad",
                "",
            ]
            if target not in run.asked_grads and target not in _input_leaves(run):
                body.append(f"handles.append(model.get_parameter({target!r}).register_hook({fn}))")
            else:
                input_names.append(target)
                body.append(f"handles.append(inputs[{target!r}].register_hook({fn}))")
            continue
        if kind == "grad":
            kind, site_edits = "grad_outputs", [e.on_grad_outputs(e.target, 0) for e in site_edits]
        if kind == "grad_inputs":
            helpers += _slot_function(
                fn, site_edits, "grad_inputs", "grad_inputs, grad_outputs", "tuple(grad_inputs)"
            )
            register = f"register_hook({fn})"
        else:
            helpers += _slot_function(fn, site_edits, "grad_outputs", "grad_outputs", "tuple(grad_outputs)")
            register = f"register_prehook({fn})"
        helpers.append("")
        if node.module == LOSS_MODULE:
            path = _path(run, run.root, target)
            loss_body.append(
                f"_node(loss.grad_fn, 0{path}).{register}  # {_comment(target)} ({_comment(node.op)})"
            )
            continue
        call = run.module_io(node.module, node.module_call)
        path = _path(run, call.output_node, target) if call.output_node else None
        if path is None:
            path = _path(run, run.root, target)
            loss_body.append(
                f"_node(loss.grad_fn, 0{path}).{register}  # {_comment(target)} ({_comment(node.op)})"
            )
            continue
        hook = f"_install_{fn}"
        helpers += [
            f"def {hook}(module, args, output):",
            f"    # {_comment(target)} ({_comment(node.op)}) is reached from the output of module "
            f"{node.module!r} ({_comment(module_name(node.module, run.root_type))})",
            "    first = _first_tensor(output)",
            f"    _node(first.grad_fn, first.output_nr{path}).{register}",
            "",
        ]
        body.append(f"handles.append({_module_expression(node.module)}.register_forward_hook({hook}))")
    lines = header + helpers
    lines += [
        "def install_edits(model, **inputs):",
        '    """Register the edits; call before forward. Returns handles: h.remove() undoes each."""',
        "    handles = []",
        *[f"    {line}" for line in body],
        "    return handles",
        "",
    ]
    if loss_body:
        lines += [
            "def install_loss_edits(loss):",
            '    """Edits on nodes made by the loss function: call after computing loss, before backward."""',
            *[f"    {line}" for line in loss_body],
            "",
        ]
    usage = ", ".join(f"{n}={n}" if n.isidentifier() else _comment(n) for n in dict.fromkeys(input_names))
    lines += [
        "# Usage:",
        f"#   handles = install_edits(model{', ' + usage if usage else ''})",
        "#   loss = loss_fn(model(...))" + ("; install_loss_edits(loss)" if loss_body else ""),
        "#   loss.backward()",
        "#   for handle in handles: handle.remove()",
    ]
    return "\n".join(lines) + "\n"
