"""drakit: a framework for Kubernetes DRA node drivers."""
