#!/usr/bin/env python3
"""Turn outputs/<dataset>/raw_responses.jsonl into training files (SpecForge, token ids, SFT messages); see --help."""

import sys

if __name__ == "__main__":
    try:
        from synthgen.cli.export import main
    except ModuleNotFoundError as exc:  # run outside the environment the README sets up
        from synthgen import missing_requirement

        missing_requirement("export_training.py", exc)
    sys.exit(main())
