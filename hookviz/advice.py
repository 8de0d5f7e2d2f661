"""The code hookviz's messages advise: one registry, each snippet a line of Python that runs as shown.

A finding, a note on the page, a banner or an error message that tells the user to run something
takes the code from :data:`ADVICE` (``advice("fill_details")``), never spelled in its own text, so
that the code a message advises is code that runs: ``tests/test_advice.py`` executes every snippet
here against real runs and watches (a NaN run, a vanishing sigmoid MLP's watch, ...), and fails
when a message elsewhere in hookviz spells a call of hookviz's API in its text.

Each snippet is written with the names a user's own code has, the same in every snippet:

- ``model``: the ``torch.nn.Module``; ``args``: the tuple of its forward arguments;
  ``loss_fn``: ``loss_fn(output) -> scalar tensor``; ``optimizer``: its ``torch.optim`` optimizer; ``scaler``:
  its ``torch.amp.GradScaler``;
- ``session``: a :class:`hookviz.Session`; ``run``: a :class:`hookviz.Run` it recorded;
- ``watch``: a :class:`hookviz.Watch`; ``history``: a watch history (``watch.gather()``'s);
- ``widget``: a :class:`hookviz.Widget`; ``path``: a file name; ``step``: a kept step; ``text``:
  part of a name; ``target``, ``slot``, ``transform``: an edit's node, hook site and expression.
"""

from __future__ import annotations

# name -> the code, one line, as a message shows it and as it runs.
ADVICE: dict[str, str] = {
    # a NaN/Inf in a watch: one recorded run of that step finds the op that made it
    "diagnose_a_step": "hookviz.diagnose(hookviz.Session(model, args, loss_fn=loss_fn).run())",
    "diagnose": "hookviz.diagnose(run)",
    # a lazy run's details
    "fill_details": "run.fill_details()",
    "eager_session": 'hookviz.Session(model, args, loss_fn=loss_fn, details="eager")',
    "new_forward": "session.run(forward=True)",
    "add_edit": "session.edit(target, slot, transform)",
    # files
    "record_run": "hookviz.Session(model, args, loss_fn=loss_fn).run()",
    "load_run": "hookviz.load(path)",
    "diff_runs": "hookviz.diff(run, hookviz.load(path))",
    "save_run": "hookviz.save(run, path)",
    "save_watch": "hookviz.save(watch, path)",
    "save_watch_with_run": "hookviz.save(watch, path, run=session.run())",
    "show_saved_history": "hookviz.show(history, on=hookviz.load(path))",
    # the widget
    "show_model": "hookviz.show(model, args, loss_fn=loss_fn)",
    "show_watch_on_graph": "hookviz.show_watch(watch, hookviz.Session(model, args, loss_fn=loss_fn))",
    "show_run": "hookviz.show(run)",
    "show_baseline": "hookviz.show(run, baseline=hookviz.load(path))",
    "show_watch_on": "hookviz.show(watch, on=run)",
    "show_history_on_run": "hookviz.show(history, on=run)",
    "show_watch_on_run": "hookviz.show(watch, on=hookviz.Session(model, args, loss_fn=loss_fn).run())",
    "search": "widget.search(text)",
    "save_html_pinned": "widget.save_html(path, pinned=[target])",
    "save_html_all": 'widget.save_html(path, values="all")',
    # watching
    "watch": "hookviz.watch(model)",
    "watch_outputs": "hookviz.watch(model, outputs=True)",
    "watch_every_step": "hookviz.watch(model, stats_every=1)",
    "watch_with_scaler": "hookviz.watch(model, optimizer=optimizer, scaler=scaler)",
    "close_watch": "watch.close()",
    "loss_scale": "watch.loss_scale(step)",
}


def advice(name: str) -> str:
    """The code of advice ``name`` (a key of :data:`ADVICE`), to embed in a message as it stands.

    Raises:
        KeyError: ``name`` is not in :data:`ADVICE` (a message advising unregistered code).
    """
    return ADVICE[name]
