"""The records a run produces (Run, NodeRecord, ModuleCall, ...): plain data, read by every other layer."""
