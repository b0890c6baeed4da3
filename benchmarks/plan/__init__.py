"""Checks of the fleet model: the simulator's predictions against real decoding runs."""
