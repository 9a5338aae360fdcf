"""export_training.py's job: result rows to training files and the report on them.

pipeline.py    one export top to bottom: request -> datasets -> config -> scan -> report | write
config.py      ExportRequest (the arguments as parsed) and ExportConfig (resolved)
select.py      which datasets (one without results is a note), which files may be written, the split
routes.py      the tokenizer, the vocabulary and the render check's route per dataset
scan.py        pass 1: rows read, dropped by reason (filters.py, pure), kept by byte offset
fields.py      the pieces of an output row: messages, tool calls, template kwargs, meta (pure)
formats/       one module per format, each entered in the table by @register (base.py)
write.py       pass 2: rows made, render-checked and written atomically
report.py      --report and the closing lines, as text (pure); page.py: --report --html FILE
rendercheck.py exported rows rendered as the trainer will, against the stored ids; histogram.py
"""
