"""The plain think-tag reasoning split; it now lives in synthgen.parsers beside SGLang's named parsers."""

from synthgen.parsers import Split, split_reasoning

__all__ = ["Split", "split_reasoning"]
