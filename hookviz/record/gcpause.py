"""Python's cyclic garbage collector paused while hookviz builds a large structure.

Recording a run allocates tens of objects per autograd Node, and the widget builds a dict per Node
for the page; all of them stay reachable until the run and the widget are returned. Every
collection triggered meanwhile scans the growing heap and frees nothing: on a 20,000-Node graph
that was half of ``show()``'s time. Objects whose last reference goes are still freed at once
(reference counting), and the collector runs as usual afterwards (see the ``gc`` module's
documentation on generations and thresholds).

When the pause ends, the collector would scan everything built at the first allocation after it
(the youngest generation's count is over its threshold), and again one generation up a few runs
later, and free nothing: about 0.25 s each on a 20,000-Node run, and on a 100-Node MLP about 1.4 ms
of each 11 ms run, counting the full collections that the young ones set off in time. So when more
new objects than the youngest generation's threshold are alive as the outermost pause ends, they
are moved to the oldest generation at once (``gc.freeze()`` then ``gc.unfreeze()``: "put them back
into the oldest generation", per the ``gc`` documentation), where only a full collection scans
them, as it would once they had aged there. The cost is that cyclic garbage made before the pause
ends waits for that full collection too. Objects the caller froze with ``gc.freeze()`` stay
frozen: then nothing is moved.
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def cyclic_gc_paused():
    """Disable the cyclic collector inside the block, and enable it again after (only if it was
    enabled before: a caller's own ``gc.disable()`` is kept). Nesting is safe. See the module
    docstring for what happens to a large build's objects when the outermost pause ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            # Not when the caller froze objects: unfreeze() would release theirs too.
            if gc.get_count()[0] > gc.get_threshold()[0] and gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
