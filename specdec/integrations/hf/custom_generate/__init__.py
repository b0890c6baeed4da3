"""The folder transformers' string form loads: ``custom_generate/generate.py`` (see
:mod:`specdec.integrations.hf.folder`). A package only so that it installs with specdec."""
