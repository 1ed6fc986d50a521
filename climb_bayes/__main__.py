"""``python -m climb_bayes`` runs the command-line interface."""

import sys

from climb_bayes.cli import main

sys.exit(main())
