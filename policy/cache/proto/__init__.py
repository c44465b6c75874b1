"""Generated gRPC stubs of the topology embedding cache (embeddings.proto; regenerate with hack/gen-proto.sh)."""
