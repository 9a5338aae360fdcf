"""SGLang 0.5.23's tool-call detectors (``--tool-call-parser``), one-shot (``detect_and_parse``), one module
per family. Importing the package registers them all (:mod:`synthgen.chat.parsers.registry`).

Each detector returns None when its ``has_tool_call`` is false (the answer is left as it is), else the
answer SGLang keeps and the calls it found. An exception means SGLang's serving layer would have caught
one: the caller keeps the whole answer, no calls.
"""

from synthgen.chat.parsers.tools import (  # noqa: F401  (each registers its parsers)
    deepseek,
    gemma,
    glm,
    harmony,
    json_calls,
    json_tags,
    k2_horizon,
    kimi,
    minimax,
    muse,
    pythonic,
    xml_args,
)
