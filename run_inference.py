#!/usr/bin/env python3
"""Generate training data from prompt datasets through an SGLang server. See --help."""

import sys

from synthgen.cli import main

if __name__ == "__main__":
    sys.exit(main())
