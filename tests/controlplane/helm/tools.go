//go:build tools

// Package tools pins the helm CLI the chart tests use and actionlint, which checks the users' CI
// workflow (tests/controlplane/build.sh builds both).
package tools

import (
	_ "github.com/rhysd/actionlint/cmd/actionlint"
	_ "helm.sh/helm/v3/cmd/helm"
)
