#!/usr/bin/env python3
"""Score every stored row with the teacher: top-k logprobs per generated token, for distillation; see --help."""

import sys

if __name__ == "__main__":
    try:
        from synthgen.cli.teacher import main
        from synthgen.errors import exit_process
    except KeyboardInterrupt:
        print("score_teacher.py: interrupted", file=sys.stderr)
        sys.exit(130)
    except ModuleNotFoundError as exc:  # run outside the environment the README sets up
        from synthgen import missing_requirement

        missing_requirement("score_teacher.py", exc)
    exit_process(main())
