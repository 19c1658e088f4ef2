"""Registered models per project, their versions, aliases and evidence-based promotion."""
