"""What a user sees of a saved GPT-2 page and of a watch shown live while training runs.

1. ``save_html`` of GPT-2 small (12 layers x 768, 1 x 128 tokens, built from its config) writes
   under 8 MB; the page opens from ``file://`` with no kernel, draws the graph, and every control
   that needs a kernel (re-run, device, apply, remove and reset edits) is disabled with a tooltip
   that says why.
2. In a real JupyterLab, one cell opens a watch, shows it and trains for a few seconds: the page's
   step count and heatmap change while the cell is still busy, a NaN put into a weight shows a
   finding at once (put in right after an update, it shows well before the one-update-every-3-
   seconds throttle would allow the next), and when
   the loop ends the page shows the final step, no longer marked live.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ARTIFACTS = Path(__file__).parent / "artifacts"
SAVED_PAGE_LIMIT = 8_000_000  # bytes: under a mail attachment limit


def _gpt2_small_widget():
    import torch
    import torch.nn.functional as F
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    import hookviz

    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12)
    model = GPT2LMHeadModel(config)
    tokens = torch.randint(0, config.vocab_size, (1, 128))

    def next_token(out):
        logits = out.logits[:, :-1]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))

    return hookviz.show(model, (tokens,), loss_fn=next_token)


def test_saved_gpt2_small_page_is_small_and_its_kernel_controls_are_off(tmp_path):
    harness.require_browser()
    pytest.importorskip("transformers")
    widget = _gpt2_small_widget()
    # An edit waits in the list (remove and reset need the kernel), and a node is open.
    addmm = next(n["id"] for n in widget.graph["nodes"] if n["op"] == "AddmmBackward0")
    assert widget.apply_edit(addmm, "grad_inputs[0]", "grad * 0") is not None
    assert widget.select(addmm)
    path = widget.save_html(tmp_path / "gpt2.html")
    size = path.stat().st_size
    assert size < SAVED_PAGE_LIMIT, f"the saved page is {size / 1e6:.2f} MB"
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page(width=1400, height=1100) as page,
        harness.diagnostics(page, ARTIFACTS / "live_saved_gpt2_failure.png") as console,
    ):
        requests = []
        page.on("request", lambda request: requests.append(request.url))
        page.goto(path.as_uri())
        harness.wait_painted(page, 1, timeout=120_000)
        root = page.locator(".hookviz-widget")
        drawn = page.evaluate("() => document.querySelector('.hookviz-widget').cy.nodes(':visible').length")
        assert drawn > 10
        # The inspector on screen when the page was saved keeps its values; its editor is off.
        root.locator(".hv-inspector .hv-title").filter(has_text="AddmmBackward0").wait_for(timeout=30_000)
        controls = {
            "re-run": root.locator(".hv-rerun"),
            "device": root.locator(".hv-device"),
            "apply": root.locator(".hv-apply"),
            "remove edit": root.locator(".hv-remove"),
            "reset edits": root.locator(".hv-reset"),
        }
        checked = 0
        for name, control in controls.items():
            assert control.count() == 1, name
            state = control.evaluate("(el) => ({disabled: el.disabled, title: el.title})")
            assert state["disabled"], f"{name} is enabled on a page with no kernel"
            assert "no Python kernel" in state["title"], f"{name}'s tooltip does not say why: {state}"
            checked += 1
        assert checked == len(controls)
        # The edit was applied and never re-run, but a saved page cannot re-run: nothing asks for it.
        assert "hv-pending" not in controls["re-run"].get_attribute("class")
        assert "press Re-run" not in root.inner_text()
        assert all(url.startswith(("file:", "blob:", "data:")) for url in requests), requests
        assert not [line for line in console if line.startswith("pageerror")]
        page.screenshot(path=str(ARTIFACTS / "live_saved_gpt2.png"))


TRAINING = """\
import time
import torch, torch.nn.functional as F, hookviz
from IPython.display import display
from hookviz.examples import sigmoid_mlp
torch.manual_seed(0)
model = sigmoid_mlp(depth=8, width=64, inputs=64, classes=10)
x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
poisoned_at = updates = None
with hookviz.watch(model) as w:
    view = hookviz.show(w, every_seconds=3.0)
    display(view)
    start = time.monotonic()
    while time.monotonic() - start < 16:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        if poisoned_at is None and time.monotonic() - start > 10:
            # right after an update went out, so the next regular one is 3 s away
            updates = view.live.updates if updates is None else updates
            if view.live.updates > updates:
                with torch.no_grad():
                    model[0].weight[0, 0] = float("nan")
                poisoned_at = time.time()
        time.sleep(0.005)
print(f"final step {w.steps[-1]} poisoned at {poisoned_at:.3f}")
"""

# Sampled in the page every 50 ms: what the user sees (the watch bar's title and step, the
# heatmap's last step tick, the banner) and whether the cell is still running.
_SAMPLER = """() => {
    window.liveSamples = [];
    const read = () => {
        const root = document.querySelector('.hookviz-widget');
        const prompt = document.querySelector('.jp-Notebook .jp-Cell .jp-InputPrompt');
        const ticks = root ? [...root.querySelectorAll('.hv-heatmap .xtick text')] : [];
        window.liveSamples.push({
            at: Date.now(),
            busy: !!prompt && prompt.textContent.includes('[*]'),
            title: root?.querySelector('.hv-watch b')?.textContent || '',
            step: root?.querySelector('.hv-watch-step')?.textContent || '',
            tick: ticks.length ? ticks[ticks.length - 1].textContent : '',
            banner: root?.querySelector('.hv-banner:not([hidden])')?.textContent || '',
        });
    };
    window.liveSampler = setInterval(read, 50);
}"""


STDOUT = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]'


@pytest.fixture
def lab(lab_folder):
    harness.write_notebook(lab_folder.root / "live.ipynb", [TRAINING])
    return lab_folder


def test_a_watch_shown_live_updates_while_the_cell_trains(lab):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        harness.chromium_page(width=1300, height=1400) as page,
        harness.diagnostics(page, ARTIFACTS / "live_training_failure.png") as console,
    ):
        harness.open_notebook(page, lab, "live.ipynb")
        page.evaluate(_SAMPLER)
        harness.run_cell(page, 0)
        root = harness.widget_root(page)
        page.wait_for_function(
            "() => window.liveSamples.filter(s => s.busy && s.step).length > 0", timeout=60_000
        )
        page.wait_for_timeout(4_000)
        root.screenshot(path=str(ARTIFACTS / "live_training_mid_cell.png"))
        page.wait_for_function(
            f"() => document.querySelector('{STDOUT}')?.textContent.includes('final step')",
            timeout=120_000,
        )
        page.wait_for_timeout(1_500)  # the final update follows the watch's close
        root.screenshot(path=str(ARTIFACTS / "live_training_final.png"))
        samples = page.evaluate("() => { clearInterval(window.liveSampler); return window.liveSamples; }")
        printed = page.locator(STDOUT).inner_text()
        final_step, poisoned_at = re.search(r"final step (\d+) poisoned at ([\d.]+)", printed).groups()
        poisoned_ms = float(poisoned_at) * 1000
        busy = [s for s in samples if s["busy"] and s["step"]]
        # While the cell runs, the page moves on: several step counts and heatmap ends, marked live.
        assert len({s["step"] for s in busy}) >= 3, busy[-5:]
        assert len({s["tick"] for s in busy if s["tick"]}) >= 2, busy[-5:]
        assert all(s["title"].startswith("Live watch") for s in busy)
        # The NaN, put in right after an update, shows at once while the cell still runs: the next
        # regular update was 3 s away.
        nan_seen = [s for s in busy if "NaN" in s["banner"]]
        assert nan_seen, "no NaN finding was shown while the cell ran"
        assert not [s for s in samples if "NaN" in s["banner"] and s["at"] < poisoned_ms - 100]
        delay = nan_seen[0]["at"] - poisoned_ms
        assert delay < 1_500, f"the NaN finding came {delay:.0f} ms after the NaN (throttle: 3000 ms)"
        # After the loop: the final step, and the bar no longer says live.
        last = samples[-1]
        assert not last["busy"]
        assert last["step"].split()[0] == final_step, (last, final_step)
        assert last["title"].startswith("Watch of")
        assert not [line for line in console if line.startswith("pageerror")]
