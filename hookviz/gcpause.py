"""Python's cyclic garbage collector paused while hookviz builds a large structure.

Recording a run allocates tens of objects per autograd Node, and the widget builds a dict per Node
for the page; all of them stay reachable until the run and the widget are returned. Every
collection triggered meanwhile scans the growing heap and frees nothing: on a 20,000-Node graph
that was half of ``show()``'s time. Objects whose last reference goes are still freed at once
(reference counting), and the collector runs as usual afterwards (see the ``gc`` module's
documentation on generations and thresholds).
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def cyclic_gc_paused():
    """Disable the cyclic collector inside the block, and enable it again after (only if it was
    enabled before: a caller's own ``gc.disable()`` is kept). Nesting is safe."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
