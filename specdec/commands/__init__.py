"""``specdec`` sub-commands; see :mod:`specdec.cli` for how they are registered."""
