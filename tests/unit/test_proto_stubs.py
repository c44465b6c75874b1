"""The committed gRPC stubs in policy/cache/proto/ (Python) and scheduler-plugin/pkg/proto/ (Go) are exactly what
hack/gen-proto.sh generates (hack/verify-proto.sh)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_grpc_stubs_match_the_proto_file():
    out = subprocess.run(
        [str(ROOT / "hack" / "verify-proto.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        # a bare PATH but Go's (the Go generators are built from hack/controlplane/protoc-gen into the cache)
        env={
            "PATH": f"/usr/bin:/bin:{Path(shutil.which('go') or '/usr/local/go/bin/go').parent}",
            "HOME": os.environ.get("HOME", "/root"),
            "PYTHON": sys.executable,
        },
    )
    assert out.returncode == 0, out.stderr
    assert "up to date" in out.stdout


def test_the_stubs_import_as_part_of_the_policy_package():
    from policy.cache.proto import embeddings_pb2, embeddings_pb2_grpc

    assert embeddings_pb2.DESCRIPTOR.package == "hrlscheduler.embeddings.v1"
    assert hasattr(embeddings_pb2_grpc, "EmbeddingCacheStub")
