"""Reports over a run directory: dataset statistics (stats) and alignment (align_report)."""
