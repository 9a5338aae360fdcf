"""The teacher scoring pass: top-k logprobs of every stored row, for distillation (docs/teacher.md).

units.py turns stored rows into what is scored (pure), answer.py reads a scoring answer (pure),
scorer.py sends the requests and writes the side file (synthgen/data/teacherfile.py), cost.py says what a
pass costs before it is spent.
"""
