"""``python -m specdec.cli`` runs the ``specdec`` command."""

import sys

from . import main

sys.exit(main())
