"""Preparing claims: the pipeline, its checkpoint, CDI specs, safe file operations."""
