"""Files a run keeps besides checkpoints (plots, tables, model files), with size, sha256 and type."""
