#!/usr/bin/env python3
"""Turn outputs/<dataset>/raw_responses.jsonl into training files (SpecForge, token ids, SFT messages); see --help."""

import sys

from synthgen.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
