"""Recording: one forward + backward of the user's model under hooks, and the Run built from it."""
