"""What every format's render takes beside the result document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..analysis.fabrics import FAIL_PCT, PASS_PCT

if TYPE_CHECKING:
    from ..analysis.fabrics import Expectation


@dataclass(frozen=True)
class Options:
    """What a render may need beside the document."""
    source: str = "run"  # the result file's name, for titles
    expected: Optional[Expectation] = None  # the fabric fits are judged against
    pass_pct: float = PASS_PCT
    fail_pct: float = FAIL_PCT
    samples: bool = False  # keep every per-iteration sample (formats with SAMPLES)
    image: Optional[str] = None  # markdown, html: the plot file shown beside the text (a report folder)


def printable(name: str) -> str:
    """A file name as text a page, a plot or a terminal can show: bytes of it that are no UTF-8 (kept by
    Python as surrogates, which no encoder writes) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def records(doc: dict, samples: bool) -> list[dict]:
    """The document's records, without their raw samples unless `samples`."""
    return doc["results"] if samples else [{k: v for k, v in r.items() if k != "samples_us"} for r in doc["results"]]
