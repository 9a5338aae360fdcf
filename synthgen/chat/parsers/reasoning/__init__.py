"""SGLang 0.5.23's reasoning parsers (``--reasoning-parser``), one-shot (``parse_non_stream``): the think-tag
rule (:mod:`.base`, :mod:`.think_tags`) and, one module per family, the detectors with a rule of their own.
Importing the package registers them all (:mod:`synthgen.chat.parsers.registry`)."""

from synthgen.chat.parsers.reasoning import (  # noqa: F401  (each registers its parsers)
    apertus,
    cohere,
    harmony,
    inkling,
    kimi,
    minimax,
    muse,
    think_tags,
)
