//go:build tools

// Package tools pins the rule tester the alert tests run (Prometheus's `promtool`, whose
// `test rules` evaluates the chart's PrometheusRule against scraped series; tests/alerts/build.sh
// builds it).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
