"""drakit backend."""
