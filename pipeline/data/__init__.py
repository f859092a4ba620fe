"""Data files shipped with the pipeline (the model catalog)."""
