"""The export formats, one module each, entered in the table (base.FORMATS) by ``@register`` as they import.

A new format is a module here with one ``@register``'d row maker,
imported below."""

from synthgen.export.fields import Expected, Exported
from synthgen.export.formats import kd, messages, specforge, tokens  # noqa: F401  (each registers itself)
from synthgen.export.formats.base import FORMATS, Format, Refusal, get, names, register

DEFAULT = "specforge"

__all__ = ["DEFAULT", "FORMATS", "Expected", "Exported", "Format", "Refusal", "get", "names", "register"]
