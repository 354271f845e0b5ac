"""``python -m flyviz`` runs the ``flyviz`` command."""

import sys

from flyviz.cli import main

sys.exit(main())
