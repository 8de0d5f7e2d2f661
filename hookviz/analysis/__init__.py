"""Reading runs: findings about vanishing, exploding and dead gradients, and why a hook saw what it saw."""
