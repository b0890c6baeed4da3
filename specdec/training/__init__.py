"""Training for trained proposers: self-distillation data, Medusa heads, and the `specdec train` command."""
