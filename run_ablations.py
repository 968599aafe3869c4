#!/usr/bin/env python3
"""Run ablations of the multimodal regression model on Ray Tune.

    python run_ablations.py --space components          # 9 variants x 3 seeds, synthetic data
    python run_ablations.py list                        # spaces and their variants
    python run_ablations.py --space components --dry-run
    python run_ablations.py report ablation_results/<experiment>
    python run_ablations.py --help                      # the subcommands
"""

import sys

from ablations.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
