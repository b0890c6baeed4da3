"""The tiny-model matrix every architecture test runs: each of ``specdec.models.TINY_MODEL_TYPES``
plus sliding-window variants whose window binds at the tests' prompt and output lengths."""

from specdec.models import TINY_MODEL_TYPES

WINDOW = 4  # small enough to bind: prompts + new tokens reach position 18

#: case name -> (model type, config overrides)
CASES = {name: (name, {}) for name in TINY_MODEL_TYPES}
CASES.update({
    "mistral-window": ("mistral", {"sliding_window": WINDOW}),
    "qwen2-window": ("qwen2", {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1}),
    "gemma2-window": ("gemma2", {"sliding_window": WINDOW}),
    "gemma3-window": ("gemma3_text", {"sliding_window": WINDOW}),
    "phi3-window": ("phi3", {"sliding_window": WINDOW}),
})
