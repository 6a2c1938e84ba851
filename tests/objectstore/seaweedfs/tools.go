//go:build tools

// Package tools pins the S3-compatible object store the artifact tests run against
// (SeaweedFS's `weed` binary; tests/objectstore/build.sh builds it).
package tools

import (
	_ "github.com/seaweedfs/seaweedfs/weed"
)
