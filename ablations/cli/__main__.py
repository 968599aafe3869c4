"""``python -m ablations.cli``: the same as ``python run_ablations.py``."""

import sys

from ablations.cli.main import main

sys.exit(main())
