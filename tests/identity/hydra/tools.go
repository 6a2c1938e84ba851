//go:build tools

// Package tools pins the OAuth 2.1 / OpenID Connect server the identity tests run against
// (ory hydra, tests/identity/build.sh builds it).
package tools

import (
	_ "github.com/ory/hydra/v2"
)
