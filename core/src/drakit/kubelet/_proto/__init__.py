"""Generated gRPC stubs for the kubelet plugin APIs; regenerate with hack/gen-protos.py."""
