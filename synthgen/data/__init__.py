"""Files and rows: prompt datasets, conversations, selection, result/error rows, the store."""
