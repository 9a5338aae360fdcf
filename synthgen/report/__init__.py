"""The run report: one self-contained HTML page per output folder (``<output-dir>/report.html``).

    figures    pure: result and error rows -> per-dataset figures (counts, token lengths, histograms)
    examples   pure: a few rows of each dataset kept, as they stream past, to show (shortest, median, longest, ...)
    mix        pure: lengths per recipe and per sample, prompts by samples, the share whose samples differ
    timeline   the run's small time series (``<output-dir>/timeline.jsonl``): written as the run goes, read back
    svg        pure: inline SVG charts (histograms, bars, lines over time) with text alternatives
    overtime   pure: the page's "Over time" section: the timeline's charts, outages, restarts, runs' marks
    markup     pure: small HTML pieces the sections share (a stat, a time, a legend, a cell)
    page       pure: figures + timeline -> one HTML page (no script, no outside file, prints, narrow windows)
    folder     I/O: read an output folder incrementally, write the page atomically, and the run's live report

The run (``synthgen.run``) and the export (``synthgen.export``) both call it; it reads ``synthgen.data``.
"""
