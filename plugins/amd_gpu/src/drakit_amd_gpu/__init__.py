"""drakit backend for AMD Instinct GPUs."""
