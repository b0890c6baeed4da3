"""Planning a fleet: whether, where and how much to speculate, from measurements of the engine that serves."""
