#!/usr/bin/env python3
"""Generate training data from prompt datasets through an SGLang server. See --help."""

import sys

if __name__ == "__main__":
    try:
        from synthgen.cli.run import main  # seconds of imports: Ctrl-C may come now
        from synthgen.errors import exit_process
    except KeyboardInterrupt:
        print("run_inference.py: interrupted", file=sys.stderr)
        sys.exit(130)
    except ModuleNotFoundError as exc:  # run outside the environment the README sets up
        from synthgen import missing_requirement

        missing_requirement("run_inference.py", exc)
    exit_process(main())
